// GELU (tanh) and SwiGLU on CUDA: grid-stride element-wise kernels, fp32 math.
#include "kernels/activations.h"
#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    GeluForwardKernel(T* out, const T* inp, int64_t n) {
  TF_GRID_STRIDE(i, n) {
    const float x = Load(inp + i);
    Store(out + i, 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCube * x * x * x))));
  }
}

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    GeluBackwardKernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  TF_GRID_STRIDE(i, n) {
    const float x = Load(inp + i);
    const float th = tanhf(kGeluScale * (x + kGeluCube * x * x * x));
    const float grad = 0.5f * (1.0f + th) +
                       0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    Store(dinp + i, grad * Load(dout + i));
  }
}

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    SwiGluForwardKernel(T* out, const T* gate, const T* up, int64_t n) {
  TF_GRID_STRIDE(i, n) {
    const float g = Load(gate + i);
    Store(out + i, g / (1.0f + expf(-g)) * Load(up + i));
  }
}

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    SwiGluBackwardKernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  TF_GRID_STRIDE(i, n) {
    const float g = Load(gate + i), u = Load(up + i), d = Load(dout + i);
    const float sig = 1.0f / (1.0f + expf(-g));
    Store(dgate + i, d * u * sig * (1.0f + g * (1.0f - sig)));
    Store(dup + i, d * g * sig);
  }
}

}  // namespace

template <typename T>
Status GeluForwardCuda(cudaStream_t stream, T* out, const T* inp, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("GeluForwardCuda", "n", n));
  return cuda_ops::LaunchGridStride(stream, n, "GeluForwardKernel", GeluForwardKernel<T>, out, inp,
                                    n);
}

template <typename T>
Status GeluBackwardCuda(cudaStream_t stream, T* dinp, const T* inp, const T* dout, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("GeluBackwardCuda", "n", n));
  return cuda_ops::LaunchGridStride(stream, n, "GeluBackwardKernel", GeluBackwardKernel<T>, dinp,
                                    inp, dout, n);
}

template <typename T>
Status SwiGluForwardCuda(cudaStream_t stream, T* out, const T* gate, const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("SwiGluForwardCuda", "n", n));
  return cuda_ops::LaunchGridStride(stream, n, "SwiGluForwardKernel", SwiGluForwardKernel<T>, out,
                                    gate, up, n);
}

template <typename T>
Status SwiGluBackwardCuda(cudaStream_t stream, T* dgate, T* dup, const T* dout, const T* gate,
                          const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("SwiGluBackwardCuda", "n", n));
  return cuda_ops::LaunchGridStride(stream, n, "SwiGluBackwardKernel", SwiGluBackwardKernel<T>,
                                    dgate, dup, dout, gate, up, n);
}

#define TF_INSTANTIATE_ACTIVATIONS_CUDA(T)                                                  \
  template Status GeluForwardCuda<T>(cudaStream_t, T*, const T*, int64_t);                  \
  template Status GeluBackwardCuda<T>(cudaStream_t, T*, const T*, const T*, int64_t);       \
  template Status SwiGluForwardCuda<T>(cudaStream_t, T*, const T*, const T*, int64_t);      \
  template Status SwiGluBackwardCuda<T>(cudaStream_t, T*, T*, const T*, const T*, const T*, \
                                        int64_t);
TF_INSTANTIATE_ACTIVATIONS_CUDA(float)
TF_INSTANTIATE_ACTIVATIONS_CUDA(bf16)
TF_INSTANTIATE_ACTIVATIONS_CUDA(fp16)

}  // namespace tierflow
