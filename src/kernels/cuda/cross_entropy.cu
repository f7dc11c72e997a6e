// Fused softmax cross-entropy on CUDA, three launches and no scratch memory:
//   1. one block counts the non-ignored targets into *loss (exact as a float
//      below 2^24 rows);
//   2. one block per row: max, sum of exp, row loss and dlogits (in place safe:
//      the target logit is read before any write);
//   3. one block sums the row losses in a fixed order and divides: the mean.
// The slice gradient is one launch: each block counts the valid targets
// itself (the same exact float count), then takes rows grid-stride.
#include <algorithm>
#include <string>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow {
namespace {

using cuda_ops::BlockReduce;
using cuda_ops::Load;
using cuda_ops::Store;

constexpr int kThreads = 512;

// Blocks of the slice gradient's grid-stride loop over rows (each counts the
// targets once, so fewer blocks than rows amortize the count).
constexpr int kSliceBlocks = 1024;

// The number of targets != ignore_index, on every thread of the calling block.
__device__ float BlockCountValid(const int32_t* targets, int64_t N, int32_t ignore_index,
                                 float* scratch) {
  float c = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
    c += targets[i] != ignore_index ? 1.0f : 0.0f;
  return BlockReduce<false>(c, scratch);
}

static __global__ void __launch_bounds__(1024)
    CountValidKernel(float* count, const int32_t* targets, int64_t N, int32_t ignore_index) {
  __shared__ float scratch[32];
  const float c = BlockCountValid(targets, N, ignore_index, scratch);
  if (threadIdx.x == 0) *count = c;
}

template <typename T>
static __global__ void __launch_bounds__(kThreads)
    CrossEntropyRowKernel(float* row_losses, float* row_lse, T* dlogits, const T* logits,
                          const int32_t* targets, const float* count, int64_t V, int64_t Vp,
                          int32_t ignore_index, float grad_scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * Vp;
  const int32_t target = targets[row];
  const bool ignored = target == ignore_index;
  const bool invalid = !ignored && (target < 0 || target >= V);
  const float x_target = (!ignored && !invalid) ? Load(x + target) : 0.0f;
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, Load(x + v));
  m = BlockReduce<true>(m, scratch);
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(Load(x + v) - m);
  sum = BlockReduce<false>(sum, scratch);  // ends with __syncthreads-protected reads only
  const float lse = m + logf(sum);
  if (threadIdx.x == 0) row_losses[row] = ignored ? 0.0f : (invalid ? NAN : lse - x_target);
  if (threadIdx.x == 0 && row_lse != nullptr) row_lse[row] = lse;
  if (dlogits == nullptr) return;
  __syncthreads();  // every thread has read its logits before any is overwritten
  const float n_valid = *count;
  const float g = (ignored || invalid || n_valid == 0.0f) ? 0.0f : grad_scale / n_valid;
  T* d = dlogits + row * Vp;
  for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
    float grad = 0.0f;
    if (g != 0.0f && v < V) grad = (expf(Load(x + v) - lse) - (v == target ? 1.0f : 0.0f)) * g;
    Store(d + v, grad);
  }
}

// dlogits[i, j] = (exp(x[i, j] - lse_i) - [col_begin + j == target_i]) * g for
// the W slice columns, 0 elsewhere: the formula of CrossEntropyRowKernel.
// Each thread reads only the elements it writes, so dlogits may alias logits.
template <typename T>
static __global__ void __launch_bounds__(kThreads)
    CrossEntropyGradSliceKernel(T* dlogits, const T* logits, const float* row_lse,
                                const int32_t* targets, int64_t N, int64_t W, int64_t Vp,
                                int64_t col_begin, int64_t full_vocab, int32_t ignore_index,
                                float grad_scale) {
  __shared__ float scratch[32];
  const float n_valid = BlockCountValid(targets, N, ignore_index, scratch);
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const int32_t target = targets[row];
    const bool ignored = target == ignore_index;
    const bool invalid = !ignored && (target < 0 || target >= full_vocab);
    const float g = (ignored || invalid || n_valid == 0.0f) ? 0.0f : grad_scale / n_valid;
    const float lse = row_lse[row];
    const int64_t t = static_cast<int64_t>(target) - col_begin;
    const T* x = logits + row * Vp;
    T* d = dlogits + row * Vp;
    for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
      float grad = 0.0f;
      if (g != 0.0f && v < W) grad = (expf(Load(x + v) - lse) - (v == t ? 1.0f : 0.0f)) * g;
      Store(d + v, grad);
    }
  }
}

