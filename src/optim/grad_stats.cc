// AccumulateGradsWithStats: the accumulation's chunks (grad_kernels.cc,
// compiled once per instruction-set level) summed as GradStats sums its own
// (common/grad_stats.h's SumChunks), so the double result is the same bits.
#include "optim/grad_stats.h"

#include <string>

#include "optim/chunk_loop.h"

namespace tierflow {

static_assert(kGradStatsChunkElems == optim_internal::kChunkElems,
              "GradStats' chunk is the optimizer kernels' chunk");

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
  return grad_stats_internal::SumChunks(
      n, [&](size_t begin, size_t end) { return kernel(acc, grads, begin, end, first); });
}

}  // namespace tierflow
