// The gradient transfer dtype's default and its one restriction.
#include "tierflow/grad_transfer.h"

#include <string>

namespace tierflow {

DType DefaultGradTransferDType(DType weights) {
  return weights == DType::kF32 ? DType::kF32 : weights;
}

DType GradTransferDType(DType weights, std::optional<DType> requested) {
  return requested.has_value() ? *requested : DefaultGradTransferDType(weights);
}

Status ValidateGradTransferDType(std::string_view what, DType weights, DType transfer) {
  if (transfer == DType::kF16 && weights != DType::kF16) {
    return InvalidArgumentError(
        std::string(what) +
        ": fp16 gradient transfer needs fp16 weights (their loss scale keeps "
        "gradients inside fp16's range; " +
        std::string(DTypeName(weights)) +
        " gradients are unscaled and would underflow or overflow): use bf16 or fp32");
  }
  return Status::Ok();
}

}  // namespace tierflow
