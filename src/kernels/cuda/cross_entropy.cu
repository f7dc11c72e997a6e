// Fused softmax cross-entropy on CUDA, three launches and no scratch memory:
//   1. one block counts the non-ignored targets into *loss (exact as a float
//      below 2^24 rows);
//   2. one block per row: max and sum of exp in one read (online), row loss,
//      then dlogits in a second read and a write (in place safe: the target
//      logit is read before any write); rows in 16-byte packs where aligned;
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

// Calls f(x[v]) for the calling thread's elements v < n of row x, loaded in
// packs of kN (kN divides the row stride and the row is 16-byte aligned when
// kN > 1, so a pack past n is still inside the row).
template <int kN, typename T, typename F>
__device__ __forceinline__ void ForRowElements(const T* x, int64_t n, const F& f) {
  for (int64_t v0 = threadIdx.x * kN; v0 < n; v0 += static_cast<int64_t>(blockDim.x) * kN) {
    float xs[kN];
    cuda_ops::LoadFloats<kN>(x + v0, xs);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      if (v0 + j < n) f(xs[j]);
    }
  }
}

// The gradient of row x into d over the stride's Vp columns (0 past the W
// real ones): (exp(x - lse) - [v == target]) * g, in packs of kN.
template <int kN, typename T>
__device__ __forceinline__ void StoreRowGrad(T* d, const T* x, int64_t W, int64_t Vp, float lse,
                                             int64_t target, float g) {
  for (int64_t v0 = threadIdx.x * kN; v0 < Vp; v0 += static_cast<int64_t>(blockDim.x) * kN) {
    float xs[kN], grad[kN];
    cuda_ops::LoadFloats<kN>(x + v0, xs);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const int64_t v = v0 + j;
      grad[j] = (g != 0.0f && v < W) ? (expf(xs[j] - lse) - (v == target ? 1.0f : 0.0f)) * g : 0.0f;
    }
    cuda_ops::StoreFloats<kN>(d + v0, grad);
  }
}

// One read of the row for its max and sum of exp together (an online
// softmax: a thread rescales its sum when its max grows; the block combines
// the threads' pairs in a fixed tree), then one read and write for dlogits.
template <int kN, typename T>
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
  float m = -INFINITY, sum = 0.0f;
  ForRowElements<kN>(x, V, [&](float xv) {
    if (xv > m) {
      sum = sum * expf(m - xv) + 1.0f;  // exp(-inf) = 0 for the first element
      m = xv;
    } else if (xv != -INFINITY) {
      sum += expf(xv - m);  // NaN stays NaN
    }
  });
  const float block_max = BlockReduce<true>(m, scratch);
  sum = BlockReduce<false>(m == -INFINITY ? sum : sum * expf(m - block_max), scratch);
  // BlockReduce ends with __syncthreads-protected reads only.
  const float lse = block_max + logf(sum);
  if (threadIdx.x == 0) row_losses[row] = ignored ? 0.0f : (invalid ? NAN : lse - x_target);
  if (threadIdx.x == 0 && row_lse != nullptr) row_lse[row] = lse;
  if (dlogits == nullptr) return;
  __syncthreads();  // every thread has read its logits before any is overwritten
  const float n_valid = *count;
  const float g = (ignored || invalid || n_valid == 0.0f) ? 0.0f : grad_scale / n_valid;
  StoreRowGrad<kN>(dlogits + row * Vp, x, V, Vp, lse, target, g);
}

// dlogits[i, j] = (exp(x[i, j] - lse_i) - [col_begin + j == target_i]) * g for
// the W slice columns, 0 elsewhere: the formula of CrossEntropyRowKernel.
// Each thread reads only the elements it writes, so dlogits may alias logits.
template <int kN, typename T>
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
    StoreRowGrad<kN>(dlogits + row * Vp, logits + row * Vp, W, Vp, row_lse[row],
                     static_cast<int64_t>(target) - col_begin, g);
  }
}

// The pack width for rows of stride Vp at these tensors: 16 bytes when every
// row starts on a 16-byte boundary, else 1.
template <typename T>
bool RowPacks(int64_t Vp, const void* a, const void* b) {
  return Vp % cuda_ops::kPackElems<T> == 0 && cuda_ops::AlignedTo(a, 16) &&
         (b == nullptr || cuda_ops::AlignedTo(b, 16));
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
  const auto rows = static_cast<unsigned int>(s.rows);
  if (RowPacks<T>(s.stride(), logits, dlogits)) {
    TF_CUDA_LAUNCH(rows, kThreads, 0, stream, CrossEntropyRowKernel<cuda_ops::kPackElems<T>, T>)
    (row_losses, o.row_lse, dlogits, logits, targets, loss, s.vocab, s.stride(), o.ignore_index,
     o.grad_scale);
  } else {
    TF_CUDA_LAUNCH(rows, kThreads, 0, stream, CrossEntropyRowKernel<1, T>)
    (row_losses, o.row_lse, dlogits, logits, targets, loss, s.vocab, s.stride(), o.ignore_index,
     o.grad_scale);
  }
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
  if (RowPacks<T>(s.stride(), logits, dlogits)) {
    TF_CUDA_LAUNCH(blocks, kThreads, 0, stream,
                   CrossEntropyGradSliceKernel<cuda_ops::kPackElems<T>, T>)
    (dlogits, logits, row_lse, targets, s.rows, s.vocab, s.stride(), col_begin, full_vocab,
     o.ignore_index, o.grad_scale);
  } else {
    TF_CUDA_LAUNCH(blocks, kThreads, 0, stream, CrossEntropyGradSliceKernel<1, T>)
    (dlogits, logits, row_lse, targets, s.rows, s.vocab, s.stride(), col_begin, full_vocab,
     o.ignore_index, o.grad_scale);
  }
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
