// Fused softmax cross-entropy: reference (double), fast CPU path (one row per
// step, Eigen arrays, rows in fixed chunks), device dispatch.
#include "kernels/cross_entropy.h"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/op_costs.h"

namespace tierflow {
namespace {

Status CheckTargets(const char* op, const int32_t* targets, const CrossEntropyShape& s,
                    const CrossEntropyOptions& o, int64_t* num_valid) {
  *num_valid = 0;
  for (int64_t i = 0; i < s.rows; ++i) {
    if (targets[i] == o.ignore_index) continue;
    if (targets[i] < 0 || targets[i] >= s.vocab) {
      return InvalidArgumentError(std::string(op) + ": target " + std::to_string(targets[i]) +
                                  " of row " + std::to_string(i) + " is outside [0, " +
                                  std::to_string(s.vocab) + ") and is not the ignore index " +
                                  std::to_string(o.ignore_index));
    }
    ++*num_valid;
  }
  return Status::Ok();
}

Status CheckPointers(const char* op, const float* loss, const float* row_losses, const void* logits,
                     const int32_t* targets) {
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, "loss", loss));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, "row_losses", row_losses));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, "logits", logits));
  return ops_internal::CheckNotNull(op, "targets", targets);
}

}  // namespace

Status ValidateCrossEntropy(const char* op, const CrossEntropyShape& s) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive(op, "rows", s.rows));
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive(op, "vocab", s.vocab));
  if (s.padded_vocab != 0 && s.padded_vocab < s.vocab) {
    return InvalidArgumentError(std::string(op) + ": padded_vocab " +
                                std::to_string(s.padded_vocab) + " < vocab " +
                                std::to_string(s.vocab));
  }
  return Status::Ok();
}

// ---- reference ----

template <typename T>
Status SoftmaxCrossEntropyReference(float* loss, float* row_losses, T* dlogits, const T* logits,
                                    const int32_t* targets, const CrossEntropyShape& s,
                                    const CrossEntropyOptions& o) {
  const char* op = "SoftmaxCrossEntropyReference";
  TF_RETURN_IF_ERROR(ValidateCrossEntropy(op, s));
  TF_RETURN_IF_ERROR(CheckPointers(op, loss, row_losses, logits, targets));
  int64_t num_valid = 0;
  TF_RETURN_IF_ERROR(CheckTargets(op, targets, s, o, &num_valid));
  const int64_t V = s.vocab, Vp = s.stride();
  const double inv_valid = num_valid > 0 ? 1.0 / static_cast<double>(num_valid) : 0.0;
  double total = 0.0;
  for (int64_t i = 0; i < s.rows; ++i) {
    const T* x = logits + i * Vp;
    const bool ignored = targets[i] == o.ignore_index;
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(ToFloat(x[v])));
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(ToFloat(x[v]) - m);
    const double lse = m + std::log(sum);
    const double row_loss = ignored ? 0.0 : lse - ToFloat(x[targets[i]]);
    row_losses[i] = static_cast<float>(row_loss);
    total += row_loss;
    if (dlogits == nullptr) continue;
    // Probabilities first: dlogits may alias logits.
    std::vector<double> p(V);
    for (int64_t v = 0; v < V; ++v) p[v] = std::exp(ToFloat(x[v]) - lse);
    for (int64_t v = 0; v < Vp; ++v) {
      double g = 0.0;
      if (!ignored && v < V) g = (p[v] - (v == targets[i] ? 1.0 : 0.0)) * o.grad_scale * inv_valid;
      dlogits[i * Vp + v] = FromFloat<T>(static_cast<float>(g));
    }
  }
  *loss = static_cast<float>(total * inv_valid);
  return Status::Ok();
}

// ---- fast CPU path ----

template <typename T>
Status SoftmaxCrossEntropyCpu(float* loss, float* row_losses, T* dlogits, const T* logits,
                              const int32_t* targets, const CrossEntropyShape& s,
                              const CrossEntropyOptions& o) {
  const char* op = "SoftmaxCrossEntropyCpu";
  TF_RETURN_IF_ERROR(ValidateCrossEntropy(op, s));
  TF_RETURN_IF_ERROR(CheckPointers(op, loss, row_losses, logits, targets));
  int64_t num_valid = 0;
  TF_RETURN_IF_ERROR(CheckTargets(op, targets, s, o, &num_valid));
  const int64_t V = s.vocab, Vp = s.stride();
  const float grad_per_row = num_valid > 0 ? o.grad_scale / static_cast<float>(num_valid) : 0.0f;
  ops_internal::ForEachChunk(s.rows, ops_internal::kRowChunk, [&](int64_t, int64_t r0, int64_t r1) {
    ops_internal::FloatArray x(V);
    for (int64_t i = r0; i < r1; ++i) {
      const bool ignored = targets[i] == o.ignore_index;
      ops_internal::WidenRow(logits + i * Vp, V, x.data());
      const float m = x.maxCoeff();
      const float lse = m + std::log((x - m).exp().sum());
      row_losses[i] = ignored ? 0.0f : lse - x[targets[i]];
      if (dlogits == nullptr) continue;
      T* d = dlogits + i * Vp;
      if (ignored) {
        x.setZero();
      } else {
        x = (x - lse).exp() * grad_per_row;
        x[targets[i]] -= grad_per_row;
      }
      ops_internal::NarrowRow(x.data(), V, d);
      for (int64_t v = V; v < Vp; ++v) d[v] = FromFloat<T>(0.0f);
    }
  });
  // The mean, in row order (deterministic), in double.
  double total = 0.0;
  for (int64_t i = 0; i < s.rows; ++i) total += row_losses[i];
  *loss = num_valid > 0 ? static_cast<float>(total / static_cast<double>(num_valid)) : 0.0f;
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status SoftmaxCrossEntropy(Stream& stream, float* loss, float* row_losses, T* dlogits,
                           const T* logits, const int32_t* targets, const CrossEntropyShape& s,
                           const CrossEntropyOptions& o) {
  const char* op = "SoftmaxCrossEntropy";
  TF_RETURN_IF_ERROR(ValidateCrossEntropy(op, s));
  TF_RETURN_IF_ERROR(CheckPointers(op, loss, row_losses, logits, targets));
  return stream.Launch(
      {"SoftmaxCrossEntropy",
       op_costs::CrossEntropy(s.rows, s.vocab, sizeof(T), dlogits != nullptr),
       [=] { return SoftmaxCrossEntropyCpu(loss, row_losses, dlogits, logits, targets, s, o); },
       TF_CUDA_KERNEL(SoftmaxCrossEntropyCuda(cuda_stream, loss, row_losses, dlogits, logits,
                                              targets, s, o))});
}

#define TF_INSTANTIATE_CROSS_ENTROPY(T)                                                            \
  template Status SoftmaxCrossEntropyReference<T>(float*, float*, T*, const T*, const int32_t*,    \
                                                  const CrossEntropyShape&,                        \
                                                  const CrossEntropyOptions&);                     \
  template Status SoftmaxCrossEntropyCpu<T>(float*, float*, T*, const T*, const int32_t*,          \
                                            const CrossEntropyShape&, const CrossEntropyOptions&); \
  template Status SoftmaxCrossEntropy<T>(Stream&, float*, float*, T*, const T*, const int32_t*,    \
                                         const CrossEntropyShape&, const CrossEntropyOptions&);
TF_INSTANTIATE_CROSS_ENTROPY(float)
TF_INSTANTIATE_CROSS_ENTROPY(bf16)
TF_INSTANTIATE_CROSS_ENTROPY(fp16)

}  // namespace tierflow
