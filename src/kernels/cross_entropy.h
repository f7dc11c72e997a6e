// Fused softmax + cross-entropy over the vocabulary with an ignore index:
// one pass per row gives the loss and, optionally, dlogits.
//
//   lse_i   = log sum_v exp(logits[i, v])            (v < V; padding columns unused)
//   loss_i  = lse_i - logits[i, target_i]           (0 for ignored rows)
//   loss    = sum_i loss_i / num_valid               (num_valid = rows whose target
//                                                     != ignore_index)
//   dlogits[i, v] = grad_scale * (softmax_iv - [v == target_i]) / num_valid
//
// Ignored rows (and padding columns v >= V) get dlogits = 0. When every target
// is ignored, num_valid = 0: the loss is defined as 0 and all of dlogits is 0
// (no NaN from 0/0), so an all-padding micro-batch contributes nothing.
// grad_scale folds in 1/num_micro_batches or an fp16 loss scale. dlogits is
// OVERWRITTEN and may alias logits (in place, as llm.c does).
//
// With options.row_lse set, each row's lse_i (over the V real columns, fp32,
// ignored rows included) is also written: SoftmaxCrossEntropyGradSlice turns
// it into dlogits for any slice of the columns, so the LM head's gradient can
// be formed a vocabulary slice at a time.
//
// Errors: InvalidArgument for non-positive shapes, padded_vocab < vocab, or
// (CPU paths) a target outside [0, V) that is not the ignore index. CUDA does
// not read targets back to the host: REQUIRES valid targets there; an invalid
// one makes its row loss (and so the mean loss) NaN, with zero dlogits.
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"

namespace tierflow {

struct CrossEntropyShape {
  int64_t rows = 0;          // N = B*T
  int64_t vocab = 0;         // V (real classes)
  int64_t padded_vocab = 0;  // row stride of logits and dlogits; 0 = V
  int64_t stride() const { return padded_vocab != 0 ? padded_vocab : vocab; }
};

struct CrossEntropyOptions {
  // Targets equal to this are skipped. Default: -100 (PyTorch's default).
  int32_t ignore_index = -100;
  // Multiplies dlogits. Default: 1.
  float grad_scale = 1.0f;
  // (N) fp32, or nullptr: SoftmaxCrossEntropy writes each row's log-sum-exp
  // over the V real columns here (ignored rows too). The CPU fast path writes
  // the very float its dlogits were computed from. Device memory on a device,
  // like row_losses. SoftmaxCrossEntropyGradSlice ignores it.
  float* row_lse = nullptr;
};

Status ValidateCrossEntropy(const char* op, const CrossEntropyShape& s);
// ValidateCrossEntropy plus the slice [col_begin, col_begin + s.vocab) lying in [0, full_vocab).
Status ValidateCrossEntropySlice(const char* op, const CrossEntropyShape& s, int64_t col_begin,
                                 int64_t full_vocab);

template <typename T>
Status SoftmaxCrossEntropyReference(
    float* loss,             // (1) mean over valid rows
    float* row_losses,       // (N) per-row losses; required (the mean sums it)
    T* dlogits,              // (N, Vp) or nullptr
    const T* logits,         // (N, Vp)
    const int32_t* targets,  // (N)
    const CrossEntropyShape& s, const CrossEntropyOptions& options = {});
template <typename T>
Status SoftmaxCrossEntropyCpu(float* loss, float* row_losses, T* dlogits, const T* logits,
                              const int32_t* targets, const CrossEntropyShape& s,
                              const CrossEntropyOptions& options = {});
// `loss` and `row_losses` are device memory like the rest.
template <typename T>
Status SoftmaxCrossEntropy(Stream& stream, float* loss, float* row_losses, T* dlogits,
                           const T* logits, const int32_t* targets, const CrossEntropyShape& s,
                           const CrossEntropyOptions& options = {});

// The logits' gradient for the vocabulary columns [col_begin, col_begin + s.vocab)
// of each row, from those columns' logits alone and each row's log-sum-exp over
// the whole vocabulary (SoftmaxCrossEntropy's row_lse):
//   dlogits[i, j] = grad_scale * (exp(logits[i, j] - row_lse[i])
//                                 - [col_begin + j == target_i]) / num_valid
// num_valid counts the rows of this call whose target != ignore_index, exactly
// as SoftmaxCrossEntropy counts them, so a call over the same rows with the
// same options reproduces SoftmaxCrossEntropy's dlogits for those columns (the
// CPU fast path bit for bit, given the same logits and its row_lse). Ignored
// rows and padding columns (j >= s.vocab, up to s.stride()) get 0; so does
// everything when num_valid = 0. dlogits is OVERWRITTEN and may alias logits.
//
// s.vocab is the slice's width and s.padded_vocab the row stride of logits and
// dlogits (0 = the width). Errors: InvalidArgument for the shape errors above,
// col_begin < 0, col_begin + s.vocab > full_vocab, a null pointer, or (CPU
// paths) a target outside [0, full_vocab) that is not the ignore index. CUDA
// REQUIRES valid targets (an invalid one's row gets zero dlogits).
template <typename T>
Status SoftmaxCrossEntropyGradSliceReference(
    T* dlogits,              // (N, Vp) slice columns; may alias logits
    const T* logits,         // (N, Vp) slice columns
    const float* row_lse,    // (N) log-sum-exp over all full_vocab columns
    const int32_t* targets,  // (N) in [0, full_vocab) or ignore_index
    const CrossEntropyShape& s, int64_t col_begin, int64_t full_vocab,
    const CrossEntropyOptions& options = {});
template <typename T>
Status SoftmaxCrossEntropyGradSliceCpu(T* dlogits, const T* logits, const float* row_lse,
                                       const int32_t* targets, const CrossEntropyShape& s,
                                       int64_t col_begin, int64_t full_vocab,
                                       const CrossEntropyOptions& options = {});
// `row_lse` is device memory like the rest.
template <typename T>
Status SoftmaxCrossEntropyGradSlice(Stream& stream, T* dlogits, const T* logits,
                                    const float* row_lse, const int32_t* targets,
                                    const CrossEntropyShape& s, int64_t col_begin,
                                    int64_t full_vocab, const CrossEntropyOptions& options = {});

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status SoftmaxCrossEntropyCuda(cudaStream_t stream, float* loss, float* row_losses, T* dlogits,
                               const T* logits, const int32_t* targets, const CrossEntropyShape& s,
                               const CrossEntropyOptions& options);
template <typename T>
Status SoftmaxCrossEntropyGradSliceCuda(cudaStream_t stream, T* dlogits, const T* logits,
                                        const float* row_lse, const int32_t* targets,
                                        const CrossEntropyShape& s, int64_t col_begin,
                                        int64_t full_vocab, const CrossEntropyOptions& options);
#endif

}  // namespace tierflow
