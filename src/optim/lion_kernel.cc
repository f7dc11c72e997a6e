// LionStep's loop for one instruction-set level (see optim/optim_kernels.h),
// in the operation order of optim/lion.h:
//   g = grad * grad_scale
//   c = beta1 * m + (1 - beta1) * g
//   p = p * decay - lr * sign(c)      (sign: +-1, +0 for +-0, NaN kept)
//   m = beta2 * m + (1 - beta2) * g
// (the adds of two terms that may both be NaN are AddScaled, common/simd.h).
#include "optim/optim_kernels.h"
#include "optim/step_loop.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

using optim_internal::LionConstants;
using optim_internal::StepStreams;

template <Elem G, int O>
struct LionOp {
  explicit LionOp(const LionConstants& c)
      : grad_scale(Set1(c.grad_scale)),
        beta1(Set1(c.beta1)),
        neg_one_minus_beta1(Set1(-c.one_minus_beta1)),
        beta2(Set1(c.beta2)),
        neg_one_minus_beta2(Set1(-c.one_minus_beta2)),
        decay(Set1(c.decay)),
        lr(Set1(c.lr)) {}

  TF_SIMD_INLINE VF operator()(float* const* s, const Storage<G>* grads) {
    const VF g = Mul(Load<G>(grads), grad_scale);
    seen = MarkNonFinite(seen, g);
    const VF m = LoadF32(s[1]);
    const VF c = AddScaled(Mul(beta1, m), neg_one_minus_beta1, g);
    const VF p = Sub(Mul(LoadF32(s[0]), decay), Mul(lr, Sign(c)));
    StoreF32(s[0], p);
    StoreF32(s[1], AddScaled(Mul(beta2, m), neg_one_minus_beta2, g));
    return p;
  }

  VF grad_scale, beta1, neg_one_minus_beta1, beta2, neg_one_minus_beta2, decay, lr;
  VF seen = Zero();
};

template <Elem G, int O>
bool LionRange(const LionConstants& c, const StepStreams& s, size_t begin, size_t end) {
  LionOp<G, O> op(c);
  float* const state[2] = {s.params, s.exp_avg};
  float* const backup[2] = {s.backup_params, s.backup_exp_avg};
  StepLoop<2, G, O>(op, state, s.backup_params != nullptr ? backup : nullptr, s.grads, s.out, begin,
                    end);
  return SawNonFinite(op.seen);
}

}  // namespace

const optim_internal::LionKernels kLionKernels = {{
    {&LionRange<Elem::kF32, 0>, &LionRange<Elem::kF32, 1>, &LionRange<Elem::kF32, 2>,
     &LionRange<Elem::kF32, 3>},
    {&LionRange<Elem::kBF16, 0>, &LionRange<Elem::kBF16, 1>, &LionRange<Elem::kBF16, 2>,
     &LionRange<Elem::kBF16, 3>},
    {&LionRange<Elem::kF16, 0>, &LionRange<Elem::kF16, 1>, &LionRange<Elem::kF16, 2>,
     &LionRange<Elem::kF16, 3>},
}};

}  // namespace tierflow::TIERFLOW_ISA_NS
