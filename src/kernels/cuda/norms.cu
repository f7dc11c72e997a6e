// The row norms on CUDA, LayerNorm and RMSNorm: one warp per row for the row
// work (fp32 statistics), a fixed-tree column sum for dweight/dbias
// (deterministic, no atomics); the shared row helpers are norm_rows.cuh.
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"

namespace tierflow {
namespace {

using cuda_ops::LoadFloats;
using cuda_ops::NormRow;
using cuda_ops::StoreFloats;
using cuda_ops::WarpSum;

// Each row kernel walks its row in packs of kN (norm_rows.cuh); `for (c ...)`
// below visits the calling lane's packs, one at a time: 48-64 bytes per lane
// in flight, with 64 warps per SM, is several times what HBM's latency needs,
// and ptxas spilled registers for sm_80 when the loop was unrolled.
#define TF_ROW_PACKS(c, C) \
  _Pragma("unroll 1") for (int64_t c = lane * kN; c < (C); c += cuda_ops::kWarpSize * kN)

template <int kN, typename T>
static __global__ void __launch_bounds__(cuda_ops::kNormThreads)
    LayerNormForwardKernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                           const T* bias, int64_t N, int64_t C, float eps) {
  const int64_t row = NormRow();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float sum = 0.0f;
  TF_ROW_PACKS(c, C) {
    float v[kN];
    LoadFloats<kN>(x + c, v);
#pragma unroll
    for (int j = 0; j < kN; ++j) sum += v[j];
  }
  const float m = WarpSum(sum) / static_cast<float>(C);
  float var = 0.0f;
  TF_ROW_PACKS(c, C) {
    float v[kN];
    LoadFloats<kN>(x + c, v);
#pragma unroll
    for (int j = 0; j < kN; ++j) var += (v[j] - m) * (v[j] - m);
  }
  const float r = rsqrtf(WarpSum(var) / static_cast<float>(C) + eps);
  TF_ROW_PACKS(c, C) {
    float v[kN], w[kN], b[kN], o[kN];
    LoadFloats<kN>(x + c, v);
    LoadFloats<kN>(weight + c, w);
    LoadFloats<kN>(bias + c, b);
#pragma unroll
    for (int j = 0; j < kN; ++j) o[j] = (v[j] - m) * r * w[j] + b[j];
    StoreFloats<kN>(out + row * C + c, o);
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = r;
  }
}

// dinp += the input gradient of a row norm: LayerNorm's, or RMSNorm's when
// `mean` is null (no centring, so no mean of dn to subtract).
template <int kN, typename T>
static __global__ void __launch_bounds__(cuda_ops::kNormThreads)
    NormBackwardInputKernel(T* dinp, const T* dout, const T* inp, const T* weight,
                            const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t row = NormRow();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  const T* g = dout + row * C;
  const float m = mean != nullptr ? mean[row] : 0.0f, r = rstd[row];
  float dn_sum = 0.0f, dn_n_sum = 0.0f;
  TF_ROW_PACKS(c, C) {
    float v[kN], w[kN], gv[kN];
    LoadFloats<kN>(x + c, v);
    LoadFloats<kN>(weight + c, w);
    LoadFloats<kN>(g + c, gv);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float dn = w[j] * gv[j];
      dn_sum += dn;
      dn_n_sum += dn * ((v[j] - m) * r);
    }
  }
  const float dn_mean = mean != nullptr ? WarpSum(dn_sum) / static_cast<float>(C) : 0.0f;
  const float dn_n_mean = WarpSum(dn_n_sum) / static_cast<float>(C);
  TF_ROW_PACKS(c, C) {
    float v[kN], w[kN], gv[kN], d[kN];
    LoadFloats<kN>(x + c, v);
    LoadFloats<kN>(weight + c, w);
    LoadFloats<kN>(g + c, gv);
    T* dp = dinp + row * C + c;
    LoadFloats<kN>(dp, d);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float n = (v[j] - m) * r;
      d[j] += (w[j] * gv[j] - dn_mean - n * dn_n_mean) * r;
    }
    StoreFloats<kN>(dp, d);
  }
}

