// Sum of squares and non-finite flag of a gradient span, on CUDA: a fixed
// grid of partial sums, then one block adding them in a fixed order.
#include "kernels/cuda/cuda_ops_common.cuh"
#include "kernels/grad_squares.h"

namespace tierflow {
namespace {

using cuda_ops::Load;

constexpr int kThreads = 256;

__device__ double BlockSumDouble(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
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
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
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
Status Launch(cudaStream_t stream, const T* grads, int64_t n, GradSquares* out, double* scratch) {
  PartialSquaresKernel<<<kGradSquaresBlocks, kThreads, 0, stream>>>(grads, n, scratch);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("PartialSquaresKernel"));
  FinalSquaresKernel<<<1, kThreads, 0, stream>>>(scratch, kGradSquaresBlocks, out);
  return cuda_ops::CheckLaunch("FinalSquaresKernel");
}

}  // namespace

Status GradSquaresCuda(cudaStream_t stream, DType dtype, const void* grads, int64_t n,
                       GradSquares* out, double* scratch) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("GradSquaresCuda", "n", n));
  switch (dtype) {
    case DType::kF32:
      return Launch(stream, static_cast<const float*>(grads), n, out, scratch);
    case DType::kBF16:
      return Launch(stream, static_cast<const bf16*>(grads), n, out, scratch);
    case DType::kF16:
      return Launch(stream, static_cast<const fp16*>(grads), n, out, scratch);
  }
  return InvalidArgumentError("GradSquaresCuda: unknown dtype");
}

}  // namespace tierflow
