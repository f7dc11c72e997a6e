// AdamStep's loop for one instruction-set level (see optim/optim_kernels.h),
// in the operation order of optim/adam.h:
//   g = grad * grad_scale;  Adam-L2: g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * (g * g)
//   p = p * decay - step_size * (m / (sqrt(v) * inv_sqrt_bc2 + eps))
// (the adds of two terms that may both be NaN are AddScaled, common/simd.h).
#include "optim/optim_kernels.h"
#include "optim/step_loop.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

using optim_internal::AdamConstants;
using optim_internal::StepStreams;

// Whether some grads[i] * grad_scale (fp32, rounded once) in [begin, end) is
// Inf or NaN.
template <Elem G>
TF_SIMD_INLINE bool ScaledGradsNonFinite(const void* grads_bytes, float grad_scale, size_t begin,
                                         size_t end) {
  const Storage<G>* grads = static_cast<const Storage<G>*>(grads_bytes);
  const VF scale = Set1(grad_scale);
  VF seen = Zero();
  size_t i = begin;
  for (; i + kLanes <= end; i += kLanes) seen = MarkNonFinite(seen, Mul(Load<G>(grads + i), scale));
  if (i < end) {
    PartialLanes<Storage<G>> g;
    g.Fill(grads + i, end - i);
    seen = MarkNonFinite(seen, Mul(Load<G>(g.v), scale));
  }
  return SawNonFinite(seen);
}

// kL2: Adam with L2 (weight decay added to the gradient) rather than AdamW, a
// template argument so that the loop tests nothing per vector.
template <Elem G, bool kL2>
struct AdamOp {
  explicit AdamOp(const AdamConstants& c)
      : grad_scale(Set1(c.grad_scale)),
        neg_weight_decay(Set1(-c.weight_decay)),
        beta1(Set1(c.beta1)),
        neg_one_minus_beta1(Set1(-c.one_minus_beta1)),
        beta2(Set1(c.beta2)),
        neg_one_minus_beta2(Set1(-c.one_minus_beta2)),
        inv_sqrt_bc2(Set1(c.inv_sqrt_bc2)),
        eps(Set1(c.eps)),
        decay(Set1(c.decay)),
        step_size(Set1(c.step_size)) {}

  TF_SIMD_INLINE VF operator()(float* const* s, const Storage<G>* grads) {
    VF g = Mul(Load<G>(grads), grad_scale);
    VF p = LoadF32(s[0]);
    if constexpr (kL2) g = AddScaled(g, neg_weight_decay, p);
    const VF m = AddScaled(Mul(beta1, LoadF32(s[1])), neg_one_minus_beta1, g);
    const VF g2 = Mul(g, g);
    squares = MarkNonFiniteSquare(squares, g2);
    const VF v = AddScaled(Mul(beta2, LoadF32(s[2])), neg_one_minus_beta2, g2);
    const VF denom = Add(Mul(Sqrt(v), inv_sqrt_bc2), eps);
    p = Sub(Mul(p, decay), Mul(step_size, Div(m, denom)));
    StoreF32(s[0], p);
    StoreF32(s[1], m);
    StoreF32(s[2], v);
    return p;
  }

  VF grad_scale, neg_weight_decay, beta1, neg_one_minus_beta1, beta2, neg_one_minus_beta2,
      inv_sqrt_bc2, eps, decay, step_size;
  // Whether some g * g was not finite (MarkNonFiniteSquare): one instruction
  // per vector where marking the scaled gradient itself takes two. A scaled
  // gradient that is not finite makes its square (with L2: its sum with the
  // decay term, then the square) not finite too.
  VF squares = Zero();
};

template <Elem G, int O, bool kL2>
bool AdamRangeOf(const AdamConstants& c, const StepStreams& s, size_t begin, size_t end) {
  AdamOp<G, kL2> op(c);
  float* const state[3] = {s.params, s.exp_avg, s.exp_avg_sq};
  float* const backup[3] = {s.backup_params, s.backup_exp_avg, s.backup_exp_avg_sq};
  StepLoop<3, G, O>(op, state, s.backup_params != nullptr ? backup : nullptr, s.grads, s.out, begin,
                    end);
  if (!SawNonFiniteSquare(op.squares)) return false;
  // Rarely a finite gradient's square overflows (|g| > 1.8e19, or its sum
  // with the decay term): only the scaled gradients themselves say.
  return ScaledGradsNonFinite<G>(s.grads, c.grad_scale, begin, end);
}

template <Elem G, int O>
bool AdamRange(const AdamConstants& c, const StepStreams& s, size_t begin, size_t end) {
  return c.l2 ? AdamRangeOf<G, O, true>(c, s, begin, end)
              : AdamRangeOf<G, O, false>(c, s, begin, end);
}

}  // namespace

const optim_internal::AdamKernels kAdamKernels = {{
    {&AdamRange<Elem::kF32, 0>, &AdamRange<Elem::kF32, 1>, &AdamRange<Elem::kF32, 2>,
     &AdamRange<Elem::kF32, 3>},
    {&AdamRange<Elem::kBF16, 0>, &AdamRange<Elem::kBF16, 1>, &AdamRange<Elem::kBF16, 2>,
     &AdamRange<Elem::kBF16, 3>},
    {&AdamRange<Elem::kF16, 0>, &AdamRange<Elem::kF16, 1>, &AdamRange<Elem::kF16, 2>,
     &AdamRange<Elem::kF16, 3>},
}};

}  // namespace tierflow::TIERFLOW_ISA_NS
