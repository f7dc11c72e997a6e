// The dispatch side of the optimizer kernels (optim/optim_kernels.h): the
// kernel tables of each instruction-set level, and the parallel loop that
// hands each thread its ranges of fixed chunks.
//
// Internal header: include only from src/optim (compiled normally, not per level).
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <atomic>
#include <cstddef>

#include "common/cpu_isa.h"
#include "optim/optim_kernels.h"
#include "optim/optim_spans.h"

namespace tierflow::optim_internal {

inline constexpr size_t kChunkElems = kOptimChunkElems;

const AdamKernels& AdamKernelsFor(Isa isa);
const LionKernels& LionKernelsFor(Isa isa);
const SgdKernels& SgdKernelsFor(Isa isa);
const GradKernels& GradKernelsFor(Isa isa);

inline StepStreams ToStreams(const OptimSpans& spans) {
  return StepStreams{
      spans.params, spans.exp_avg,       spans.exp_avg_sq,     spans.grads,
      spans.out,    spans.backup_params, spans.backup_exp_avg, spans.backup_exp_avg_sq};
}
inline int GradIndex(const OptimSpans& spans) { return static_cast<int>(spans.grad_dtype); }
inline int OutIndex(const OptimSpans& spans) {
  return spans.out == nullptr ? 0 : 1 + static_cast<int>(spans.out_dtype);
}

// Calls range_fn(begin, end) over [0, n) in parallel, each call covering
// whole chunks of kChunkElems counted from 0 (the last chunk may be short),
// and returns true when any call did. Which thread runs which chunks does not
// change any result: elementwise kernels do not care, and the reductions
// (grad_stats.cc) keep one result per chunk. range_fn must be safe to call
// concurrently for disjoint ranges.
template <typename RangeFn>
bool ParallelForChunks(size_t n, const RangeFn& range_fn) {
  if (n == 0) return false;
  const size_t num_chunks = (n + kChunkElems - 1) / kChunkElems;
  std::atomic<bool> any{false};
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<size_t>& chunks) {
        const size_t begin = chunks.begin() * kChunkElems;
        const size_t end = chunks.end() * kChunkElems < n ? chunks.end() * kChunkElems : n;
        if (range_fn(begin, end)) any.store(true, std::memory_order_relaxed);
      },
      tbb::simple_partitioner());
  return any.load(std::memory_order_relaxed);
}

// One optimizer step over all of `spans`: the kernel of the spans' gradient
// and copy-out dtypes from `kernels` (a level's AdamKernels, LionKernels or
// SgdKernels), run with the step's constants over parallel chunks.
template <typename Kernels, typename Constants>
StepResult RunStepKernel(const Kernels& kernels, const Constants& c, const OptimSpans& spans) {
  const auto kernel = kernels.step[GradIndex(spans)][OutIndex(spans)];
  const StepStreams streams = ToStreams(spans);
  StepResult result;
  result.has_non_finite_grads = ParallelForChunks(
      spans.n, [&](size_t begin, size_t end) { return kernel(c, streams, begin, end); });
  return result;
}

}  // namespace tierflow::optim_internal
