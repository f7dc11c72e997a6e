// SgdStep's loop for one instruction-set level (see optim/optim_kernels.h),
// in the operation order of optim/sgd.h:
//   g = grad * grad_scale;  g = g + weight_decay * p  (when weight_decay != 0)
//   with momentum: buf = g (first step) or momentum * buf + (1 - dampening) * g,
//                  g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
// (the adds of two terms that may both be NaN are AddScaled, common/simd.h).
#include "optim/optim_kernels.h"
#include "optim/step_loop.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

using optim_internal::SgdConstants;
using optim_internal::StepStreams;

// K = 1: params only; K = 2: params and the momentum buffer.
template <int K, Elem G, int O>
struct SgdOp {
  explicit SgdOp(const SgdConstants& c)
      : grad_scale(Set1(c.grad_scale)),
        neg_weight_decay(Set1(-c.weight_decay)),
        lr(Set1(c.lr)),
        momentum(Set1(c.momentum)),
        neg_momentum(Set1(-c.momentum)),
        neg_one_minus_dampening(Set1(-c.one_minus_dampening)),
        decay(c.weight_decay != 0.0f),
        first_step(c.first_step),
        nesterov(c.nesterov) {}

  TF_SIMD_INLINE VF operator()(float* const* s, const Storage<G>* grads) {
    VF g = Mul(Load<G>(grads), grad_scale);
    seen = MarkNonFinite(seen, g);
    VF p = LoadF32(s[0]);
    if (decay) g = AddScaled(g, neg_weight_decay, p);
    if constexpr (K == 2) {
      const VF buf =
          first_step ? g : AddScaled(Mul(momentum, LoadF32(s[1])), neg_one_minus_dampening, g);
      StoreF32(s[1], buf);
      g = nesterov ? AddScaled(g, neg_momentum, buf) : buf;
    }
    p = Sub(p, Mul(lr, g));
    StoreF32(s[0], p);
    return p;
  }

  VF grad_scale, neg_weight_decay, lr, momentum, neg_momentum, neg_one_minus_dampening;
  bool decay, first_step, nesterov;
  VF seen = Zero();
};

template <Elem G, int O>
bool SgdRange(const SgdConstants& c, const StepStreams& s, size_t begin, size_t end) {
  if (c.use_momentum) {
    SgdOp<2, G, O> op(c);
    float* const state[2] = {s.params, s.exp_avg};
    float* const backup[2] = {s.backup_params, s.backup_exp_avg};
    StepLoop<2, G, O>(op, state, s.backup_params != nullptr ? backup : nullptr, s.grads, s.out,
                      begin, end);
    return SawNonFinite(op.seen);
  }
  SgdOp<1, G, O> op(c);
  float* const state[1] = {s.params};
  float* const backup[1] = {s.backup_params};
  StepLoop<1, G, O>(op, state, s.backup_params != nullptr ? backup : nullptr, s.grads, s.out, begin,
                    end);
  return SawNonFinite(op.seen);
}

}  // namespace

const optim_internal::SgdKernels kSgdKernels = {{
    {&SgdRange<Elem::kF32, 0>, &SgdRange<Elem::kF32, 1>, &SgdRange<Elem::kF32, 2>,
     &SgdRange<Elem::kF32, 3>},
    {&SgdRange<Elem::kBF16, 0>, &SgdRange<Elem::kBF16, 1>, &SgdRange<Elem::kBF16, 2>,
     &SgdRange<Elem::kBF16, 3>},
    {&SgdRange<Elem::kF16, 0>, &SgdRange<Elem::kF16, 1>, &SgdRange<Elem::kF16, 2>,
     &SgdRange<Elem::kF16, 3>},
}};

}  // namespace tierflow::TIERFLOW_ISA_NS
