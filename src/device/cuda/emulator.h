// The CUDA kernels on the CPU: what the kernel sources need to compile as
// C++ and run on host threads, so CI checks the kernels themselves (indexing,
// packs and tails, warp shuffles, barriers, tensor-core fragment layouts)
// against the plain references on a machine without a GPU.
//
// Used only where TIERFLOW_CUDA_EMULATION is defined (the emulation tests,
// tests/kernels/emulation/): cuda_elements.cuh includes this header instead
// of launching with <<<>>>. A launch runs at once on the calling thread: a
// fiber per CUDA thread of a block, the blocks one after another (so a
// kernel's static __shared__ arrays are the block's), and returns when the
// grid is done. Streams are ignored; device pointers are host pointers.
//
// What it emulates:
//   threadIdx, blockIdx, blockDim, gridDim   per host thread
//   __syncthreads()                          a barrier of the block's threads
//                                            that have not returned
//   __shfl_sync, __shfl_xor_sync             full-warp exchanges (a lane that
//                                            returned while its warp waits in
//                                            one is an error)
//   mma.sync m16n8k16 (bf16, fp16 -> fp32)   MmaM16N8K16: the PTX fragment
//                                            layouts, products summed in
//                                            double, rounded once
//   dynamic shared memory                    TF_DYNAMIC_SHARED, filled with
//                                            0xFF (NaN) bytes at each launch
//   ldmatrix .x4 .trans                      LoadMatrixX4Trans
//   atomicMin on int
// Not: other atomics, cp.async, other ldmatrix shapes, cooperative groups,
// streams' order (none is used by the kernels it runs). A misuse aborts
// naming it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

// The qualifiers the host compiler leaves undefined or empty.
#undef __shared__
#define __shared__ static
#define __launch_bounds__(...)

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::max;  // the device's integer min and max
using std::min;
[[noreturn]] void __trap();
void __syncthreads();
int atomicMin(int* address, int value);

namespace tierflow::cuda_emu {

// Runs `thread` (one CUDA thread's call of the kernel, after the launch has
// set its indices) for every thread of every block of `grid`.
void RunGrid(dim3 grid, dim3 block, size_t dynamic_shared_bytes,
             const std::function<void()>& thread);

// The calling thread's block's dynamic shared memory.
void* DynamicShared();

// Every lane of the calling thread's warp passes `in` (up to 16 words) and
// gets `out`; `combine(in, out)` sees all 32 lanes' words at once, run by
// the last lane to arrive.
using LaneWords = uint32_t[16];
void WarpExchange(const uint32_t* in, int in_words, uint32_t* out, int out_words,
                  void (*combine)(const LaneWords* in, LaneWords* out));

// c += a b for a warp's m16n8k16 fragments (a: 4 registers of 16-bit pairs,
// b: 2, c: 4 fp32), 16-bit elements bf16 when `bf16`, else fp16.
void MmaM16N8K16(bool bf16, float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: `row` is the calling
// lane's row address (lanes 8m..8m+7: matrix m's rows); r[m] gets matrix m's
// elements (2t, g) and (2t + 1, g) for lane 4g + t, the first in the low half.
void LoadMatrixX4Trans(uint32_t (&r)[4], const uint16_t* row);

// Launches kernel(args...) over grid x block: the emulator's side of
// TF_CUDA_LAUNCH.
template <typename... Params>
struct Launcher {
  dim3 grid, block;
  size_t smem;
  void (*kernel)(Params...);
  template <typename... Args>
  void operator()(const Args&... args) const {
    auto* k = kernel;
    RunGrid(grid, block, smem, [&] { k(args...); });
  }
};
template <typename... Params>
Launcher<Params...> Launch(dim3 grid, dim3 block, size_t smem, void (*kernel)(Params...)) {
  return Launcher<Params...>{grid, block, smem, kernel};
}

template <typename T>
T Shuffle(T v, int lane_or_mask, bool xor_mask) {
  static_assert(sizeof(T) <= 8);
  uint32_t in[3] = {0, 0, static_cast<uint32_t>(lane_or_mask) | (xor_mask ? 0x80000000u : 0u)};
  std::memcpy(in, &v, sizeof(T));
  uint32_t out[2];
  WarpExchange(in, 3, out, 2, [](const LaneWords* ins, LaneWords* outs) {
    for (int l = 0; l < 32; ++l) {
      const uint32_t arg = ins[l][2];
      const int src =
          (arg & 0x80000000u) ? (l ^ static_cast<int>(arg & 31u)) : static_cast<int>(arg & 31u);
      outs[l][0] = ins[src][0];
      outs[l][1] = ins[src][1];
    }
  });
  T r;
  std::memcpy(&r, out, sizeof(T));
  return r;
}

}  // namespace tierflow::cuda_emu

template <typename T>
T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask) {
  return tierflow::cuda_emu::Shuffle(v, lane_mask, true);
}
template <typename T>
T __shfl_sync(unsigned /*mask*/, T v, int src_lane) {
  return tierflow::cuda_emu::Shuffle(v, src_lane, false);
}
