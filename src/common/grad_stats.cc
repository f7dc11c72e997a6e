// GradStats: one partial result per fixed chunk (grad_stats_kernels.cc,
// compiled once per instruction-set level), added in chunk order, so the
// double result does not depend on which thread ran which chunk.
#include "common/grad_stats.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tierflow {
namespace grad_stats_internal {
namespace {

constexpr size_t kChunkElems = kGradStatsChunkElems;

// Calls range_fn(begin, end) over [0, n) in parallel, each call covering
// whole chunks of kChunkElems counted from 0 (the last chunk may be short).
// optim's ParallelForChunks does the same for the optimizer's loops.
template <typename RangeFn>
void ForChunks(size_t n, const RangeFn& range_fn) {
  if (n == 0) return;
  const size_t num_chunks = (n + kChunkElems - 1) / kChunkElems;
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<size_t>& chunks) {
        const size_t begin = chunks.begin() * kChunkElems;
        const size_t end = std::min(chunks.end() * kChunkElems, n);
        for (size_t b = begin; b < end; b += kChunkElems) {
          range_fn(b, std::min(end, b + kChunkElems));
        }
      },
      tbb::simple_partitioner());
}

}  // namespace

GradStatsResult SumChunks(size_t n, const std::function<ChunkStats(size_t, size_t)>& chunk_fn) {
  GradStatsResult result;
  std::vector<ChunkStats> chunks(GradStatsChunks(n));
  ForChunks(n,
            [&](size_t begin, size_t end) { chunks[begin / kChunkElems] = chunk_fn(begin, end); });
  for (const ChunkStats& c : chunks) {
    result.sum_squares += c.sum_squares;
    result.has_non_finite |= c.non_finite;
  }
  if (result.has_non_finite) result.sum_squares = std::nan("");
  return result;
}

const GradStatsKernels& GradStatsKernelsFor(Isa isa) {
  return TF_ISA_TABLE(isa, kGradStatsKernels);
}

}  // namespace grad_stats_internal

using grad_stats_internal::ChunkStats;
using grad_stats_internal::GradStatsKernelsFor;

Status GradChunkSquares(const void* grads, DType dtype, size_t n, double* out) {
  TF_ASSIGN_OR_RETURN(Isa isa, SelectedIsa());
  return GradChunkSquares(grads, dtype, n, out, isa);
}

Status GradChunkSquares(const void* grads, DType dtype, size_t n, double* out, Isa isa) {
  TF_RETURN_IF_ERROR(CheckIsaSupported(isa, "GradChunkSquares"));
  if (n == 0) return Status::Ok();
  if (grads == nullptr || out == nullptr) {
    return InvalidArgumentError("GradChunkSquares over " + std::to_string(n) +
                                " gradients: " + (grads == nullptr ? "grads" : "out") + " is null");
  }
  const grad_stats_internal::SumSquaresFn kernel =
      GradStatsKernelsFor(isa).sum_squares[static_cast<int>(dtype)];
  grad_stats_internal::ForChunks(n, [&](size_t begin, size_t end) {
    const ChunkStats c = kernel(grads, begin, end);
    out[begin / kGradStatsChunkElems] = c.non_finite ? std::nan("") : c.sum_squares;
  });
  return Status::Ok();
}

StatusOr<GradStatsResult> GradStats(const void* grads, DType dtype, size_t n) {
  TF_ASSIGN_OR_RETURN(Isa isa, SelectedIsa());
  return GradStats(grads, dtype, n, isa);
}

StatusOr<GradStatsResult> GradStats(const void* grads, DType dtype, size_t n, Isa isa) {
  TF_RETURN_IF_ERROR(CheckIsaSupported(isa, "GradStats"));
  if (n == 0) return GradStatsResult{};
  if (grads == nullptr) {
    return InvalidArgumentError("GradStats over " + std::to_string(n) +
                                " gradients: grads is null");
  }
  const grad_stats_internal::SumSquaresFn kernel =
      GradStatsKernelsFor(isa).sum_squares[static_cast<int>(dtype)];
  return grad_stats_internal::SumChunks(
      n, [&](size_t begin, size_t end) { return kernel(grads, begin, end); });
}

}  // namespace tierflow
