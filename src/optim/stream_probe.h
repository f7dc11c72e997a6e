// The memory-bandwidth limit of an optimizer step, measured: a kernel that
// moves exactly the bytes an optimizer step over the same spans moves (the
// same streams, dtypes, in-place updates, chunks, blocks and threads) with
// almost no arithmetic. The step's time divided by this kernel's time is how
// close the step runs to this machine's memory bandwidth.
#pragma once

#include "optim/optim_spans.h"
#include "tierflow/status.h"

namespace tierflow {

// Per element: a = grad * addend (widened like the step's gradients); each
// non-null fp32 array among params, exp_avg, exp_avg_sq gets x += a (read and
// written in place); out (when set) gets params narrowed to out_dtype. With a
// finite gradient and addend 0 the values are unchanged, so it may run on an
// optimizer's live buffers. Traffic per element: TrafficBytesPerParam(spans).
// Errors: InvalidArgument for a null params or grads with n > 0.
// Thread safety: as AdamStep; runs on oneTBB in the calling thread's arena.
Status StreamProbe(const OptimSpans& spans, float addend);

}  // namespace tierflow
