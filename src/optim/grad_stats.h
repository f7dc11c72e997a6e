// The gradient statistics of the host's micro-batch accumulation: GradStats
// itself (the sum of squares and the non-finite flag of a span) is
// common/grad_stats.h, below the device, whose CPU backend runs it too; this
// adds the pass that accumulates and sums at once, with the same bits.
#pragma once

#include <cstddef>

#include "common/cpu_isa.h"
#include "common/grad_stats.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// AccumulateGrads (optim/grad_accumulate.h: acc = g when `first`, else acc +=
// g) and then GradStats(acc, kF32, n) of the result, in one pass: each chunk
// is accumulated and summed while it is still in cache, saving a read of acc
// from memory. Bit-identical to the two calls. Same requirements as both.
StatusOr<GradStatsResult> AccumulateGradsWithStats(float* acc, const void* grads, DType grad_dtype,
                                                   size_t n, bool first);
StatusOr<GradStatsResult> AccumulateGradsWithStats(float* acc, const void* grads, DType grad_dtype,
                                                   size_t n, bool first, Isa isa);

}  // namespace tierflow
