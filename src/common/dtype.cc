// DType names, parsing and bulk conversion.
#include <string>

#include "common/convert_kernels.h"
#include "common/cpu_isa.h"
#include "common/half.h"
#include "tierflow/dtype.h"

namespace tierflow {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
  }
  return "?";
}

StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "fp16" || name == "float16" || name == "half") return DType::kF16;
  return InvalidArgumentError("unknown dtype '" + std::string(name) +
                              "': use one of f32, bf16, f16");
}

namespace {

const convert_internal::ConvertKernels& ConvertKernelsFor(Isa isa) {
  return TF_ISA_TABLE(isa, kConvertKernels);
}

void ConvertAt(Isa isa, DType from, const void* src, DType to, void* dst, size_t n) {
  if (n == 0) return;
  ConvertKernelsFor(isa).convert[static_cast<int>(from)][static_cast<int>(to)](src, dst, n);
}

}  // namespace

void ConvertBuffer(DType from, const void* src, DType to, void* dst, size_t n) {
  ConvertAt(SelectedIsaOrExit(), from, src, to, dst, n);
}

Status ConvertBuffer(DType from, const void* src, DType to, void* dst, size_t n, Isa isa) {
  TF_RETURN_IF_ERROR(CheckIsaSupported(isa, "ConvertBuffer"));
  ConvertAt(isa, from, src, to, dst, n);
  return Status::Ok();
}

}  // namespace tierflow
