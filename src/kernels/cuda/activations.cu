// GELU (tanh) and SwiGLU on CUDA: grid-stride element-wise kernels, fp32 math.
#include "kernels/activations.h"
#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

template <typename T>
static __global__ void __launch_bounds__(kThreads)
    GeluForwardKernel(T* out, const T* inp, int64_t n) {
  TF_GRID_STRIDE(i, n) {
    const float x = Load(inp + i);
    Store(out + i, 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCube * x * x * x))));
  }
}

template <typename T>
static __global__ void __launch_bounds__(kThreads)
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
static __global__ void __launch_bounds__(kThreads)
    SwiGluForwardKernel(T* out, const T* gate, const T* up, int64_t n) {
  TF_GRID_STRIDE(i, n) {
    const float g = Load(gate + i);
    Store(out + i, g / (1.0f + expf(-g)) * Load(up + i));
  }
}

template <typename T>
static __global__ void __launch_bounds__(kThreads)
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
  GeluForwardKernel<<<cuda_ops::GridFor(n, kThreads), kThreads, 0, stream>>>(out, inp, n);
  return cuda_ops::CheckLaunch("GeluForwardKernel");
}

template <typename T>
Status GeluBackwardCuda(cudaStream_t stream, T* dinp, const T* inp, const T* dout, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("GeluBackwardCuda", "n", n));
  GeluBackwardKernel<<<cuda_ops::GridFor(n, kThreads), kThreads, 0, stream>>>(dinp, inp, dout, n);
  return cuda_ops::CheckLaunch("GeluBackwardKernel");
}

template <typename T>
Status SwiGluForwardCuda(cudaStream_t stream, T* out, const T* gate, const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("SwiGluForwardCuda", "n", n));
  SwiGluForwardKernel<<<cuda_ops::GridFor(n, kThreads), kThreads, 0, stream>>>(out, gate, up, n);
  return cuda_ops::CheckLaunch("SwiGluForwardKernel");
}

template <typename T>
Status SwiGluBackwardCuda(cudaStream_t stream, T* dgate, T* dup, const T* dout, const T* gate,
                          const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("SwiGluBackwardCuda", "n", n));
  SwiGluBackwardKernel<<<cuda_ops::GridFor(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dout,
                                                                                gate, up, n);
  return cuda_ops::CheckLaunch("SwiGluBackwardKernel");
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
