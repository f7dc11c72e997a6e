// Adam and AdamW on the CPU over flat fp32 spans: the optimizer step of
// ZeRO-Offload-style training, run per sub-group of parameters.
//
// Per element, with g = grad * grad_scale and t = args.step:
//   Adam (L2):       g += weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   step_size = lr / (1 - beta1^t),  denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//     (both corrections are 1 when bias_correction is off)
//   AdamW (decoupled): p = p * (1 - lr * weight_decay) - step_size * (m / denom)
//   Adam (L2):         p = p - step_size * (m / denom)
//   out = p rounded to out_dtype (when spans.out is set)
// This is torch.optim.Adam / AdamW (amsgrad=False). The scalar double-
// precision reference is AdamReferenceStep (optim/optim_reference.h).
#pragma once

#include <cstdint>
#include <optional>

#include "common/cpu_isa.h"
#include "optim/optim_spans.h"
#include "tierflow/status.h"

namespace tierflow {

struct AdamOptions {
  float lr = 1e-3f;           // Default: 1e-3. May change between calls (schedules).
  float beta1 = 0.9f;         // Default: 0.9. REQUIRES: 0 <= beta1 < 1.
  float beta2 = 0.999f;       // Default: 0.999. REQUIRES: 0 <= beta2 < 1.
  float eps = 1e-8f;          // Default: 1e-8. REQUIRES: eps >= 0.
  float weight_decay = 0.0f;  // Default: 0. REQUIRES: >= 0.
  bool decoupled = true;  // Default: true (AdamW). false: L2 decay added to the gradient (Adam).
  bool bias_correction = true;  // Default: true.
};

// What changes from one call to the next.
struct AdamStepArgs {
  // 1-based number of this step, for bias correction. The caller owns the
  // counter: it is saved with the optimizer state and resumed from there.
  // Default: 1. REQUIRES: step >= 1.
  int64_t step = 1;
  // Multiplies every gradient before use: 1 / loss_scale * clip_coefficient.
  // Default: 1. REQUIRES: finite.
  float grad_scale = 1.0f;
};

// Applies one step to spans.params, spans.exp_avg, spans.exp_avg_sq (all
// required) and writes spans.out when set.
// Runs the loops of `isa` (tests, benches), or without one of the process's
// instruction-set level (SelectedIsa(), common/cpu_isa.h); every level gives
// the same bits.
// Errors: InvalidArgument for bad options, step < 1, or missing spans; the
// spans are then untouched. SelectedIsa()'s error when the level choice
// failed; FailedPrecondition when this CPU cannot run `isa` (nothing runs).
// Thread safety: re-entrant; concurrent calls on disjoint spans are fine. Runs
// on oneTBB (the calling thread's arena). Results are bit-identical for any
// thread count, any alignment of the spans and any instruction-set level.
StatusOr<StepResult> AdamStep(const AdamOptions& options, const AdamStepArgs& args,
                              const OptimSpans& spans, std::optional<Isa> isa = std::nullopt);

// Checks the options alone (what AdamStep checks before touching memory).
Status ValidateAdamOptions(const AdamOptions& options);

}  // namespace tierflow
