// The sum of squares of plain gradients for one instruction-set level (see
// common/grad_stats_kernels.h); the blocks are common/grad_stats_block.h's.
#include "common/grad_stats_kernels.h"
#include "common/grad_stats_block.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

template <Elem G>
ChunkStats SumSquares(const void* grads, size_t begin, size_t end) {
  return ChunkSumSquares<G>(nullptr, grads, begin, end, false);
}

}  // namespace

const grad_stats_internal::GradStatsKernels kGradStatsKernels = {
    {&SumSquares<Elem::kF32>, &SumSquares<Elem::kBF16>, &SumSquares<Elem::kF16>},
};

}  // namespace tierflow::TIERFLOW_ISA_NS
