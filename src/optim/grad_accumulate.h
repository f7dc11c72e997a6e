// Host-side gradient accumulation in fp32 over micro-batches: acc = g (first
// micro-batch) or acc += g (later ones), g in fp32, bf16 or fp16. Elementwise,
// so the result is the same for any thread count and instruction-set level.
#pragma once

#include <cstddef>

#include "common/cpu_isa.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// Runs on oneTBB with the loops of the process's instruction-set level
// (SelectedIsaOrExit(), common/cpu_isa.h).
// REQUIRES: acc and grads point to n elements and do not overlap.
void AccumulateGrads(float* acc, const void* grads, DType grad_dtype, size_t n, bool first);

// The same at an explicit level; every level gives the same bits.
// Errors: FailedPrecondition when this CPU cannot run `isa` (nothing runs).
Status AccumulateGrads(float* acc, const void* grads, DType grad_dtype, size_t n, bool first,
                       Isa isa);

}  // namespace tierflow
