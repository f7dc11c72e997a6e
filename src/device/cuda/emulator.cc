// device/cuda/emulator.h.
#include "device/cuda/emulator.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define TF_EMU_ASAN 1
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace tierflow::cuda_emu {
namespace {

// Each CUDA thread of a block is a fiber (ucontext) on the launching host
// thread; a fiber runs until it waits at a barrier or a warp exchange, or
// returns, and the scheduler then resumes the next one that can run. One
// host thread, so a block's threads never race, and a switch costs far less
// than waking an OS thread (the first version's thread per CUDA thread spent
// most of its time in futexes).

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "CUDA emulator: %s (block %u,%u,%u thread %u,%u,%u)\n", what, blockIdx.x,
               blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  std::abort();
}

// A barrier of `expected` fibers, lowered as fibers return.
struct Barrier {
  int expected = 0;
  int arrived = 0;
};

struct Warp {
  Barrier barrier;
  LaneWords in[32] = {};
  LaneWords out[32] = {};
};

constexpr size_t kStackBytes = size_t{256} << 10;

struct Fiber {
  ucontext_t context;
  char* stack = nullptr;
  uint3 index{};
  Barrier* waiting = nullptr;  // the barrier it waits at, or null when it can run
  bool done = false;
};

// One launch's state, for the host thread that runs it.
struct Grid {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Barrier block;
  int current = 0;
  ucontext_t scheduler;
  const std::function<void()>* thread = nullptr;
  std::vector<std::byte> shared;
#ifdef TF_EMU_ASAN
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_size = 0;
#endif
};

thread_local Grid* tl_grid = nullptr;

Grid& CurrentGrid(const char* what) {
  if (tl_grid == nullptr) Fail(what);
  return *tl_grid;
}

// Switches from the running fiber to the scheduler; returns when resumed.
// `exiting`: the fiber has returned and never resumes.
void ToScheduler(Grid& g, bool exiting) {
  Fiber& f = g.fibers[static_cast<size_t>(g.current)];
#ifdef TF_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, g.scheduler_stack,
                                 g.scheduler_stack_size);
#endif
  if (exiting) return;  // the fiber's function returns to uc_link: the scheduler
  swapcontext(&f.context, &g.scheduler);
#ifdef TF_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// Every fiber waiting at `b` can run again.
void Release(Grid& g, Barrier& b) {
  b.arrived = 0;
  for (Fiber& f : g.fibers) {
    if (f.waiting == &b) f.waiting = nullptr;
  }
}

// The running fiber arrives at `b`: the last to arrive runs `last` and
// goes on; the others wait until it has.
template <typename F>
void Arrive(Grid& g, Barrier& b, const F& last) {
  if (++b.arrived == b.expected) {
    last();
    Release(g, b);
    return;
  }
  g.fibers[static_cast<size_t>(g.current)].waiting = &b;
  ToScheduler(g, false);
}

int LanesOfWarp(int warp, int threads) { return std::min(32, threads - warp * 32); }

void FiberMain() {
  Grid& g = *tl_grid;
#ifdef TF_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g.scheduler_stack, &g.scheduler_stack_size);
#endif
  (*g.thread)();
  Fiber& f = g.fibers[static_cast<size_t>(g.current)];
  Warp& w = g.warps[static_cast<size_t>(g.current / 32)];
  if (w.barrier.arrived > 0) Fail("a lane returned while its warp waits in a shuffle or mma");
  --w.barrier.expected;
  --g.block.expected;
  if (g.block.arrived > 0 && g.block.arrived == g.block.expected) Release(g, g.block);
  f.done = true;
  ToScheduler(g, true);
}

// Runs one block: every fiber from the start until all have returned.
void RunBlock(Grid& g) {
  const int threads = static_cast<int>(g.fibers.size());
  g.block = Barrier{threads, 0};
  for (size_t i = 0; i < g.warps.size(); ++i) {
    g.warps[i].barrier = Barrier{LanesOfWarp(static_cast<int>(i), threads), 0};
  }
  for (Fiber& f : g.fibers) {
    f.done = false;
    f.waiting = nullptr;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &g.scheduler;
    makecontext(&f.context, FiberMain, 0);
  }
  for (int left = threads; left > 0;) {
    bool ran = false;
    for (int t = 0; t < threads; ++t) {
      Fiber& f = g.fibers[static_cast<size_t>(t)];
      if (f.done || f.waiting != nullptr) continue;
      g.current = t;
      threadIdx = f.index;
      ran = true;
#ifdef TF_EMU_ASAN
      void* fake = nullptr;
      __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
      swapcontext(&g.scheduler, &f.context);
#ifdef TF_EMU_ASAN
      __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
      if (f.done) --left;
    }
    if (!ran && left > 0) Fail("deadlock: every thread left waits at a barrier or a warp exchange");
  }
}

}  // namespace

