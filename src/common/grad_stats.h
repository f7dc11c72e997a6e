// One read-only pass over a gradient span: the sum of squares (for the global
// gradient norm used by clipping) and whether any gradient is Inf or NaN (for
// fp16 loss scaling: skip the step and lower the scale).
//
// The engine runs this over every sub-group before any AdamStep when it needs
// either answer, because both decisions are global: a step that already ran
// on some sub-groups cannot be undone. The CPU device runs it too, as
// Stream::SumSquares (tierflow/device.h), so gradients summed on the emulated
// accelerator give the host's bits. It lives here, below both the device and
// optim, for that reason; optim/grad_stats.h adds the fused
// accumulate-and-sum that gives the same bits.
#pragma once

#include <cstddef>
#include <functional>

#include "common/cpu_isa.h"
#include "common/grad_stats_kernels.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

struct GradStatsResult {
  // Sum of grad^2 over the span. NaN when has_non_finite.
  // Accumulated in fp32 within each 64-element block (16 lanes of 4 elements
  // each, then a fixed tree over the lanes) and in double across blocks and
  // chunks, in a fixed order: the same bits for any thread count, alignment
  // and instruction-set level, relative error below ~1e-6 (a block whose fp32
  // sum overflows is redone in double). Sums of several spans add in double.
  double sum_squares = 0;
  bool has_non_finite = false;  // some element is Inf or NaN
};

// REQUIRES: grads points to n elements of `dtype` (null only when n == 0).
// Errors: InvalidArgument for a null pointer with n > 0; SelectedIsa()'s
// error when the level choice failed.
// Thread safety: re-entrant; runs on oneTBB in the calling thread's arena,
// with the loops of the process's instruction-set level (common/cpu_isa.h).
StatusOr<GradStatsResult> GradStats(const void* grads, DType dtype, size_t n);

// The same at an explicit level; every level gives the same bits.
// Errors: also FailedPrecondition when this CPU cannot run `isa` (nothing runs).
StatusOr<GradStatsResult> GradStats(const void* grads, DType dtype, size_t n, Isa isa);

// The partial sums GradStats adds: one per chunk of kGradStatsChunkElems
// elements counted from grads (the last may be short), each the same bits
// GradStats computes for it, NaN for a chunk holding an Inf or NaN. Adding
// them from 0.0 in chunk order gives GradStats' sum_squares bit for bit, so
// a span cut at chunk boundaries (ranks' partitions) sums to the same bits
// as one pass over it once the partials are put back in order.
// REQUIRES: out holds GradStatsChunks(n) doubles.
inline constexpr size_t kGradStatsChunkElems = size_t{1} << 14;  // optim's kOptimChunkElems
inline constexpr size_t GradStatsChunks(size_t n) {
  return (n + kGradStatsChunkElems - 1) / kGradStatsChunkElems;
}
Status GradChunkSquares(const void* grads, DType dtype, size_t n, double* out);
Status GradChunkSquares(const void* grads, DType dtype, size_t n, double* out, Isa isa);

namespace grad_stats_internal {

// The sum GradStats makes of its chunks, for the passes that must give its
// bits (optim's AccumulateGradsWithStats): chunk_fn(begin, end) over each
// chunk of kGradStatsChunkElems of [0, n), in parallel on oneTBB; the
// results added from 0.0 in chunk order, NaN when some chunk was non-finite.
GradStatsResult SumChunks(size_t n, const std::function<ChunkStats(size_t, size_t)>& chunk_fn);

// The chunk loops of `isa`.
const GradStatsKernels& GradStatsKernelsFor(Isa isa);

}  // namespace grad_stats_internal

}  // namespace tierflow
