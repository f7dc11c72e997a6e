// SgdStep: validation and per-step constants here; the loop is sgd_kernel.cc,
// compiled once per instruction-set level (see optim/optim_kernels.h).
#include "optim/sgd.h"

#include <cmath>
#include <string>

#include "optim/chunk_loop.h"

namespace tierflow {

StatusOr<StepResult> SgdStep(const SgdOptions& o, const SgdStepArgs& args, const OptimSpans& spans,
                             std::optional<Isa> requested) {
  TF_ASSIGN_OR_RETURN(const Isa isa, IsaToRun(requested, "SgdStep"));
  if (!std::isfinite(o.lr) || o.lr < 0 || !std::isfinite(o.momentum) || o.momentum < 0 ||
      !std::isfinite(o.dampening) || !std::isfinite(o.weight_decay) || o.weight_decay < 0) {
    return InvalidArgumentError(
        "SGD options: need finite lr >= 0, momentum >= 0, weight_decay >= 0 and dampening");
  }
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    return InvalidArgumentError("SGD options: nesterov needs momentum > 0 and dampening == 0");
  }
  if (args.step < 1) {
    return InvalidArgumentError("SGD step number " + std::to_string(args.step) +
                                " is invalid: steps count from 1");
  }
  if (!std::isfinite(args.grad_scale)) return InvalidArgumentError("SGD grad_scale must be finite");
  const bool use_momentum = o.momentum > 0;
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, use_momentum, false, "SGD"));

  optim_internal::SgdConstants c;
  c.grad_scale = args.grad_scale;
  c.weight_decay = o.weight_decay;
  c.lr = o.lr;
  c.use_momentum = use_momentum;
  c.first_step = args.step == 1;
  c.nesterov = o.nesterov;
  c.momentum = o.momentum;
  c.one_minus_dampening = 1.0f - o.dampening;

  return optim_internal::RunStepKernel(optim_internal::SgdKernelsFor(isa), c, spans);
}

}  // namespace tierflow