static __global__ void __launch_bounds__(1024)
    MeanLossKernel(float* loss, const float* row_losses, int64_t N) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += row_losses[i];
  s = BlockReduce<false>(s, scratch);
  if (threadIdx.x == 0) {
    const float n_valid = *loss;  // written by CountValidKernel
    *loss = n_valid > 0.0f ? s / n_valid : 0.0f;
  }
}

}  // namespace

template <typename T>
Status SoftmaxCrossEntropyCuda(cudaStream_t stream, float* loss, float* row_losses, T* dlogits,
                               const T* logits, const int32_t* targets, const CrossEntropyShape& s,
                               const CrossEntropyOptions& o) {
  TF_RETURN_IF_ERROR(ValidateCrossEntropy("SoftmaxCrossEntropyCuda", s));
  if (s.rows >= (int64_t{1} << 24)) {
    return InvalidArgumentError("SoftmaxCrossEntropyCuda: rows " + std::to_string(s.rows) +
                                " >= 2^24; split the batch");
  }
  TF_CUDA_LAUNCH(1, 1024, 0, stream, CountValidKernel)(loss, targets, s.rows, o.ignore_index);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("CountValidKernel"));
  TF_CUDA_LAUNCH(static_cast<unsigned int>(s.rows), kThreads, 0, stream, CrossEntropyRowKernel<T>)
  (row_losses, o.row_lse, dlogits, logits, targets, loss, s.vocab, s.stride(), o.ignore_index,
   o.grad_scale);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("CrossEntropyRowKernel"));
  TF_CUDA_LAUNCH(1, 1024, 0, stream, MeanLossKernel)(loss, row_losses, s.rows);
  return cuda_ops::CheckLaunch("MeanLossKernel");
}

template <typename T>
Status SoftmaxCrossEntropyGradSliceCuda(cudaStream_t stream, T* dlogits, const T* logits,
                                        const float* row_lse, const int32_t* targets,
                                        const CrossEntropyShape& s, int64_t col_begin,
                                        int64_t full_vocab, const CrossEntropyOptions& o) {
  const char* op = "SoftmaxCrossEntropyGradSliceCuda";
  TF_RETURN_IF_ERROR(ValidateCrossEntropySlice(op, s, col_begin, full_vocab));
  if (s.rows >= (int64_t{1} << 24)) {
    return InvalidArgumentError(std::string(op) + ": rows " + std::to_string(s.rows) +
                                " >= 2^24; split the batch");
  }
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>(s.rows, kSliceBlocks));
  TF_CUDA_LAUNCH(blocks, kThreads, 0, stream, CrossEntropyGradSliceKernel<T>)
  (dlogits, logits, row_lse, targets, s.rows, s.vocab, s.stride(), col_begin, full_vocab,
   o.ignore_index, o.grad_scale);
  return cuda_ops::CheckLaunch("CrossEntropyGradSliceKernel");
}

#define TF_INSTANTIATE_CROSS_ENTROPY_CUDA(T)                                                       \
  template Status SoftmaxCrossEntropyCuda<T>(cudaStream_t, float*, float*, T*, const T*,           \
                                             const int32_t*, const CrossEntropyShape&,             \
                                             const CrossEntropyOptions&);                          \
  template Status SoftmaxCrossEntropyGradSliceCuda<T>(                                             \
      cudaStream_t, T*, const T*, const float*, const int32_t*, const CrossEntropyShape&, int64_t, \
      int64_t, const CrossEntropyOptions&);
TF_INSTANTIATE_CROSS_ENTROPY_CUDA(float)
TF_INSTANTIATE_CROSS_ENTROPY_CUDA(bf16)
TF_INSTANTIATE_CROSS_ENTROPY_CUDA(fp16)

}  // namespace tierflow
