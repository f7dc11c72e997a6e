// SGD with momentum on the CPU over flat fp32 spans, on the same skeleton as
// AdamStep. Semantics of torch.optim.SGD:
//
// Per element, with g = grad * grad_scale and t = args.step:
//   g += weight_decay * p                                  (L2, when > 0)
//   if momentum > 0:
//     buf = g                                    at t == 1
//     buf = momentum * buf + (1 - dampening) * g  at t > 1
//     g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
//   out = p rounded to out_dtype (when spans.out is set)
// The momentum buffer is spans.exp_avg (required when momentum > 0);
// spans.exp_avg_sq is unused. Reference: SgdReferenceStep.
#pragma once

#include <cstdint>
#include <optional>

#include "common/cpu_isa.h"
#include "optim/optim_spans.h"
#include "tierflow/status.h"

namespace tierflow {

struct SgdOptions {
  float lr = 1e-2f;           // Default: 1e-2. REQUIRES: finite, >= 0.
  float momentum = 0.0f;      // Default: 0 (plain SGD, no buffer). REQUIRES: >= 0.
  float dampening = 0.0f;     // Default: 0. REQUIRES: finite.
  float weight_decay = 0.0f;  // Default: 0. REQUIRES: >= 0.
  bool nesterov = false;      // Default: false. REQUIRES: momentum > 0 and dampening == 0.
};

struct SgdStepArgs {
  // 1-based step number; step 1 initialises the momentum buffer from the
  // gradient (its old contents are ignored). Default: 1. REQUIRES: >= 1.
  int64_t step = 1;
  float grad_scale = 1.0f;  // Default: 1. REQUIRES: finite.
};

// Applies one step at `isa` or the selected level; errors, thread safety and
// determinism as AdamStep.
StatusOr<StepResult> SgdStep(const SgdOptions& options, const SgdStepArgs& args,
                             const OptimSpans& spans, std::optional<Isa> isa = std::nullopt);

}  // namespace tierflow
