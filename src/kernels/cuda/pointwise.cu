// Residual add, bias add and bias backward on CUDA (the cast is the
// device's: src/device/cuda/grad_ops.cu).
#include "kernels/cuda/cuda_ops_common.cuh"
#include "kernels/pointwise.h"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    ResidualKernel(T* out, const T* a, const T* b, int64_t n) {
  TF_GRID_STRIDE(i, n) { Store(out + i, Load(a + i) + Load(b + i)); }
}

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    BiasAddKernel(T* out, const T* bias, int64_t n, int64_t C) {
  TF_GRID_STRIDE(i, n) { Store(out + i, Load(out + i) + Load(bias + i % C)); }
}

}  // namespace

template <typename T>
Status ResidualForwardCuda(cudaStream_t stream, T* out, const T* a, const T* b, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("ResidualForwardCuda", "n", n));
  return cuda_ops::LaunchGridStride(stream, n, "ResidualKernel", ResidualKernel<T>, out, a, b, n);
}

template <typename T>
Status BiasAddForwardCuda(cudaStream_t stream, T* out, const T* bias, int64_t rows,
                          int64_t channels) {
  TF_RETURN_IF_ERROR(ops_internal::CheckAllPositive("BiasAddForwardCuda",
                                                    {{"rows", rows}, {"channels", channels}}));
  return cuda_ops::LaunchGridStride(stream, rows * channels, "BiasAddKernel", BiasAddKernel<T>, out,
                                    bias, rows * channels, channels);
}

template <typename T>
Status BiasBackwardCuda(cudaStream_t stream, float* dbias, const T* dout, int64_t rows,
                        int64_t channels) {
  TF_RETURN_IF_ERROR(
      ops_internal::CheckAllPositive("BiasBackwardCuda", {{"rows", rows}, {"channels", channels}}));
  return cuda_ops::LaunchColumnSum(stream, dbias, rows, channels,
                                   cuda_ops::GradOnly<T>{dout, channels}, "BiasBackward");
}

#define TF_INSTANTIATE_POINTWISE_CUDA(T)                                                 \
  template Status ResidualForwardCuda<T>(cudaStream_t, T*, const T*, const T*, int64_t); \
  template Status BiasAddForwardCuda<T>(cudaStream_t, T*, const T*, int64_t, int64_t);   \
  template Status BiasBackwardCuda<T>(cudaStream_t, float*, const T*, int64_t, int64_t);
TF_INSTANTIATE_POINTWISE_CUDA(float)
TF_INSTANTIATE_POINTWISE_CUDA(bf16)
TF_INSTANTIATE_POINTWISE_CUDA(fp16)

}  // namespace tierflow
