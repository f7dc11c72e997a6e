// DType names, parsing and bulk conversion.
#include <string>

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
template <typename From, typename To>
void ConvertTyped(const void* src, void* dst, size_t n) {
  const From* s = static_cast<const From*>(src);
  To* d = static_cast<To*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = FromFloat<To>(ToFloat(s[i]));
}
template <typename From>
void ConvertFrom(const void* src, DType to, void* dst, size_t n) {
  switch (to) {
    case DType::kF32:
      return ConvertTyped<From, float>(src, dst, n);
    case DType::kBF16:
      return ConvertTyped<From, bf16>(src, dst, n);
    case DType::kF16:
      return ConvertTyped<From, fp16>(src, dst, n);
  }
}
}  // namespace

void ConvertBuffer(DType from, const void* src, DType to, void* dst, size_t n) {
  switch (from) {
    case DType::kF32:
      return ConvertFrom<float>(src, to, dst, n);
    case DType::kBF16:
      return ConvertFrom<bf16>(src, to, dst, n);
    case DType::kF16:
      return ConvertFrom<fp16>(src, to, dst, n);
  }
}

}  // namespace tierflow