void RunGrid(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
             const std::function<void()>& thread) {
  if (tl_grid != nullptr) Fail("a launch inside a kernel");
  Grid g;
  const size_t threads = static_cast<size_t>(block.x) * block.y * block.z;
  if (threads < 1 || threads > 1024) Fail("a block of no or more than 1024 threads");
  void* stacks = mmap(nullptr, threads * kStackBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) Fail("no memory for the fibers' stacks");
  g.fibers.resize(threads);
  for (size_t t = 0; t < threads; ++t) {
    g.fibers[t].stack = static_cast<char*>(stacks) + t * kStackBytes;
    const auto u = static_cast<unsigned>(t);
    g.fibers[t].index = uint3{u % block.x, (u / block.x) % block.y, u / (block.x * block.y)};
  }
  g.warps = std::vector<Warp>((threads + 31) / 32);
  g.thread = &thread;
  g.shared.assign(dynamic_shared_bytes + 16, std::byte{0xFF});
  blockDim = block;
  gridDim = grid;
  tl_grid = &g;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = uint3{x, y, z};
        RunBlock(g);
      }
    }
  }
  tl_grid = nullptr;
  munmap(stacks, threads * kStackBytes);
}

void* DynamicShared() {
  Grid& g = CurrentGrid("dynamic shared memory outside a kernel");
  auto p = reinterpret_cast<uintptr_t>(g.shared.data());
  return reinterpret_cast<void*>((p + 15) / 16 * 16);
}

void WarpExchange(const uint32_t* in, int in_words, uint32_t* out, int out_words,
                  void (*combine)(const LaneWords* in, LaneWords* out)) {
  Grid& g = CurrentGrid("a warp exchange outside a kernel");
  Warp& w = g.warps[static_cast<size_t>(g.current / 32)];
  if (w.barrier.expected != 32) Fail("a shuffle or mma in a warp without 32 lanes running");
  const int lane = g.current % 32;
  std::memcpy(w.in[lane], in, sizeof(uint32_t) * static_cast<size_t>(in_words));
  Arrive(g, w.barrier, [&] { combine(w.in, w.out); });
  std::memcpy(out, w.out[lane], sizeof(uint32_t) * static_cast<size_t>(out_words));
}

namespace {

float Half16ToFloat(uint16_t bits, bool bf16) {
  if (bf16) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

// The element of a register's pair: the lower column (or k) in the low half.
float Elem(uint32_t reg, int hi, bool bf16) {
  return Half16ToFloat(static_cast<uint16_t>(hi != 0 ? reg >> 16 : reg & 0xFFFF), bf16);
}

template <bool kBf16>
void CombineMma(const LaneWords* in, LaneWords* out) {
  // Lane words: a[0..3], b0, b1, c[0..3] (fp32 bits).
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const uint32_t* w = in[lane];
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = Elem(w[0], h, kBf16);
      A[g + 8][2 * t + h] = Elem(w[1], h, kBf16);
      A[g][2 * t + 8 + h] = Elem(w[2], h, kBf16);
      A[g + 8][2 * t + 8 + h] = Elem(w[3], h, kBf16);
      B[2 * t + h][g] = Elem(w[4], h, kBf16);
      B[2 * t + 8 + h][g] = Elem(w[5], h, kBf16);
    }
    float c[4];
    std::memcpy(c, &w[6], sizeof(c));
    C[g][2 * t] = c[0];
    C[g][2 * t + 1] = c[1];
    C[g + 8][2 * t] = c[2];
    C[g + 8][2 * t + 1] = c[3];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = {g, g, g + 8, g + 8};
    const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    float d[4];
    for (int i = 0; i < 4; ++i) {
      double sum = C[rows[i]][cols[i]];
      for (int k = 0; k < 16; ++k) {
        sum += static_cast<double>(A[rows[i]][k]) * static_cast<double>(B[k][cols[i]]);
      }
      d[i] = static_cast<float>(sum);
    }
    std::memcpy(out[lane], d, sizeof(d));
  }
}

}  // namespace

void MmaM16N8K16(bool bf16, float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint32_t in[10] = {a[0], a[1], a[2], a[3], b0, b1};
  std::memcpy(&in[6], c, sizeof(c));
  uint32_t out[4];
  WarpExchange(in, 10, out, 4, bf16 ? CombineMma<true> : CombineMma<false>);
  std::memcpy(c, out, sizeof(c));
}

void LoadMatrixX4Trans(uint32_t (&r)[4], const uint16_t* row) {
  uint32_t in[2];
  std::memcpy(in, &row, sizeof(row));
  uint32_t out[4];
  WarpExchange(in, 2, out, 4, [](const LaneWords* ins, LaneWords* outs) {
    const uint16_t* rows[32];
    for (int l = 0; l < 32; ++l) {
      std::memcpy(&rows[l], ins[l], sizeof(rows[l]));
      if (reinterpret_cast<uintptr_t>(rows[l]) % 16 != 0)
        Fail("ldmatrix: a row not 16-byte aligned");
    }
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int m = 0; m < 4; ++m) {
        // Matrix m's row i is lane 8m + i's; transposed: (2t, g), (2t + 1, g).
        const uint16_t lo = rows[8 * m + 2 * t][g], hi = rows[8 * m + 2 * t + 1][g];
        outs[l][m] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
      }
    }
  });
  std::memcpy(r, out, sizeof(out));
}

}  // namespace tierflow::cuda_emu

void __trap() { tierflow::cuda_emu::Fail("__trap()"); }

int atomicMin(int* address, int value) {  // one host thread: no race to guard
  const int old = *address;
  if (value < old) *address = value;
  return old;
}

void __syncthreads() {
  using tierflow::cuda_emu::Grid;
  Grid& g = tierflow::cuda_emu::CurrentGrid("__syncthreads outside a kernel");
  tierflow::cuda_emu::Arrive(g, g.block, [] {});
}
