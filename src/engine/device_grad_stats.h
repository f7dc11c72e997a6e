// A unit's gradient statistics (sum of squares, non-finite flag) computed on
// the device, in the stream order of the gradients they describe, so that a
// step of one micro-batch needs no host pass over the landed gradients
// before its clip/overflow decision: the host reads 2 B/param once (AdamW)
// instead of twice, and the worker is free for updates during backward.
//
// The CPU device runs optim's GradStats on the stream (the same bits as the
// host would compute), CUDA kernels/grad_squares.h, and the simulated device
// costs it as a read of the span (its result is zero, as its gradients are).
#pragma once

#include <cstdint>

#include "kernels/grad_squares.h"
#include "tierflow/device.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// Enqueues the statistics of `n` elements of `dtype` at `grads` on `stream`,
// written to `out` (device memory). `scratch`: kGradSquaresScratchBytes of
// device memory that no other stream uses.
// Errors: InvalidArgument for n <= 0 or a null pointer (nothing enqueued).
Status LaunchGradStats(Stream& stream, DType dtype, const void* grads, int64_t n, GradSquares* out,
                       double* scratch);

}  // namespace tierflow
