// RMSNorm on CUDA: one warp per row (fp32 statistics), a fixed-tree column
// sum for dweight (deterministic, no atomics).
#include "kernels/cuda/cuda_ops_common.cuh"
#include "kernels/rmsnorm.h"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;
using cuda_ops::WarpSum;

constexpr int kWarpsPerBlock = 8;

template <typename T>
static __global__ void __launch_bounds__(kWarpsPerBlock * 32)
    RmsNormForwardKernel(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                         float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
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
static __global__ void __launch_bounds__(kWarpsPerBlock * 32)
    RmsNormBackwardInputKernel(T* dinp, const T* dout, const T* inp, const T* weight,
                               const float* rstd, int64_t N, int64_t C) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
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

template <typename T>
struct RmsNormTimesGrad {
  const T* dout;
  const T* inp;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return Load(dout + r * C + c) * Load(inp + r * C + c) * rstd[r];
  }
};

unsigned int RowBlocks(int64_t N) {
  return static_cast<unsigned int>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

template <typename T>
Status RmsNormForwardCuda(cudaStream_t stream, T* out, float* rstd, const T* inp, const T* weight,
                          const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormForwardCuda", s));
  RmsNormForwardKernel<<<RowBlocks(s.rows), kWarpsPerBlock * 32, 0, stream>>>(
      out, rstd, inp, weight, s.rows, s.channels, eps);
  return cuda_ops::CheckLaunch("RmsNormForwardKernel");
}

template <typename T>
Status RmsNormBackwardCuda(cudaStream_t stream, T* dinp, float* dweight, const T* dout,
                           const T* inp, const T* weight, const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormBackwardCuda", s));
  RmsNormBackwardInputKernel<<<RowBlocks(s.rows), kWarpsPerBlock * 32, 0, stream>>>(
      dinp, dout, inp, weight, rstd, s.rows, s.channels);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("RmsNormBackwardInputKernel"));
  return cuda_ops::LaunchColumnSum(stream, dweight, s.rows, s.channels,
                                   RmsNormTimesGrad<T>{dout, inp, rstd, s.channels},
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
