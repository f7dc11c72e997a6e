// Fused softmax cross-entropy and the logits' gradient of a vocabulary slice:
// reference (double), fast CPU path (one row per step, Eigen arrays, rows in
// fixed chunks), device dispatch.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/op_costs.h"

namespace tierflow {
namespace {

// Targets must lie in [0, vocab) (the full vocabulary) or be the ignore index.
Status CheckTargets(const char* op, const int32_t* targets, int64_t rows, int64_t vocab,
                    const CrossEntropyOptions& o, int64_t* num_valid) {
  *num_valid = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (targets[i] == o.ignore_index) continue;
    if (targets[i] < 0 || targets[i] >= vocab) {
      return InvalidArgumentError(std::string(op) + ": target " + std::to_string(targets[i]) +
                                  " of row " + std::to_string(i) + " is outside [0, " +
                                  std::to_string(vocab) + ") and is not the ignore index " +
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

Status CheckSlicePointers(const char* op, const void* dlogits, const void* logits,
                          const float* row_lse, const int32_t* targets) {
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, "dlogits", dlogits));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, "logits", logits));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, "row_lse", row_lse));
  return ops_internal::CheckNotNull(op, "targets", targets);
}

// The fast path's dlogits row is `x = (x - lse).exp() * g` over the row's V
// columns, and Eigen evaluates that with packets (its own exp polynomial) over
// the first V - V % P columns and with scalar std::exp over the last V % P;
// the two exps can differ in the last bit. A slice reproduces those bits by
// evaluating each of its columns the way the whole row would: the packet
// columns in an aligned array whose length is a multiple of P (all packets;
// packet lanes are independent), the scalar ones in an array shorter than P
// (no packet at all).
constexpr int64_t kExpPacket =
    Eigen::internal::functor_traits<Eigen::internal::scalar_exp_op<float>>::PacketAccess
        ? Eigen::internal::packet_traits<float>::size
        : 1;

// Scratch of one chunk of rows for ScaledExpLikeFullRow.
struct SliceScratch {
  explicit SliceScratch(int64_t width)
      : packet((width + kExpPacket - 1) / kExpPacket * kExpPacket), scalar(kExpPacket) {}
  ops_internal::FloatArray packet, scalar;
};

