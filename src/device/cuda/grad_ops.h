// The CUDA half of Stream::Cast and Stream::SumSquares (tierflow/device.h):
// the kernels that prepare gradients for PCIe, launched on `stream`.
// src/device/grad_ops.cc wraps them in each op's Kernel.
#pragma once

#include <cstdint>

#include "tierflow/device.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

// The runtime's own declaration, so this header need not include cuda_runtime.h.
typedef struct CUstream_st* cudaStream_t;

namespace tierflow {

// dst[i] = src[i] converted, one thread per element (grid-stride), rounding
// to nearest even. REQUIRES: n > 0; src and dst on the device.
Status CastCuda(cudaStream_t stream, DType from, const void* src, DType to, void* dst, int64_t n);

// Squares accumulate in double per thread, blocks and the final sum add in a
// fixed tree, so the result does not depend on timing (it may differ from the
// CPU device's order in the last bits). `dtype`: kF32, kBF16 or kF16.
// REQUIRES: n > 0; grads, out and scratch (kGradSquaresScratchBytes) on the device.
Status GradSquaresCuda(cudaStream_t stream, DType dtype, const void* grads, int64_t n,
                       GradSquares* out, double* scratch);

}  // namespace tierflow
