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
};

Status ValidateCrossEntropy(const char* op, const CrossEntropyShape& s);

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

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status SoftmaxCrossEntropyCuda(cudaStream_t stream, float* loss, float* row_losses, T* dlogits,
                               const T* logits, const int32_t* targets, const CrossEntropyShape& s,
                               const CrossEntropyOptions& options);
#endif

}  // namespace tierflow
