// GELU (tanh) and SwiGLU on CUDA: element-wise maps over 16-byte packs
// (cuda_ops::MapKernel), fp32 math; each backward is one pass.
#include "kernels/activations.h"
#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

// The ops, as cuda_ops::MapKernel calls them: op(inputs, outputs) in fp32.
struct GeluForwardOp {
  __device__ void operator()(const float* in, float* out) const {
    const float x = in[0];
    out[0] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCube * x * x * x)));
  }
};

struct GeluBackwardOp {  // in: x, dout
  __device__ void operator()(const float* in, float* out) const {
    const float x = in[0];
    const float th = tanhf(kGeluScale * (x + kGeluCube * x * x * x));
    const float grad = 0.5f * (1.0f + th) +
                       0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    out[0] = grad * in[1];
  }
};

struct SwiGluForwardOp {  // in: gate, up
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0];
    out[0] = g / (1.0f + expf(-g)) * in[1];
  }
};

struct SwiGluBackwardOp {  // in: gate, up, dout; out: dgate, dup
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0], u = in[1], d = in[2];
    const float sig = 1.0f / (1.0f + expf(-g));
    out[0] = d * u * sig * (1.0f + g * (1.0f - sig));
    out[1] = d * g * sig;
  }
};

}  // namespace

template <typename T>
Status GeluForwardCuda(cudaStream_t stream, T* out, const T* inp, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("GeluForwardCuda", "n", n));
  return cuda_ops::LaunchMap(stream, "GeluForwardKernel", cuda_ops::MapArgs<T, 1, 1>{{inp}, {out}},
                             n, GeluForwardOp{});
}

template <typename T>
Status GeluBackwardCuda(cudaStream_t stream, T* dinp, const T* inp, const T* dout, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("GeluBackwardCuda", "n", n));
  return cuda_ops::LaunchMap(stream, "GeluBackwardKernel",
                             cuda_ops::MapArgs<T, 2, 1>{{inp, dout}, {dinp}}, n, GeluBackwardOp{});
}

template <typename T>
Status SwiGluForwardCuda(cudaStream_t stream, T* out, const T* gate, const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("SwiGluForwardCuda", "n", n));
  return cuda_ops::LaunchMap(stream, "SwiGluForwardKernel",
                             cuda_ops::MapArgs<T, 2, 1>{{gate, up}, {out}}, n, SwiGluForwardOp{});
}

template <typename T>
Status SwiGluBackwardCuda(cudaStream_t stream, T* dgate, T* dup, const T* dout, const T* gate,
                          const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("SwiGluBackwardCuda", "n", n));
  return cuda_ops::LaunchMap(stream, "SwiGluBackwardKernel",
                             cuda_ops::MapArgs<T, 3, 2>{{gate, up, dout}, {dgate, dup}}, n,
                             SwiGluBackwardOp{});
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
