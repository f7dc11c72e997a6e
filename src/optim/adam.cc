// AdamStep: one fused pass per block (see optim/block_loop.h for the skeleton).
#include "optim/adam.h"

#include <cmath>
#include <string>

#include "optim/block_loop.h"

namespace tierflow {

using optim_internal::BlockBuffer;
using optim_internal::FloatBlock;

Status ValidateAdamOptions(const AdamOptions& o) {
  auto bad = [](const std::string& what) { return InvalidArgumentError("Adam options: " + what); };
  if (!std::isfinite(o.lr) || o.lr < 0) return bad("lr must be finite and >= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("beta1 must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("beta2 must be in [0, 1)");
  if (!std::isfinite(o.eps) || o.eps < 0) return bad("eps must be finite and >= 0");
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0) {
    return bad("weight_decay must be finite and >= 0");
  }
  return Status::Ok();
}

StatusOr<StepResult> AdamStep(const AdamOptions& o, const AdamStepArgs& args,
                              const OptimSpans& spans) {
  TF_RETURN_IF_ERROR(ValidateAdamOptions(o));
  if (args.step < 1) {
    return InvalidArgumentError("Adam step number " + std::to_string(args.step) +
                                " is invalid: steps count from 1 (resume from the saved counter)");
  }
  if (!std::isfinite(args.grad_scale)) {
    return InvalidArgumentError("Adam grad_scale must be finite");
  }
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, true, true, "Adam"));

  // Per-step constants in double, rounded to float once.
  const double t = static_cast<double>(args.step);
  const double bc1 = o.bias_correction ? 1.0 - std::pow(static_cast<double>(o.beta1), t) : 1.0;
  const double bc2 = o.bias_correction ? 1.0 - std::pow(static_cast<double>(o.beta2), t) : 1.0;
  const float step_size = static_cast<float>(static_cast<double>(o.lr) / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay =
      o.decoupled ? static_cast<float>(1.0 - static_cast<double>(o.lr) * o.weight_decay) : 1.0f;
  const bool l2 = !o.decoupled && o.weight_decay != 0.0f;
  const float beta1 = o.beta1, one_minus_beta1 = 1.0f - o.beta1;
  const float beta2 = o.beta2, one_minus_beta2 = 1.0f - o.beta2;
  const float eps = o.eps, weight_decay = o.weight_decay, grad_scale = args.grad_scale;

  StepResult result;
  result.has_non_finite_grads =
      optim_internal::ParallelForBlocks(spans, [&]<int N>(size_t begin, Eigen::Index len) {
        BlockBuffer g_buffer;
        optim_internal::LoadScaledGrads<N>(spans.grads, spans.grad_dtype, begin, len, grad_scale,
                                           g_buffer.data);
        const bool non_finite = optim_internal::HasNonFinite<N>(g_buffer.data, len);
        FloatBlock<N> g(g_buffer.data, len);
        FloatBlock<N> p(spans.params + begin, len);
        FloatBlock<N> m(spans.exp_avg + begin, len);
        FloatBlock<N> v(spans.exp_avg_sq + begin, len);
        if (l2) g += weight_decay * p;
        m = beta1 * m + one_minus_beta1 * g;
        v = beta2 * v + one_minus_beta2 * g.square();
        p = p * decay -
            step_size * (m / (v.unaryExpr(optim_internal::ExactSqrtOp()) * inv_sqrt_bc2 + eps));
        if (spans.out != nullptr) {
          optim_internal::StoreNarrowed<N>(spans.params + begin, spans.out, spans.out_dtype, begin,
                                           len);
        }
        return non_finite;
      });
  return result;
}

}  // namespace tierflow
