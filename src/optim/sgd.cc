// SgdStep: one fused pass per block (see optim/block_loop.h for the skeleton).
#include "optim/sgd.h"

#include <cmath>
#include <string>

#include "optim/block_loop.h"

namespace tierflow {

using optim_internal::BlockBuffer;
using optim_internal::FloatBlock;

StatusOr<StepResult> SgdStep(const SgdOptions& o, const SgdStepArgs& args,
                             const OptimSpans& spans) {
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

  const bool first_step = args.step == 1;
  const float lr = o.lr, momentum = o.momentum, one_minus_dampening = 1.0f - o.dampening;
  const float weight_decay = o.weight_decay, grad_scale = args.grad_scale;

  StepResult result;
  result.has_non_finite_grads =
      optim_internal::ParallelForBlocks(spans, [&]<int N>(size_t begin, Eigen::Index len) {
        BlockBuffer g_buffer;
        optim_internal::LoadScaledGrads<N>(spans.grads, spans.grad_dtype, begin, len, grad_scale,
                                           g_buffer.data);
        const bool non_finite = optim_internal::HasNonFinite<N>(g_buffer.data, len);
        FloatBlock<N> g(g_buffer.data, len);
        FloatBlock<N> p(spans.params + begin, len);
        if (weight_decay != 0.0f) g += weight_decay * p;
        if (use_momentum) {
          FloatBlock<N> buf(spans.exp_avg + begin, len);
          if (first_step) {
            buf = g;
          } else {
            buf = momentum * buf + one_minus_dampening * g;
          }
          if (o.nesterov) {
            g += momentum * buf;
          } else {
            g = buf;
          }
        }
        p -= lr * g;
        if (spans.out != nullptr) {
          optim_internal::StoreNarrowed<N>(spans.params + begin, spans.out, spans.out_dtype, begin,
                                           len);
        }
        return non_finite;
      });
  return result;
}

}  // namespace tierflow
