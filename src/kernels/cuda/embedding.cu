// Embedding (+ learned positions) on CUDA: kernels, launchers, entry points.
// Forward gathers rows in 16-byte packs where aligned.
// Backward is deterministic without atomics: thread (s, c) owns column c of
// every vocab row v with v % kVocabSlices == s and walks the tokens in order.
#include "kernels/cuda/cuda_ops_common.cuh"
#include "kernels/embedding.h"

namespace tierflow {
namespace {

using cuda_ops::Load;
using cuda_ops::Store;

constexpr int kThreads = 256;  // of the backward kernels (a thread per column)
constexpr int kVocabSlices = 64;

// A thread per kN consecutive columns of a row (kN divides C, and the
// tensors are 16-byte aligned, when kN > 1).
template <int kN, typename T>
static __global__ void __launch_bounds__(cuda_ops::kGridStrideThreads)
    EmbeddingForwardKernel(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t rows,
                           int64_t T_, int64_t C, int64_t V) {
  const int64_t packs = rows * C / kN;
  TF_GRID_STRIDE(p, packs) {
    const int64_t idx = p * kN, row = idx / C, c = idx % C;
    const int32_t tok = tokens[row];
    float v[kN] = {}, pos[kN];
    if (tok >= 0 && tok < V) cuda_ops::LoadFloats<kN>(wte + tok * C + c, v);
    if (wpe != nullptr) {
      cuda_ops::LoadFloats<kN>(wpe + (row % T_) * C + c, pos);
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] += pos[j];
    }
    cuda_ops::StoreFloats<kN>(out + idx, v);
  }
}

// dwte holds vocab rows [row_begin, row_end) (within [0, V)); other tokens add nothing.
template <typename T>
static __global__ void __launch_bounds__(kThreads)
    EmbeddingBackwardWteKernel(float* dwte, const T* dout, const int32_t* tokens, int64_t rows,
                               int64_t C, int64_t row_begin, int64_t row_end) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int slice = blockIdx.y;
  if (c >= C) return;
  for (int64_t row = 0; row < rows; ++row) {
    const int32_t tok = tokens[row];
    if (tok < row_begin || tok >= row_end || tok % kVocabSlices != slice) continue;
    dwte[(tok - row_begin) * C + c] += Load(dout + row * C + c);
  }
}

template <typename T>
static __global__ void __launch_bounds__(kThreads)
    EmbeddingBackwardWpeKernel(float* dwpe, const T* dout, int64_t B, int64_t T_, int64_t C) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= T_ * C) return;
  const int64_t t = idx / C, c = idx % C;
  float acc = 0.0f;
  for (int64_t b = 0; b < B; ++b) acc += Load(dout + (b * T_ + t) * C + c);
  dwpe[idx] += acc;
}

}  // namespace

template <typename T>
Status EmbeddingForwardCuda(cudaStream_t stream, T* out, const int32_t* tokens, const T* wte,
                            const T* wpe, const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(ValidateEmbedding("EmbeddingForwardCuda", s));
  const int64_t rows = s.batch * s.seq_len;
  constexpr int kN = cuda_ops::kPackElems<T>;
  if (s.channels % kN == 0 && cuda_ops::AlignedTo(out, 16) && cuda_ops::AlignedTo(wte, 16) &&
      (wpe == nullptr || cuda_ops::AlignedTo(wpe, 16))) {
    return cuda_ops::LaunchGridStride(stream, rows * s.channels / kN, "EmbeddingForwardKernel",
                                      EmbeddingForwardKernel<kN, T>, out, tokens, wte, wpe, rows,
                                      s.seq_len, s.channels, s.vocab);
  }
  return cuda_ops::LaunchGridStride(stream, rows * s.channels, "EmbeddingForwardKernel",
                                    EmbeddingForwardKernel<1, T>, out, tokens, wte, wpe, rows,
                                    s.seq_len, s.channels, s.vocab);
}

template <typename T>
Status EmbeddingBackwardCuda(cudaStream_t stream, float* dwte, float* dwpe, const T* dout,
                             const int32_t* tokens, const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(ValidateEmbeddingBackward("EmbeddingBackwardCuda", s, dwte, dwpe));
  const int64_t rows = s.batch * s.seq_len;
  if (dwte != nullptr) {
    dim3 grid(static_cast<unsigned int>((s.channels + kThreads - 1) / kThreads), kVocabSlices);
    TF_CUDA_LAUNCH(grid, kThreads, 0, stream, EmbeddingBackwardWteKernel<T>)
    (dwte, dout, tokens, rows, s.channels, s.grad_row_begin, s.grad_row_end());
    TF_RETURN_IF_ERROR(cuda_ops::CheckLaunch("EmbeddingBackwardWteKernel"));
  }
  if (dwpe == nullptr) return Status::Ok();
  const int64_t n = s.seq_len * s.channels;
  TF_CUDA_LAUNCH(static_cast<unsigned int>((n + kThreads - 1) / kThreads), kThreads, 0, stream,
                 EmbeddingBackwardWpeKernel<T>)
  (dwpe, dout, s.batch, s.seq_len, s.channels);
  return cuda_ops::CheckLaunch("EmbeddingBackwardWpeKernel");
}

#define TF_INSTANTIATE_EMBEDDING_CUDA(T)                                                           \
  template Status EmbeddingForwardCuda<T>(cudaStream_t, T*, const int32_t*, const T*, const T*,    \
                                          const EmbeddingShape&);                                  \
  template Status EmbeddingBackwardCuda<T>(cudaStream_t, float*, float*, const T*, const int32_t*, \
                                           const EmbeddingShape&);
TF_INSTANTIATE_EMBEDDING_CUDA(float)
TF_INSTANTIATE_EMBEDDING_CUDA(bf16)
TF_INSTANTIATE_EMBEDDING_CUDA(fp16)

}  // namespace tierflow