// ---- RMSNorm ----

template <int kN, typename T>
static __global__ void __launch_bounds__(cuda_ops::kNormThreads)
    RmsNormForwardKernel(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                         float eps) {
  const int64_t row = NormRow();
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const T* x = inp + row * C;
  float ss = 0.0f;
  TF_ROW_PACKS(c, C) {
    float v[kN];
    LoadFloats<kN>(x + c, v);
#pragma unroll
    for (int j = 0; j < kN; ++j) ss += v[j] * v[j];
  }
  const float r = rsqrtf(WarpSum(ss) / static_cast<float>(C) + eps);
  TF_ROW_PACKS(c, C) {
    float v[kN], w[kN], o[kN];
    LoadFloats<kN>(x + c, v);
    LoadFloats<kN>(weight + c, w);
#pragma unroll
    for (int j = 0; j < kN; ++j) o[j] = v[j] * r * w[j];
    StoreFloats<kN>(out + row * C + c, o);
  }
  if (lane == 0 && rstd != nullptr) rstd[row] = r;
}

#undef TF_ROW_PACKS

// Launches Kernel<kPackElems<T>> when `packs` (NormRowsPack: the rows can be
// walked in 16-byte packs), Kernel<1> otherwise.
#define TF_LAUNCH_NORM_ROWS(Kernel, s, packs, ...)                                            \
  ((packs) ? cuda_ops::Launch(stream, cuda_ops::NormBlocks((s).rows), cuda_ops::kNormThreads, \
                              #Kernel, Kernel<cuda_ops::kPackElems<T>, T>, __VA_ARGS__)       \
           : cuda_ops::Launch(stream, cuda_ops::NormBlocks((s).rows), cuda_ops::kNormThreads, \
                              #Kernel, Kernel<1, T>, __VA_ARGS__))

}  // namespace

template <typename T>
Status LayerNormForwardCuda(cudaStream_t stream, T* out, float* mean, float* rstd, const T* inp,
                            const T* weight, const T* bias, const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormForwardCuda", s));
  const bool packs = cuda_ops::NormRowsPack<T>(s.channels, {out, inp, weight, bias});
  return TF_LAUNCH_NORM_ROWS(LayerNormForwardKernel, s, packs, out, mean, rstd, inp, weight, bias,
                             s.rows, s.channels, eps);
}

template <typename T>
Status LayerNormBackwardCuda(cudaStream_t stream, T* dinp, float* dweight, float* dbias,
                             const T* dout, const T* inp, const T* weight, const float* mean,
                             const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormBackwardCuda", s));
  const bool packs = cuda_ops::NormRowsPack<T>(s.channels, {dinp, dout, inp, weight});
  TF_RETURN_IF_ERROR(TF_LAUNCH_NORM_ROWS(NormBackwardInputKernel, s, packs, dinp, dout, inp, weight,
                                         mean, rstd, s.rows, s.channels));
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
  const bool packs = cuda_ops::NormRowsPack<T>(s.channels, {out, inp, weight});
  return TF_LAUNCH_NORM_ROWS(RmsNormForwardKernel, s, packs, out, rstd, inp, weight, s.rows,
                             s.channels, eps);
}

template <typename T>
Status RmsNormBackwardCuda(cudaStream_t stream, T* dinp, float* dweight, const T* dout,
                           const T* inp, const T* weight, const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormBackwardCuda", s));
  const bool packs = cuda_ops::NormRowsPack<T>(s.channels, {dinp, dout, inp, weight});
  TF_RETURN_IF_ERROR(TF_LAUNCH_NORM_ROWS(NormBackwardInputKernel, s, packs, dinp, dout, inp, weight,
                                         static_cast<const float*>(nullptr), rstd, s.rows,
                                         s.channels));
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
