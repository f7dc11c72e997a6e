// Casts and the sum of squares of a gradient span, on CUDA. The sum: a fixed
// grid of partial sums, then one block adding them in a fixed order.
#include <string>

#include "device/cuda/cuda_elements.cuh"
#include "device/cuda/grad_ops.h"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;

constexpr int kThreads = 256;

// ---- cast ----

// Packs of kN elements (4: 16 bytes of fp32 on one side), then the tail.
template <int kN, typename From, typename To>
__global__ void __launch_bounds__(kThreads) CastKernel(To* dst, const From* src, int64_t n) {
  const int64_t packs = n / kN;
  TF_GRID_STRIDE(p, packs) {
    const cuda_ops::Pack<From, kN> x = cuda_ops::LoadPack<kN>(src + p * kN);
    cuda_ops::Pack<To, kN> y;
#pragma unroll
    for (int j = 0; j < kN; ++j) Store(&y.v[j], Load(&x.v[j]));
    cuda_ops::StorePack<kN>(dst + p * kN, y);
  }
  TF_GRID_STRIDE(t, n - packs * kN) { Store(dst + packs * kN + t, Load(src + packs * kN + t)); }
}

template <typename From, typename To>
void LaunchCast(cudaStream_t stream, To* dst, const From* src, int64_t n) {
  constexpr int kN = 4;
  if (n >= kN && cuda_ops::AlignedTo(src, sizeof(From) * kN) &&
      cuda_ops::AlignedTo(dst, sizeof(To) * kN)) {
    TF_CUDA_LAUNCH(cuda_ops::GridFor(n / kN, kThreads), kThreads, 0, stream,
                   CastKernel<kN, From, To>)
    (dst, src, n);
  } else {
    TF_CUDA_LAUNCH(cuda_ops::GridFor(n, kThreads), kThreads, 0, stream, CastKernel<1, From, To>)
    (dst, src, n);
  }
}

template <typename From>
Status CastFrom(cudaStream_t stream, const From* src, DType to, void* dst, int64_t n) {
  switch (to) {
    case DType::kF32:
      LaunchCast(stream, static_cast<float*>(dst), src, n);
      break;
    case DType::kBF16:
      LaunchCast(stream, static_cast<bf16*>(dst), src, n);
      break;
    case DType::kF16:
      LaunchCast(stream, static_cast<fp16*>(dst), src, n);
      break;
  }
  return cuda_ops::CheckLaunch("CastKernel");
}

// ---- sum of squares ----

__device__ double BlockSumDouble(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  return shared[0];
}

// A non-finite element makes its thread's sum NaN, and NaN survives every
// addition after it, so the flag needs no second reduction.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PartialSquaresKernel(const T* grads, int64_t n, double* partial) {
  __shared__ double shared[kThreads];
  double sum = 0;
  TF_GRID_STRIDE(i, n) {
    const double g = Load(grads + i);
    sum = isfinite(g) ? fma(g, g, sum) : nan("");
  }
  const double block = BlockSumDouble(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = block;
}

__global__ void __launch_bounds__(kThreads)
    FinalSquaresKernel(const double* partial, int count, GradSquares* out) {
  __shared__ double shared[kThreads];
  double sum = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  const double total = BlockSumDouble(sum, shared);
  if (threadIdx.x == 0) {
    const bool bad = !isfinite(total);
    out->sum_squares = bad ? nan("") : total;
    out->non_finite = bad ? 1u : 0u;
    out->reserved = 0;
  }
}

template <typename T>
Status LaunchSquares(cudaStream_t stream, const T* grads, int64_t n, GradSquares* out,
                     double* scratch) {
  TF_CUDA_LAUNCH(kGradSquaresBlocks, kThreads, 0, stream, PartialSquaresKernel<T>)
  (grads, n, scratch);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("PartialSquaresKernel"));
  TF_CUDA_LAUNCH(1, kThreads, 0, stream, FinalSquaresKernel)(scratch, kGradSquaresBlocks, out);
  return cuda_ops::CheckLaunch("FinalSquaresKernel");
}

}  // namespace

Status CastCuda(cudaStream_t stream, DType from, const void* src, DType to, void* dst, int64_t n) {
  if (n <= 0) return InvalidArgumentError("CastCuda: n must be > 0, got " + std::to_string(n));
  switch (from) {
    case DType::kF32:
      return CastFrom(stream, static_cast<const float*>(src), to, dst, n);
    case DType::kBF16:
      return CastFrom(stream, static_cast<const bf16*>(src), to, dst, n);
    case DType::kF16:
      return CastFrom(stream, static_cast<const fp16*>(src), to, dst, n);
  }
  return InvalidArgumentError("CastCuda: unknown source dtype");
}

Status GradSquaresCuda(cudaStream_t stream, DType dtype, const void* grads, int64_t n,
                       GradSquares* out, double* scratch) {
  if (n <= 0) {
    return InvalidArgumentError("GradSquaresCuda: n must be > 0, got " + std::to_string(n));
  }
  switch (dtype) {
    case DType::kF32:
      return LaunchSquares(stream, static_cast<const float*>(grads), n, out, scratch);
    case DType::kBF16:
      return LaunchSquares(stream, static_cast<const bf16*>(grads), n, out, scratch);
    case DType::kF16:
      return LaunchSquares(stream, static_cast<const fp16*>(grads), n, out, scratch);
  }
  return InvalidArgumentError("GradSquaresCuda: unknown dtype");
}

}  // namespace tierflow
