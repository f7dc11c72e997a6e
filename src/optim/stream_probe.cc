// StreamProbe: one kernel text (stream_probe_kernel.inc) compiled for each
// instruction-set level, in its own namespace with internal linkage, and the
// three shapes that run it. Nothing here is shared with the optimizer kernels.
#include "optim/stream_probe.h"

#include <immintrin.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/half.h"
#include "common/vec_x86.h"

namespace tierflow {
namespace {

// The optimizer skeleton's numbers as of issue 22 (optim/block_loop.h then),
// copied so that the probe keeps its shape whatever the step becomes.
constexpr size_t kChunkElems = size_t{1} << 14;
constexpr size_t kBlockElems = 64;
constexpr size_t kPrefetchAheadElems = 512;
// Static slices start on a multiple of this many elements.
constexpr size_t kSliceAlignElems = 64;

// What one probe call streams: the non-null fp32 state arrays, params first.
struct ProbeStreams {
  float* states[3] = {};
  int num_states = 0;
  const void* grads = nullptr;
  DType grad_dtype = DType::kF32;
  void* out = nullptr;
  float addend = 0;
};

// Asks for the cache lines of [begin, end) of every stream: the state arrays
// for writing, the gradients for reading.
inline void PrefetchStreams(const ProbeStreams& s, size_t begin, size_t end) {
  constexpr size_t kLineBytes = 64;
  for (int k = 0; k < s.num_states; ++k) {
    const char* first = reinterpret_cast<const char*>(s.states[k] + begin);
    const char* last = reinterpret_cast<const char*>(s.states[k] + end);
    for (const char* line = first; line < last; line += kLineBytes) __builtin_prefetch(line, 1);
  }
  const size_t grad_bytes = DTypeSize(s.grad_dtype);
  const char* grads = static_cast<const char*>(s.grads);
  for (size_t offset = begin * grad_bytes; offset < end * grad_bytes; offset += kLineBytes) {
    __builtin_prefetch(grads + offset, 0);
  }
}

// Runs the kernel over [begin, end) of every stream.
using RangeFn = void (*)(const ProbeStreams& s, size_t begin, size_t end);
struct ShapeFns {
  RangeFn blocked_chunk = nullptr;      // one chunk, in prefetched blocks
  RangeFn slice = nullptr;              // one plain pass, the copy out streamed
  RangeFn interleaved_chunk = nullptr;  // one chunk, vector by vector
};

// Each level's functions carry TF_PROBE_TARGET, its instruction set as a
// target attribute (GCC and clang), so that the translation unit's own flags
// stay the build's: the level is chosen at run time.

// ---- baseline: scalar code, vectorized as far as the build's flags allow.
#define TF_PROBE_TARGET
namespace baseline {
using Vec = float;
constexpr size_t kLanes = 1;
inline Vec Splat(float x) { return x; }
inline Vec Add(Vec a, Vec b) { return a + b; }
inline Vec Mul(Vec a, Vec b) { return a * b; }
inline Vec Load(const float* p) { return *p; }
inline Vec Load(const bf16* p) { return Bf16ToFloat(*p); }
inline Vec Load(const fp16* p) { return Fp16ToFloat(*p); }
inline void Store(float* p, Vec x) { *p = x; }
inline void Store(bf16* p, Vec x) { *p = FloatToBf16(x); }
inline void Store(fp16* p, Vec x) { *p = FloatToFp16(x); }
constexpr size_t kStreamAlign = 1;
template <typename T>
inline void StoreStreaming(T* p, Vec x) {
  Store(p, x);
}
inline void Fence() {}
#include "optim/stream_probe_kernel.inc"
}  // namespace baseline
#undef TF_PROBE_TARGET

// ---- AVX2 with FMA and F16C, and AVX-512: the operations of common/vec_x86.h.
#define TF_PROBE_TARGET TF_VEC_AVX2_TARGET
namespace avx2 {
using namespace vec_avx2;  // NOLINT(google-build-using-namespace): the kernel text's vocabulary
#include "optim/stream_probe_kernel.inc"
}  // namespace avx2
#undef TF_PROBE_TARGET

// GCC 12 flags the self-initialised _mm512_undefined_*() inside its AVX-512
// intrinsics as uninitialised once inlined: a false positive in its own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#define TF_PROBE_TARGET TF_VEC_AVX512_TARGET
namespace avx512 {
using namespace vec_avx512;  // NOLINT(google-build-using-namespace)
#include "optim/stream_probe_kernel.inc"
}  // namespace avx512
#undef TF_PROBE_TARGET
#pragma GCC diagnostic pop

ShapeFns SelectFns(Isa isa, const ProbeStreams& s, const OptimSpans& spans) {
  const bool has_out = spans.out != nullptr;
  switch (isa) {
    case Isa::kAvx512:
      return avx512::Select(s.num_states, spans.grad_dtype, has_out, spans.out_dtype);
    case Isa::kAvx2:
      return avx2::Select(s.num_states, spans.grad_dtype, has_out, spans.out_dtype);
    case Isa::kBaseline:
      return baseline::Select(s.num_states, spans.grad_dtype, has_out, spans.out_dtype);
  }
  return {};
}

// Where slice t of `threads` starts (slice `threads` "starts" at n).
size_t SliceBegin(size_t n, size_t t, size_t threads) {
  if (t >= threads) return n;
  const size_t exact = n / threads * t + n % threads * t / threads;  // floor(n * t / threads)
  return exact / kSliceAlignElems * kSliceAlignElems;
}

}  // namespace

std::string_view ProbeShapeName(ProbeShape shape) {
  switch (shape) {
    case ProbeShape::kBlocked:
      return "blocked";
    case ProbeShape::kStaticSlices:
      return "static";
    case ProbeShape::kInterleaved:
      return "interleaved";
  }
  return "unknown";
}

Isa StreamProbeIsa() {
  if (CpuSupportsIsa(Isa::kAvx512)) return Isa::kAvx512;
  if (CpuSupportsIsa(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kBaseline;
}

Status StreamProbe(const OptimSpans& spans, float addend, ProbeShape shape, Isa isa) {
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, false, false, "StreamProbe"));
  if (spans.backup_params != nullptr) {
    return InvalidArgumentError("StreamProbe: the probe takes no backup; clear backup_params");
  }
  if (shape != ProbeShape::kBlocked && shape != ProbeShape::kStaticSlices &&
      shape != ProbeShape::kInterleaved) {
    return InvalidArgumentError("StreamProbe: unknown shape " +
                                std::to_string(static_cast<int>(shape)) +
                                "; use kBlocked, kStaticSlices or kInterleaved");
  }
  if (!CpuSupportsIsa(isa)) {
    return InvalidArgumentError("StreamProbe: this CPU lacks the " + std::string(IsaName(isa)) +
                                " instruction set; use StreamProbeIsa()");
  }
  const size_t n = spans.n;
  if (n == 0) return Status::Ok();
  ProbeStreams s;
  for (float* state : {spans.params, spans.exp_avg, spans.exp_avg_sq}) {
    if (state != nullptr) s.states[s.num_states++] = state;
  }
  s.grads = spans.grads;
  s.grad_dtype = spans.grad_dtype;
  s.out = spans.out;
  s.addend = addend;
  const ShapeFns fns = SelectFns(isa, s, spans);
  if (fns.slice == nullptr) return InternalError("StreamProbe: no kernel for this layout");

  if (shape != ProbeShape::kStaticSlices) {
    const RangeFn chunk_fn =
        shape == ProbeShape::kBlocked ? fns.blocked_chunk : fns.interleaved_chunk;
    const size_t num_chunks = (n + kChunkElems - 1) / kChunkElems;
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, num_chunks, 1),
        [&](const tbb::blocked_range<size_t>& chunks) {
          for (size_t c = chunks.begin(); c < chunks.end(); ++c) {
            chunk_fn(s, c * kChunkElems, std::min(n, (c + 1) * kChunkElems));
          }
        },
        tbb::simple_partitioner());
  } else {
    const size_t threads = static_cast<size_t>(tbb::this_task_arena::max_concurrency());
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, threads, 1),
        [&](const tbb::blocked_range<size_t>& slices) {
          for (size_t t = slices.begin(); t < slices.end(); ++t) {
            fns.slice(s, SliceBegin(n, t, threads), SliceBegin(n, t + 1, threads));
          }
        },
        tbb::static_partitioner());
  }
  return Status::Ok();
}

}  // namespace tierflow
