// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") on
// the CPU over flat fp32 spans, on the same skeleton as AdamStep.
//
// Per element, with g = grad * grad_scale:
//   c = beta1 * m + (1 - beta1) * g
//   p = p * (1 - lr * weight_decay) - lr * sign(c)      (sign(0) = 0)
//   m = beta2 * m + (1 - beta2) * g
//   out = p rounded to out_dtype (when spans.out is set)
// One moment (spans.exp_avg); spans.exp_avg_sq is unused. The scalar
// reference is LionReferenceStep (optim/optim_reference.h).
#pragma once

#include <optional>

#include "common/cpu_isa.h"
#include "optim/optim_spans.h"
#include "tierflow/status.h"

namespace tierflow {

struct LionOptions {
  float lr = 1e-4f;           // Default: 1e-4. REQUIRES: finite, >= 0.
  float beta1 = 0.9f;         // Default: 0.9. REQUIRES: 0 <= beta1 <= 1.
  float beta2 = 0.99f;        // Default: 0.99. REQUIRES: 0 <= beta2 <= 1.
  float weight_decay = 0.0f;  // Default: 0 (decoupled, as in AdamW). REQUIRES: >= 0.
};

struct LionStepArgs {
  float grad_scale = 1.0f;  // Default: 1. 1 / loss_scale * clip_coefficient. REQUIRES: finite.
};

// Applies one step at `isa` or the selected level; errors, thread safety and
// determinism as AdamStep.
StatusOr<StepResult> LionStep(const LionOptions& options, const LionStepArgs& args,
                              const OptimSpans& spans, std::optional<Isa> isa = std::nullopt);

}  // namespace tierflow
