// GradStats: one partial result per fixed chunk (grad_kernels.cc, compiled
// once per instruction-set level), added in chunk order, so the double result
// does not depend on which thread ran which chunk.
#include "optim/grad_stats.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "optim/chunk_loop.h"

namespace tierflow {
namespace {

using optim_internal::ChunkStats;
using optim_internal::kChunkElems;

// chunk_fn(begin, end) -> ChunkStats over each chunk, in parallel; the
// results added in chunk order.
template <typename ChunkFn>
GradStatsResult SumChunks(size_t n, const ChunkFn& chunk_fn) {
  GradStatsResult result;
  const size_t num_chunks = (n + kChunkElems - 1) / kChunkElems;
  std::vector<ChunkStats> chunks(num_chunks);
  optim_internal::ParallelForChunks(n, [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kChunkElems) {
      chunks[b / kChunkElems] = chunk_fn(b, std::min(end, b + kChunkElems));
    }
    return false;
  });
  for (const ChunkStats& c : chunks) {
    result.sum_squares += c.sum_squares;
    result.has_non_finite |= c.non_finite;
  }
  if (result.has_non_finite) result.sum_squares = std::nan("");
  return result;
}

static_assert(kGradStatsChunkElems == kChunkElems, "grad_stats.h's chunk is the kernels' chunk");

}  // namespace

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
  const optim_internal::SumSquaresFn kernel =
      optim_internal::GradKernelsFor(isa).sum_squares[static_cast<int>(dtype)];
  optim_internal::ParallelForChunks(n, [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kChunkElems) {
      const ChunkStats c = kernel(grads, b, std::min(end, b + kChunkElems));
      out[b / kChunkElems] = c.non_finite ? std::nan("") : c.sum_squares;
    }
    return false;
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
  const optim_internal::SumSquaresFn kernel =
      optim_internal::GradKernelsFor(isa).sum_squares[static_cast<int>(dtype)];
  return SumChunks(n, [&](size_t begin, size_t end) { return kernel(grads, begin, end); });
}

StatusOr<GradStatsResult> AccumulateGradsWithStats(float* acc, const void* grads, DType grad_dtype,
                                                   size_t n, bool first) {
  TF_ASSIGN_OR_RETURN(Isa isa, SelectedIsa());
  return AccumulateGradsWithStats(acc, grads, grad_dtype, n, first, isa);
}

StatusOr<GradStatsResult> AccumulateGradsWithStats(float* acc, const void* grads, DType grad_dtype,
                                                   size_t n, bool first, Isa isa) {
  TF_RETURN_IF_ERROR(CheckIsaSupported(isa, "AccumulateGradsWithStats"));
  if (n == 0) return GradStatsResult{};
  if (acc == nullptr || grads == nullptr) {
    return InvalidArgumentError("AccumulateGradsWithStats over " + std::to_string(n) +
                                " gradients: " + (acc == nullptr ? "acc" : "grads") + " is null");
  }
  const optim_internal::AccumulateStatsFn kernel =
      optim_internal::GradKernelsFor(isa).accumulate_stats[static_cast<int>(grad_dtype)];
  return SumChunks(n,
                   [&](size_t begin, size_t end) { return kernel(acc, grads, begin, end, first); });
}

}  // namespace tierflow
