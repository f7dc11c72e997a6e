#include "comm/ordered_sum.h"

#include "common/half.h"

namespace tierflow::comm {
namespace {

template <typename T, bool kAdd>
void Loop(float* out, const void* src, size_t n) {
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kAdd) {
      out[i] = out[i] + ToFloat(s[i]);
    } else {
      out[i] = ToFloat(s[i]);
    }
  }
}

template <bool kAdd>
void Dispatch(float* out, const void* src, DType dtype, size_t n) {
  switch (dtype) {
    case DType::kF32:
      return Loop<float, kAdd>(out, src, n);
    case DType::kBF16:
      return Loop<bf16, kAdd>(out, src, n);
    case DType::kF16:
      return Loop<fp16, kAdd>(out, src, n);
  }
}

}  // namespace

void WidenInto(float* out, const void* src, DType dtype, size_t n) {
  Dispatch<false>(out, src, dtype, n);
}

void AddWidened(float* out, const void* src, DType dtype, size_t n) {
  Dispatch<true>(out, src, dtype, n);
}

}  // namespace tierflow::comm
