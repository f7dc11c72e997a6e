// Point-wise plumbing of the blocks: residual add, bias add and its backward
// (sum over rows), and dtype casts.
//
//   ResidualForward: out = a + b (out may alias a or b). Its backward is the
//     identity into both inputs: the caller reuses dout (no op needed).
//   BiasAddForward: out[i, :] += bias (in place on a GEMM output).
//   BiasBackward: dbias += sum_i dout[i, :] (fp32, "+=", fixed chunk order;
//     on the CPU added to dbias per kGemmCpuKPanel rows, kernels/gemm.h, so
//     splitting the rows at multiples of the panel does not change the bits).
//   CastReference, CastCpu: dst = convert(src) with round-to-nearest-even
//     (src/common/half.h), on the host. The cast on a stream is a device
//     operation, Stream::Cast (tierflow/device.h): the engine casts every
//     gradient it sends over PCIe and sees nothing of kernels/.
// Errors: InvalidArgument for non-positive sizes or null pointers.
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"

namespace tierflow {

template <typename T>
Status ResidualForwardReference(T* out,      // (n)
                                const T* a,  // (n)
                                const T* b,  // (n)
                                int64_t n);
template <typename T>
Status ResidualForwardCpu(T* out, const T* a, const T* b, int64_t n);
template <typename T>
Status ResidualForward(Stream& stream, T* out, const T* a, const T* b, int64_t n);

template <typename T>
Status BiasAddForwardReference(T* out,         // (rows, channels), in place
                               const T* bias,  // (channels)
                               int64_t rows, int64_t channels);
template <typename T>
Status BiasAddForwardCpu(T* out, const T* bias, int64_t rows, int64_t channels);
template <typename T>
Status BiasAddForward(Stream& stream, T* out, const T* bias, int64_t rows, int64_t channels);

template <typename T>
Status BiasBackwardReference(float* dbias,   // (channels) +=
                             const T* dout,  // (rows, channels)
                             int64_t rows, int64_t channels);
template <typename T>
Status BiasBackwardCpu(float* dbias, const T* dout, int64_t rows, int64_t channels);
template <typename T>
Status BiasBackward(Stream& stream, float* dbias, const T* dout, int64_t rows, int64_t channels);

// n elements from `from` to `to`; same dtype is a copy. dst must not overlap src.
Status CastReference(DType from, const void* src, DType to, void* dst, int64_t n);
Status CastCpu(DType from, const void* src, DType to, void* dst, int64_t n);

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status ResidualForwardCuda(cudaStream_t stream, T* out, const T* a, const T* b, int64_t n);
template <typename T>
Status BiasAddForwardCuda(cudaStream_t stream, T* out, const T* bias, int64_t rows,
                          int64_t channels);
template <typename T>
Status BiasBackwardCuda(cudaStream_t stream, float* dbias, const T* dout, int64_t rows,
                        int64_t channels);
#endif

}  // namespace tierflow
