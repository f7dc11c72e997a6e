// Validation and traffic accounting for OptimSpans.
#include "optim/optim_spans.h"

#include <string>

namespace tierflow {

Status ValidateOptimSpans(const OptimSpans& spans, bool needs_exp_avg, bool needs_exp_avg_sq,
                          std::string_view optimizer) {
  if (spans.n == 0) return Status::Ok();
  auto missing = [&](std::string_view what) {
    return InvalidArgumentError(std::string(optimizer) + " step over " + std::to_string(spans.n) +
                                " parameters: " + std::string(what) +
                                " is null; pass a buffer of n elements");
  };
  if (spans.params == nullptr) return missing("params");
  if (spans.grads == nullptr) return missing("grads");
  if (needs_exp_avg && spans.exp_avg == nullptr) return missing("exp_avg");
  if (needs_exp_avg_sq && spans.exp_avg_sq == nullptr) return missing("exp_avg_sq");
  auto valid_dtype = [](DType t) {
    return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
  };
  if (!valid_dtype(spans.grad_dtype) || (spans.out != nullptr && !valid_dtype(spans.out_dtype))) {
    return InvalidArgumentError(std::string(optimizer) +
                                " step: unknown grad or out dtype; use f32, bf16 or f16");
  }
  return Status::Ok();
}

size_t TrafficBytesPerParam(const OptimSpans& spans) {
  size_t bytes = 0;
  for (const float* state : {spans.params, spans.exp_avg, spans.exp_avg_sq}) {
    if (state != nullptr) bytes += 2 * sizeof(float);
  }
  bytes += DTypeSize(spans.grad_dtype);
  if (spans.out != nullptr) bytes += DTypeSize(spans.out_dtype);
  return bytes;
}

}  // namespace tierflow
