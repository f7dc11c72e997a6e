// Fused softmax cross-entropy on CUDA, three launches and no scratch memory:
//   1. one block counts the non-ignored targets into *loss (exact as a float
//      below 2^24 rows);
//   2. one block per row: max, sum of exp, row loss and dlogits (in place safe:
//      the target logit is read before any write);
//   3. one block sums the row losses in a fixed order and divides: the mean.
#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_ops_common.cuh"

namespace tierflow {
namespace {

using cuda_ops::BlockReduce;
using cuda_ops::Load;
using cuda_ops::Store;

constexpr int kThreads = 512;

static __global__ void CountValidKernel(float* count, const int32_t* targets, int64_t N,
                                        int32_t ignore_index) {
  __shared__ float scratch[32];
  float c = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
    c += targets[i] != ignore_index ? 1.0f : 0.0f;
  c = BlockReduce<false>(c, scratch);
  if (threadIdx.x == 0) *count = c;
}

template <typename T>
static __global__ void CrossEntropyRowKernel(float* row_losses, T* dlogits, const T* logits,
                                             const int32_t* targets, const float* count, int64_t V,
                                             int64_t Vp, int32_t ignore_index, float grad_scale) {
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

static __global__ void MeanLossKernel(float* loss, const float* row_losses, int64_t N) {
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
  CountValidKernel<<<1, 1024, 0, stream>>>(loss, targets, s.rows, o.ignore_index);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("CountValidKernel"));
  CrossEntropyRowKernel<<<static_cast<unsigned int>(s.rows), kThreads, 0, stream>>>(
      row_losses, dlogits, logits, targets, loss, s.vocab, s.stride(), o.ignore_index,
      o.grad_scale);
  TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("CrossEntropyRowKernel"));
  MeanLossKernel<<<1, 1024, 0, stream>>>(loss, row_losses, s.rows);
  return cuda_ops::CheckLaunch("MeanLossKernel");
}

#define TF_INSTANTIATE_CROSS_ENTROPY_CUDA(T)                                             \
  template Status SoftmaxCrossEntropyCuda<T>(cudaStream_t, float*, float*, T*, const T*, \
                                             const int32_t*, const CrossEntropyShape&,   \
                                             const CrossEntropyOptions&);
TF_INSTANTIATE_CROSS_ENTROPY_CUDA(float)
TF_INSTANTIATE_CROSS_ENTROPY_CUDA(bf16)
TF_INSTANTIATE_CROSS_ENTROPY_CUDA(fp16)

}  // namespace tierflow
