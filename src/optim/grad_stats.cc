// GradStats: per-chunk partial sums in a vector, added in chunk order, so the
// double result does not depend on which thread ran which chunk.
#include "optim/grad_stats.h"

#include <cmath>
#include <string>
#include <vector>

#include "optim/block_loop.h"
#include "optim/grad_accumulate.h"

namespace tierflow {

using optim_internal::BlockBuffer;
using optim_internal::kBlockElems;
using optim_internal::kChunkElems;

namespace {

// Adds the block's sum of squares to *sum (fp32 within the block, exact
// fallback in double when that overflows), or sets *non_finite.
template <int N>
void AddBlock(const void* grads, DType dtype, size_t begin, Eigen::Index len, double* sum,
              bool* non_finite) {
  BlockBuffer g;
  optim_internal::LoadScaledGrads<N>(grads, dtype, begin, len, 1.0f, g.data);
  const float block_sum = optim_internal::ConstFloatBlock<N>(g.data, len).square().sum();
  if (std::isfinite(block_sum)) {
    *sum += block_sum;
  } else if (optim_internal::HasNonFinite<N>(g.data, len)) {
    *non_finite = true;
  } else {
    // Finite gradients whose squares overflow fp32: redo in double.
    for (Eigen::Index i = 0; i < len; ++i) *sum += static_cast<double>(g.data[i]) * g.data[i];
  }
}

}  // namespace

namespace {

// GradStats over chunks of kChunkElems, in parallel, partial sums added in
// chunk order; prepare(begin, end) runs on a chunk just before it is summed.
template <typename Prepare>
GradStatsResult SumChunks(const void* grads, DType dtype, size_t n, const Prepare& prepare) {
  GradStatsResult result;
  const size_t num_chunks = (n + kChunkElems - 1) / kChunkElems;
  std::vector<double> chunk_sums(num_chunks, 0.0);
  std::vector<char> chunk_non_finite(num_chunks, 0);
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<size_t>& chunks) {
        for (size_t c = chunks.begin(); c < chunks.end(); ++c) {
          const size_t chunk_end = std::min(n, (c + 1) * kChunkElems);
          prepare(c * kChunkElems, chunk_end);
          double sum = 0;
          bool non_finite = false;
          for (size_t b = c * kChunkElems; b < chunk_end; b += kBlockElems) {
            const size_t len = std::min<size_t>(kBlockElems, chunk_end - b);
            if (len == kBlockElems) {
              AddBlock<kBlockElems>(grads, dtype, b, kBlockElems, &sum, &non_finite);
            } else {
              AddBlock<Eigen::Dynamic>(grads, dtype, b, static_cast<Eigen::Index>(len), &sum,
                                       &non_finite);
            }
          }
          chunk_sums[c] = sum;
          chunk_non_finite[c] = non_finite;
        }
      },
      tbb::simple_partitioner());
  for (size_t c = 0; c < num_chunks; ++c) {
    result.sum_squares += chunk_sums[c];
    result.has_non_finite |= chunk_non_finite[c] != 0;
  }
  if (result.has_non_finite) result.sum_squares = std::nan("");
  return result;
}

}  // namespace

StatusOr<GradStatsResult> GradStats(const void* grads, DType dtype, size_t n) {
  if (n == 0) return GradStatsResult{};
  if (grads == nullptr) {
    return InvalidArgumentError("GradStats over " + std::to_string(n) +
                                " gradients: grads is null");
  }
  return SumChunks(grads, dtype, n, [](size_t, size_t) {});
}

StatusOr<GradStatsResult> AccumulateGradsWithStats(float* acc, const void* grads, DType grad_dtype,
                                                   size_t n, bool first) {
  if (n == 0) return GradStatsResult{};
  if (acc == nullptr || grads == nullptr) {
    return InvalidArgumentError("AccumulateGradsWithStats over " + std::to_string(n) +
                                " gradients: " + (acc == nullptr ? "acc" : "grads") + " is null");
  }
  return SumChunks(acc, DType::kF32, n, [&](size_t begin, size_t end) {
    AccumulateGradRange(acc, grads, grad_dtype, begin, end, first);
  });
}

}  // namespace tierflow
