// Gradient accumulation for one instruction-set level (see
// optim/optim_kernels.h): acc = g or acc + g, alone or with the sum of
// squares of the result in the same pass. The blocks of that sum are
// common/grad_stats_block.h's, the code GradStats runs, so the two give the
// same bits.
#include "common/grad_stats_block.h"
#include "optim/optim_kernels.h"
#include "optim/step_loop.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

template <Elem G>
struct AccumulateOp {
  TF_SIMD_INLINE VF operator()(float* const* s, const Storage<G>* grads) {
    const VF g = Load<G>(grads);
    const VF acc = first ? g : AccumulateOne(LoadF32(s[0]), g, neg_one);
    StoreF32(s[0], acc);
    return acc;  // no copy out (O = 0)
  }
  bool first;
  VF neg_one = Opaque(Set1(-1.0f));
};

template <Elem G>
void Accumulate(float* acc, const void* grads, size_t begin, size_t end, bool first) {
  AccumulateOp<G> op{first};
  float* const state[1] = {acc};
  StepLoop<1, G, 0>(op, state, /*backup=*/nullptr, grads, nullptr, begin, end);
}

template <Elem G>
ChunkStats AccumulateStats(float* acc, const void* grads, size_t begin, size_t end, bool first) {
  return ChunkSumSquares<G>(acc, grads, begin, end, first);
}

}  // namespace

const optim_internal::GradKernels kGradKernels = {
    {&Accumulate<Elem::kF32>, &Accumulate<Elem::kBF16>, &Accumulate<Elem::kF16>},
    {&AccumulateStats<Elem::kF32>, &AccumulateStats<Elem::kBF16>, &AccumulateStats<Elem::kF16>},
};

}  // namespace tierflow::TIERFLOW_ISA_NS
