// Host-side gradient accumulation in fp32 over micro-batches: acc = g (first
// micro-batch) or acc += g (later ones), g in fp32, bf16 or fp16. Elementwise,
// so the result is the same for any thread count.
#pragma once

#include <cstddef>

#include "tierflow/dtype.h"

namespace tierflow {

// REQUIRES: acc and grads point to n elements and do not overlap.
void AccumulateGrads(float* acc, const void* grads, DType grad_dtype, size_t n, bool first);

// The same over elements [begin, end) only, on the calling thread.
void AccumulateGradRange(float* acc, const void* grads, DType grad_dtype, size_t begin, size_t end,
                         bool first);

}  // namespace tierflow
