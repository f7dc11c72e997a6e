// LionStep: validation and per-step constants here; the loop is lion_kernel.cc,
// compiled once per instruction-set level (see optim/optim_kernels.h).
#include "optim/lion.h"

#include <cmath>

#include "optim/chunk_loop.h"

namespace tierflow {

StatusOr<StepResult> LionStep(const LionOptions& o, const LionStepArgs& args,
                              const OptimSpans& spans, std::optional<Isa> requested) {
  TF_ASSIGN_OR_RETURN(const Isa isa, IsaToRun(requested, "LionStep"));
  if (!std::isfinite(o.lr) || o.lr < 0 || !(o.beta1 >= 0 && o.beta1 <= 1) ||
      !(o.beta2 >= 0 && o.beta2 <= 1) || !std::isfinite(o.weight_decay) || o.weight_decay < 0) {
    return InvalidArgumentError(
        "Lion options: need finite lr >= 0, beta1 and beta2 in [0, 1], weight_decay >= 0");
  }
  if (!std::isfinite(args.grad_scale))
    return InvalidArgumentError("Lion grad_scale must be finite");
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, true, false, "Lion"));

  optim_internal::LionConstants c;
  c.grad_scale = args.grad_scale;
  c.beta1 = o.beta1;
  c.one_minus_beta1 = 1.0f - o.beta1;
  c.beta2 = o.beta2;
  c.one_minus_beta2 = 1.0f - o.beta2;
  c.decay = static_cast<float>(1.0 - static_cast<double>(o.lr) * o.weight_decay);
  c.lr = o.lr;

  return optim_internal::RunStepKernel(optim_internal::LionKernelsFor(isa), c, spans);
}

}  // namespace tierflow
