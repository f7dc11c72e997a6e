// The gradient statistics of one span computed on the device that holds it:
// the sum of squares (for the global norm that clipping needs) and whether
// any element is Inf or NaN (fp16 loss scaling). The engine copies the 16
// bytes back with the gradients, so the host never reads them a second time
// just to decide a step (engine/device_grad_stats.h runs it; the CPU device's
// implementation is optim/grad_stats.h, which kernels/ cannot see).
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"

namespace tierflow {

// The result as it sits in device memory and crosses to the host.
struct GradSquares {
  double sum_squares = 0;   // NaN when non_finite
  uint32_t non_finite = 0;  // 1 when some element is Inf or NaN
  uint32_t reserved = 0;
};
static_assert(sizeof(GradSquares) == 16);

// Device scratch GradSquaresCuda needs, reusable by every call on one stream.
inline constexpr int kGradSquaresBlocks = 256;
inline constexpr int64_t kGradSquaresScratchBytes = kGradSquaresBlocks * sizeof(double);

#ifdef TIERFLOW_HAVE_CUDA
// Squares accumulate in double per thread, blocks and the final sum add in a
// fixed tree, so the result does not depend on timing (it may differ from the
// CPU device's order in the last bits). `dtype`: kF32, kBF16 or kF16.
// REQUIRES: n > 0; grads, out and scratch (kGradSquaresScratchBytes) on the device.
Status GradSquaresCuda(cudaStream_t stream, DType dtype, const void* grads, int64_t n,
                       GradSquares* out, double* scratch);
#endif

}  // namespace tierflow
