// AdamStep: validation and per-step constants here; the loop is adam_kernel.cc,
// compiled once per instruction-set level (see optim/optim_kernels.h).
#include "optim/adam.h"

#include <cmath>
#include <string>

#include "optim/chunk_loop.h"

namespace tierflow {

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
                              const OptimSpans& spans, std::optional<Isa> requested) {
  TF_ASSIGN_OR_RETURN(const Isa isa, IsaToRun(requested, "AdamStep"));
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
  optim_internal::AdamConstants c;
  c.grad_scale = args.grad_scale;
  c.weight_decay = o.weight_decay;
  c.l2 = !o.decoupled && o.weight_decay != 0.0f;
  c.beta1 = o.beta1;
  c.one_minus_beta1 = 1.0f - o.beta1;
  c.beta2 = o.beta2;
  c.one_minus_beta2 = 1.0f - o.beta2;
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.eps = o.eps;
  c.decay =
      o.decoupled ? static_cast<float>(1.0 - static_cast<double>(o.lr) * o.weight_decay) : 1.0f;
  c.step_size = static_cast<float>(static_cast<double>(o.lr) / bc1);

  return optim_internal::RunStepKernel(optim_internal::AdamKernelsFor(isa), c, spans);
}

}  // namespace tierflow
