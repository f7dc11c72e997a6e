// The row norms on CUDA, LayerNorm and RMSNorm: one warp per row for the row
// work (fp32 statistics), a fixed-tree column sum for dweight/dbias
// (deterministic, no atomics); the shared row helpers are norm_rows.cuh.
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::NormRow;
using cuda_ops::Store;
using cuda_ops::WarpSum;

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kNormThreads)
    LayerNormForwardKernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                           const T* bias, int64_t N, int64_t C, float eps) {
  const int64_t row = NormRow();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) sum += Load(x + c);
  const float m = WarpSum(sum) / static_cast<float>(C);
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = Load(x + c) - m;
    var += d * d;
  }
  const float r = rsqrtf(WarpSum(var) / static_cast<float>(C) + eps);
  for (int64_t c = lane; c < C; c += 32) {
    Store(out + row * C + c, (Load(x + c) - m) * r * Load(weight + c) + Load(bias + c));
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = r;
  }
}

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kNormThreads)
    LayerNormBackwardInputKernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                 const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t row = NormRow();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* g = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float dn_sum = 0.0f, dn_n_sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float n = (Load(x + c) - m) * r;
    const float dn = Load(weight + c) * Load(g + c);
    dn_sum += dn;
    dn_n_sum += dn * n;
  }
  const float dn_mean = WarpSum(dn_sum) / static_cast<float>(C);
  const float dn_n_mean = WarpSum(dn_n_sum) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float n = (Load(x + c) - m) * r;
    const float dn = Load(weight + c) * Load(g + c);
    T* d = dinp + row * C + c;
    Store(d, Load(d) + (dn - dn_mean - n * dn_n_mean) * r);
  }
}

// ---- RMSNorm ----

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kNormThreads)
    RmsNormForwardKernel(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                         float eps) {
  const int64_t row = NormRow();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float ss = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float v = Load(x + c);
    ss += v * v;
  }
  const float r = rsqrtf(WarpSum(ss) / static_cast<float>(C) + eps);
  for (int64_t c = lane; c < C; c += 32)
    Store(out + row * C + c, Load(x + c) * r * Load(weight + c));
  if (lane == 0 && rstd != nullptr) rstd[row] = r;
}

template <typename T>
static __global__ void __launch_bounds__(cuda_ops::kNormThreads)
    RmsNormBackwardInputKernel(T* dinp, const T* dout, const T* inp, const T* weight,
                               const float* rstd, int64_t N, int64_t C) {
  const int64_t row = NormRow();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* g = dout + row * C;
  const float r = rstd[row];
  float dn_n_sum = 0.0f;
  for (int64_t c = lane; c < C; c += 32)
    dn_n_sum += Load(weight + c) * Load(g + c) * Load(x + c) * r;
  const float dn_n_mean = WarpSum(dn_n_sum) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float n = Load(x + c) * r;
    const float dn = Load(weight + c) * Load(g + c);
    T* d = dinp + row * C + c;
    Store(d, Load(d) + (dn - n * dn_n_mean) * r);
  }
}

}  // namespace

template <typename T>
Status LayerNormForwardCuda(cudaStream_t stream, T* out, float* mean, float* rstd, const T* inp,
                            const T* weight, const T* bias, const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormForwardCuda", s));
  return cuda_ops::Launch(stream, cuda_ops::NormBlocks(s.rows), cuda_ops::kNormThreads,
                          "LayerNormForwardKernel", LayerNormForwardKernel<T>, out, mean, rstd, inp,
                          weight, bias, s.rows, s.channels, eps);
}

template <typename T>
Status LayerNormBackwardCuda(cudaStream_t stream, T* dinp, float* dweight, float* dbias,
                             const T* dout, const T* inp, const T* weight, const float* mean,
                             const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormBackwardCuda", s));
  TF_RETURN_IF_ERROR(cuda_ops::Launch(
      stream, cuda_ops::NormBlocks(s.rows), cuda_ops::kNormThreads, "LayerNormBackwardInputKernel",
      LayerNormBackwardInputKernel<T>, dinp, dout, inp, weight, mean, rstd, s.rows, s.channels));
  TF_RETURN_IF_ERROR(cuda_ops::LaunchColumnSum(
      stream, dweight, s.rows, s.channels,
      cuda_ops::NormTimesGrad<T>{dout, inp, mean, rstd, s.channels}, "LayerNorm dweight"));
  return cuda_ops::LaunchColumnSum(stream, dbias, s.rows, s.channels,
                                   cuda_ops::GradOnly<T>{dout, s.channels}, "LayerNorm dbias");
}

#define TF_INSTANTIATE_LAYERNORM_CUDA(T)                                                         \
  template Status LayerNormForwardCuda<T>(cudaStream_t, T*, float*, float*, const T*, const T*,  \
                                          const T*, const NormShape&, float);                    \
  template Status LayerNormBackwardCuda<T>(cudaStream_t, T*, float*, float*, const T*, const T*, \
                                           const T*, const float*, const float*,                 \
                                           const NormShape&);
TF_INSTANTIATE_LAYERNORM_CUDA(float)
TF_INSTANTIATE_LAYERNORM_CUDA(bf16)
TF_INSTANTIATE_LAYERNORM_CUDA(fp16)

// ---- RMSNorm ----

template <typename T>
Status RmsNormForwardCuda(cudaStream_t stream, T* out, float* rstd, const T* inp, const T* weight,
                          const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormForwardCuda", s));
  return cuda_ops::Launch(stream, cuda_ops::NormBlocks(s.rows), cuda_ops::kNormThreads,
                          "RmsNormForwardKernel", RmsNormForwardKernel<T>, out, rstd, inp, weight,
                          s.rows, s.channels, eps);
}

template <typename T>
Status RmsNormBackwardCuda(cudaStream_t stream, T* dinp, float* dweight, const T* dout,
                           const T* inp, const T* weight, const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormBackwardCuda", s));
  TF_RETURN_IF_ERROR(cuda_ops::Launch(stream, cuda_ops::NormBlocks(s.rows), cuda_ops::kNormThreads,
                                      "RmsNormBackwardInputKernel", RmsNormBackwardInputKernel<T>,
                                      dinp, dout, inp, weight, rstd, s.rows, s.channels));
  return cuda_ops::LaunchColumnSum(stream, dweight, s.rows, s.channels,
                                   cuda_ops::NormTimesGrad<T>{dout, inp, nullptr, rstd, s.channels},
                                   "RmsNorm dweight");
}

#define TF_INSTANTIATE_RMSNORM_CUDA(T)                                                           \
  template Status RmsNormForwardCuda<T>(cudaStream_t, T*, float*, const T*, const T*,            \
                                        const NormShape&, float);                                \
  template Status RmsNormBackwardCuda<T>(cudaStream_t, T*, float*, const T*, const T*, const T*, \
                                         const float*, const NormShape&);
TF_INSTANTIATE_RMSNORM_CUDA(float)
TF_INSTANTIATE_RMSNORM_CUDA(bf16)
TF_INSTANTIATE_RMSNORM_CUDA(fp16)

}  // namespace tierflow
