// fp32 gradient accumulation on the host.
#include "optim/grad_accumulate.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstring>

#include "common/half.h"

namespace tierflow {
namespace {

constexpr size_t kChunk = 1 << 16;

template <typename T>
void AccumulateTyped(float* acc, const T* g, size_t begin, size_t end, bool first) {
  if (first) {
    for (size_t i = begin; i < end; ++i) acc[i] = ToFloat(g[i]);
  } else {
    for (size_t i = begin; i < end; ++i) acc[i] += ToFloat(g[i]);
  }
}

}  // namespace

void AccumulateGradRange(float* acc, const void* grads, DType grad_dtype, size_t begin, size_t end,
                         bool first) {
  switch (grad_dtype) {
    case DType::kF32:
      if (first) {
        std::memcpy(acc + begin, static_cast<const float*>(grads) + begin,
                    (end - begin) * sizeof(float));
      } else {
        AccumulateTyped(acc, static_cast<const float*>(grads), begin, end, false);
      }
      break;
    case DType::kBF16:
      AccumulateTyped(acc, static_cast<const bf16*>(grads), begin, end, first);
      break;
    case DType::kF16:
      AccumulateTyped(acc, static_cast<const fp16*>(grads), begin, end, first);
      break;
  }
}

void AccumulateGrads(float* acc, const void* grads, DType grad_dtype, size_t n, bool first) {
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, kChunk), [&](const auto& r) {
    AccumulateGradRange(acc, grads, grad_dtype, r.begin(), r.end(), first);
  });
}

}  // namespace tierflow