// y[j] = exp(x[j] - lse) * g for the row's columns [col_begin, col_begin + n)
// (x and y point at column col_begin; they may be the same array), each bit
// for bit as the whole row of `vocab` columns computes it (above).
void ScaledExpLikeFullRow(const float* x, int64_t n, int64_t col_begin, int64_t vocab, float lse,
                          float g, SliceScratch* scratch, float* y) {
  using AlignedMap = Eigen::Map<ops_internal::FloatArray, Eigen::AlignedMax>;
  const int64_t packet_end = vocab - vocab % kExpPacket;  // the row's packet columns end here
  const int64_t k = std::clamp<int64_t>(packet_end - col_begin, 0, n);
  // The scalar columns [k, n), fewer than kExpPacket of them; first, as y may be x.
  const int64_t m = n - k;
  AlignedMap t(scratch->scalar.data(), m);
  if (m > 0) {
    t = Eigen::Map<const ops_internal::FloatArray>(x + k, m);
    t = (t - lse).exp() * g;
  }
  if (k > 0) {
    const int64_t padded = (k + kExpPacket - 1) / kExpPacket * kExpPacket;
    AlignedMap p(scratch->packet.data(), padded);
    std::copy(x, x + k, p.data());
    std::fill(p.data() + k, p.data() + padded, lse);  // exp(0): padding, never read
    p = (p - lse).exp() * g;
    std::copy(p.data(), p.data() + k, y);
  }
  std::copy(t.data(), t.data() + m, y + k);
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

Status ValidateCrossEntropySlice(const char* op, const CrossEntropyShape& s, int64_t col_begin,
                                 int64_t full_vocab) {
  TF_RETURN_IF_ERROR(ValidateCrossEntropy(op, s));
  if (col_begin < 0) {
    return InvalidArgumentError(std::string(op) + ": col_begin " + std::to_string(col_begin) +
                                " < 0");
  }
  if (col_begin + s.vocab > full_vocab) {
    return InvalidArgumentError(std::string(op) + ": the slice [" + std::to_string(col_begin) +
                                ", " + std::to_string(col_begin + s.vocab) +
                                ") (col_begin + width) ends past full_vocab " +
                                std::to_string(full_vocab));
  }
  return Status::Ok();
}

namespace {

// The host paths' checks of a whole-row call: shape, pointers and targets.
// Returns the number of rows whose target is not the ignore index.
StatusOr<int64_t> CheckRowsCall(const char* op, const CrossEntropyShape& s, const float* loss,
                                const float* row_losses, const void* logits, const int32_t* targets,
                                const CrossEntropyOptions& o) {
  TF_RETURN_IF_ERROR(ValidateCrossEntropy(op, s));
  TF_RETURN_IF_ERROR(CheckPointers(op, loss, row_losses, logits, targets));
  int64_t num_valid = 0;
  TF_RETURN_IF_ERROR(CheckTargets(op, targets, s.rows, s.vocab, o, &num_valid));
  return num_valid;
}

// The same for a slice call (targets index the full vocabulary).
StatusOr<int64_t> CheckSliceCall(const char* op, const CrossEntropyShape& s, int64_t col_begin,
                                 int64_t full_vocab, const void* dlogits, const void* logits,
                                 const float* row_lse, const int32_t* targets,
                                 const CrossEntropyOptions& o) {
  TF_RETURN_IF_ERROR(ValidateCrossEntropySlice(op, s, col_begin, full_vocab));
  TF_RETURN_IF_ERROR(CheckSlicePointers(op, dlogits, logits, row_lse, targets));
  int64_t num_valid = 0;
  TF_RETURN_IF_ERROR(CheckTargets(op, targets, s.rows, full_vocab, o, &num_valid));
  return num_valid;
}

}  // namespace

// ---- reference ----

template <typename T>
Status SoftmaxCrossEntropyReference(float* loss, float* row_losses, T* dlogits, const T* logits,
                                    const int32_t* targets, const CrossEntropyShape& s,
                                    const CrossEntropyOptions& o) {
  TF_ASSIGN_OR_RETURN(const int64_t num_valid, CheckRowsCall("SoftmaxCrossEntropyReference", s,
                                                             loss, row_losses, logits, targets, o));
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
    if (o.row_lse != nullptr) o.row_lse[i] = static_cast<float>(lse);
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
  TF_ASSIGN_OR_RETURN(const int64_t num_valid, CheckRowsCall("SoftmaxCrossEntropyCpu", s, loss,
                                                             row_losses, logits, targets, o));
  const int64_t V = s.vocab, Vp = s.stride();
  const float grad_per_row = num_valid > 0 ? o.grad_scale / static_cast<float>(num_valid) : 0.0f;
  ops_internal::ForEachChunk(s.rows, ops_internal::kRowChunk, [&](int64_t, int64_t r0, int64_t r1) {
    ops_internal::FloatArray x(V);
    for (int64_t i = r0; i < r1; ++i) {
      const bool ignored = targets[i] == o.ignore_index;
      ops_internal::WidenRow(logits + i * Vp, V, x.data());
      const float m = x.maxCoeff();
      const float lse = m + std::log((x - m).exp().sum());
      if (o.row_lse != nullptr) o.row_lse[i] = lse;
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

template <typename T>
Status SoftmaxCrossEntropyGradSliceReference(T* dlogits, const T* logits, const float* row_lse,
                                             const int32_t* targets, const CrossEntropyShape& s,
                                             int64_t col_begin, int64_t full_vocab,
                                             const CrossEntropyOptions& o) {
  TF_ASSIGN_OR_RETURN(const int64_t num_valid,
                      CheckSliceCall("SoftmaxCrossEntropyGradSliceReference", s, col_begin,
                                     full_vocab, dlogits, logits, row_lse, targets, o));
  const int64_t W = s.vocab, Vp = s.stride();
  const double inv_valid = num_valid > 0 ? 1.0 / static_cast<double>(num_valid) : 0.0;
  for (int64_t i = 0; i < s.rows; ++i) {
    const bool ignored = targets[i] == o.ignore_index;
    const double lse = row_lse[i];
    // Element by element, each read before its own write: dlogits may alias logits.
    for (int64_t v = 0; v < Vp; ++v) {
      double g = 0.0;
      if (!ignored && v < W) {
        const double p = std::exp(static_cast<double>(ToFloat(logits[i * Vp + v])) - lse);
        g = (p - (col_begin + v == targets[i] ? 1.0 : 0.0)) * o.grad_scale * inv_valid;
      }
      dlogits[i * Vp + v] = FromFloat<T>(static_cast<float>(g));
    }
  }
  return Status::Ok();
}

template <typename T>
Status SoftmaxCrossEntropyGradSliceCpu(T* dlogits, const T* logits, const float* row_lse,
                                       const int32_t* targets, const CrossEntropyShape& s,
                                       int64_t col_begin, int64_t full_vocab,
                                       const CrossEntropyOptions& o) {
  TF_ASSIGN_OR_RETURN(const int64_t num_valid,
                      CheckSliceCall("SoftmaxCrossEntropyGradSliceCpu", s, col_begin, full_vocab,
                                     dlogits, logits, row_lse, targets, o));
  const int64_t W = s.vocab, Vp = s.stride();
  // As SoftmaxCrossEntropyCpu computes them, so fp32 results match it bit for bit.
  const float grad_per_row = num_valid > 0 ? o.grad_scale / static_cast<float>(num_valid) : 0.0f;
  ops_internal::ForEachChunk(s.rows, ops_internal::kRowChunk, [&](int64_t, int64_t r0, int64_t r1) {
    ops_internal::FloatArray x(W);
    SliceScratch scratch(W);
    for (int64_t i = r0; i < r1; ++i) {
      T* d = dlogits + i * Vp;
      if (targets[i] == o.ignore_index) {
        x.setZero();
      } else {
        ops_internal::WidenRow(logits + i * Vp, W, x.data());
        ScaledExpLikeFullRow(x.data(), W, col_begin, full_vocab, row_lse[i], grad_per_row, &scratch,
                             x.data());
        const int64_t t = targets[i] - col_begin;
        if (t >= 0 && t < W) x[t] -= grad_per_row;
      }
      ops_internal::NarrowRow(x.data(), W, d);
      for (int64_t v = W; v < Vp; ++v) d[v] = FromFloat<T>(0.0f);
    }
  });
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
  return stream.Launch(TF_OP_KERNEL(
      SoftmaxCrossEntropy, op_costs::CrossEntropy(s.rows, s.vocab, sizeof(T), dlogits != nullptr),
      loss, row_losses, dlogits, logits, targets, s, o));
}

template <typename T>
Status SoftmaxCrossEntropyGradSlice(Stream& stream, T* dlogits, const T* logits,
                                    const float* row_lse, const int32_t* targets,
                                    const CrossEntropyShape& s, int64_t col_begin,
                                    int64_t full_vocab, const CrossEntropyOptions& o) {
  const char* op = "SoftmaxCrossEntropyGradSlice";
  TF_RETURN_IF_ERROR(ValidateCrossEntropySlice(op, s, col_begin, full_vocab));
  TF_RETURN_IF_ERROR(CheckSlicePointers(op, dlogits, logits, row_lse, targets));
  return stream.Launch(TF_OP_KERNEL(
      SoftmaxCrossEntropyGradSlice, op_costs::CrossEntropyGradSlice(s.rows, s.vocab, sizeof(T)),
      dlogits, logits, row_lse, targets, s, col_begin, full_vocab, o));
}

#define TF_INSTANTIATE_CROSS_ENTROPY(T)                                                            \
  template Status SoftmaxCrossEntropyReference<T>(float*, float*, T*, const T*, const int32_t*,    \
                                                  const CrossEntropyShape&,                        \
                                                  const CrossEntropyOptions&);                     \
  template Status SoftmaxCrossEntropyCpu<T>(float*, float*, T*, const T*, const int32_t*,          \
                                            const CrossEntropyShape&, const CrossEntropyOptions&); \
  template Status SoftmaxCrossEntropy<T>(Stream&, float*, float*, T*, const T*, const int32_t*,    \
                                         const CrossEntropyShape&, const CrossEntropyOptions&);    \
  template Status SoftmaxCrossEntropyGradSliceReference<T>(                                        \
      T*, const T*, const float*, const int32_t*, const CrossEntropyShape&, int64_t, int64_t,      \
      const CrossEntropyOptions&);                                                                 \
  template Status SoftmaxCrossEntropyGradSliceCpu<T>(T*, const T*, const float*, const int32_t*,   \
                                                     const CrossEntropyShape&, int64_t, int64_t,   \
                                                     const CrossEntropyOptions&);                  \
  template Status SoftmaxCrossEntropyGradSlice<T>(Stream&, T*, const T*, const float*,             \
                                                  const int32_t*, const CrossEntropyShape&,        \
                                                  int64_t, int64_t, const CrossEntropyOptions&);
TF_INSTANTIATE_CROSS_ENTROPY(float)
TF_INSTANTIATE_CROSS_ENTROPY(bf16)
TF_INSTANTIATE_CROSS_ENTROPY(fp16)

}  // namespace tierflow
