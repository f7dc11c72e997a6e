// LionStep: one fused pass per block (see optim/block_loop.h for the skeleton).
#include "optim/lion.h"

#include <cmath>

#include "optim/block_loop.h"

namespace tierflow {

using optim_internal::BlockBuffer;
using optim_internal::FloatBlock;

StatusOr<StepResult> LionStep(const LionOptions& o, const LionStepArgs& args,
                              const OptimSpans& spans) {
  if (!std::isfinite(o.lr) || o.lr < 0 || !(o.beta1 >= 0 && o.beta1 <= 1) ||
      !(o.beta2 >= 0 && o.beta2 <= 1) || !std::isfinite(o.weight_decay) || o.weight_decay < 0) {
    return InvalidArgumentError(
        "Lion options: need finite lr >= 0, beta1 and beta2 in [0, 1], weight_decay >= 0");
  }
  if (!std::isfinite(args.grad_scale))
    return InvalidArgumentError("Lion grad_scale must be finite");
  TF_RETURN_IF_ERROR(ValidateOptimSpans(spans, true, false, "Lion"));

  const float decay = static_cast<float>(1.0 - static_cast<double>(o.lr) * o.weight_decay);
  const float lr = o.lr, grad_scale = args.grad_scale;
  const float beta1 = o.beta1, one_minus_beta1 = 1.0f - o.beta1;
  const float beta2 = o.beta2, one_minus_beta2 = 1.0f - o.beta2;

  StepResult result;
  result.has_non_finite_grads =
      optim_internal::ParallelForBlocks(spans, [&]<int N>(size_t begin, Eigen::Index len) {
        BlockBuffer g_buffer, c_buffer;
        optim_internal::LoadScaledGrads<N>(spans.grads, spans.grad_dtype, begin, len, grad_scale,
                                           g_buffer.data);
        const bool non_finite = optim_internal::HasNonFinite<N>(g_buffer.data, len);
        FloatBlock<N> g(g_buffer.data, len);
        FloatBlock<N> c(c_buffer.data, len);
        FloatBlock<N> p(spans.params + begin, len);
        FloatBlock<N> m(spans.exp_avg + begin, len);
        c = beta1 * m + one_minus_beta1 * g;
        p = p * decay - lr * c.sign();
        m = beta2 * m + one_minus_beta2 * g;
        if (spans.out != nullptr) {
          optim_internal::StoreNarrowed<N>(spans.params + begin, spans.out, spans.out_dtype, begin,
                                           len);
        }
        return non_finite;
      });
  return result;
}

}  // namespace tierflow
