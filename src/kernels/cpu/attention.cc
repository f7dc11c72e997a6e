// Causal GQA attention: reference (double, one query row at a time), fast CPU
// path (Eigen GEMMs over 64-query blocks of one head, oneTBB over heads), and
// device dispatch.
#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/op_costs.h"

namespace tierflow {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Query rows per score block: bounds the scratch at kQueryBlock x T floats.
constexpr int64_t kQueryBlock = 64;

// Widens head `head` of a (B, T, heads, HS) tensor with token stride `stride`
// at batch b into a dense (T, HS) fp32 matrix.
template <typename T>
void LoadHead(const T* base, int64_t b, int64_t head, int64_t stride, const AttentionShape& s,
              RowMatrix* m) {
  m->resize(s.seq_len, s.head_size);
  for (int64_t t = 0; t < s.seq_len; ++t) {
    ops_internal::WidenRow(base + (b * s.seq_len + t) * stride + head * s.head_size, s.head_size,
                           m->row(t).data());
  }
}

template <typename T>
void StoreHead(const RowMatrix& m, int64_t b, int64_t head, int64_t stride, const AttentionShape& s,
               T* base) {
  for (int64_t t = 0; t < s.seq_len; ++t) {
    ops_internal::NarrowRow(m.row(t).data(), s.head_size,
                            base + (b * s.seq_len + t) * stride + head * s.head_size);
  }
}

}  // namespace

Status ValidateAttention(const char* op, const AttentionShape& s) {
  TF_RETURN_IF_ERROR(ops_internal::CheckAllPositive(op, {{"batch", s.batch},
                                                         {"seq_len", s.seq_len},
                                                         {"heads", s.heads},
                                                         {"kv_heads", s.kv_heads},
                                                         {"head_size", s.head_size}}));
  if (s.heads % s.kv_heads != 0) {
    return InvalidArgumentError(std::string(op) + ": kv_heads " + std::to_string(s.kv_heads) +
                                " does not divide heads " + std::to_string(s.heads));
  }
  if (s.q_stride != 0 && s.q_stride < s.heads * s.head_size) {
    return InvalidArgumentError(std::string(op) + ": q_stride " + std::to_string(s.q_stride) +
                                " < heads * head_size");
  }
  if (s.kv_stride != 0 && s.kv_stride < s.kv_heads * s.head_size) {
    return InvalidArgumentError(std::string(op) + ": kv_stride " + std::to_string(s.kv_stride) +
                                " < kv_heads * head_size");
  }
  return Status::Ok();
}

// ---- reference ----

template <typename T>
Status AttentionForwardReference(T* out, float* lse, const T* q, const T* k, const T* v,
                                 const AttentionShape& s) {
  TF_RETURN_IF_ERROR(ValidateAttention("AttentionForwardReference", s));
  const int64_t HS = s.head_size, group = s.heads / s.kv_heads;
  const int64_t qs = s.qs(), kvs = s.kvs();
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> scores(s.seq_len), acc(HS);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < s.seq_len; ++t) {
        const T* qr = q + (b * s.seq_len + t) * qs + h * HS;
        const int64_t first = s.seq_start != nullptr ? s.seq_start[b * s.seq_len + t] : 0;
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = first; j <= t; ++j) {
          const T* kr = k + (b * s.seq_len + j) * kvs + g * HS;
          double dot = 0.0;
          for (int64_t d = 0; d < HS; ++d)
            dot += static_cast<double>(ToFloat(qr[d])) * ToFloat(kr[d]);
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = first; j <= t; ++j) {
          const double p = std::exp(scores[j] - max_score);
          sum += p;
          const T* vr = v + (b * s.seq_len + j) * kvs + g * HS;
          for (int64_t d = 0; d < HS; ++d) acc[d] += p * ToFloat(vr[d]);
        }
        T* o = out + ((b * s.seq_len + t) * s.heads + h) * HS;
        for (int64_t d = 0; d < HS; ++d) o[d] = FromFloat<T>(static_cast<float>(acc[d] / sum));
        lse[(b * s.heads + h) * s.seq_len + t] = static_cast<float>(max_score + std::log(sum));
      }
    }
  }
  return Status::Ok();
}

template <typename T>
Status AttentionBackwardReference(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                  const T* v, const T* out, const float* lse,
                                  const AttentionShape& s) {
  TF_RETURN_IF_ERROR(ValidateAttention("AttentionBackwardReference", s));
  const int64_t HS = s.head_size, group = s.heads / s.kv_heads, T_ = s.seq_len;
  const int64_t qs = s.qs(), kvs = s.kvs();
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  auto Q = [&](int64_t b, int64_t t, int64_t h, int64_t d) -> double {
    return ToFloat(q[(b * T_ + t) * qs + h * HS + d]);
  };
  auto K = [&](int64_t b, int64_t t, int64_t g, int64_t d) -> double {
    return ToFloat(k[(b * T_ + t) * kvs + g * HS + d]);
  };
  auto V = [&](int64_t b, int64_t t, int64_t g, int64_t d) -> double {
    return ToFloat(v[(b * T_ + t) * kvs + g * HS + d]);
  };
  auto PACKED = [&](const T* x, int64_t b, int64_t t, int64_t h, int64_t d) -> double {
    return ToFloat(x[((b * T_ + t) * s.heads + h) * HS + d]);
  };
  std::vector<double> dq_acc(s.batch * T_ * s.heads * HS, 0.0);
  std::vector<double> dk_acc(s.batch * T_ * s.kv_heads * HS, 0.0), dv_acc(dk_acc.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < T_; ++i) {
        double D = 0.0;
        for (int64_t d = 0; d < HS; ++d) D += PACKED(dout, b, i, h, d) * PACKED(out, b, i, h, d);
        const double row_lse = lse[(b * s.heads + h) * T_ + i];
        const int64_t first = s.seq_start != nullptr ? s.seq_start[b * T_ + i] : 0;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0.0, dp = 0.0;
          for (int64_t d = 0; d < HS; ++d) {
            dot += Q(b, i, h, d) * K(b, j, g, d);
            dp += PACKED(dout, b, i, h, d) * V(b, j, g, d);
          }
          const double p = std::exp(dot * scale - row_lse);
          const double ds = p * (dp - D);
          for (int64_t d = 0; d < HS; ++d) {
            dq_acc[((b * T_ + i) * s.heads + h) * HS + d] += ds * scale * K(b, j, g, d);
            dk_acc[((b * T_ + j) * s.kv_heads + g) * HS + d] += ds * scale * Q(b, i, h, d);
            dv_acc[((b * T_ + j) * s.kv_heads + g) * HS + d] += p * PACKED(dout, b, i, h, d);
          }
        }
      }
    }
  }
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t h = 0; h < s.heads; ++h) {
        for (int64_t d = 0; d < HS; ++d) {
          dq[(b * T_ + t) * qs + h * HS + d] =
              FromFloat<T>(static_cast<float>(dq_acc[((b * T_ + t) * s.heads + h) * HS + d]));
        }
      }
      for (int64_t g = 0; g < s.kv_heads; ++g) {
        for (int64_t d = 0; d < HS; ++d) {
          const int64_t a = ((b * T_ + t) * s.kv_heads + g) * HS + d;
          dk[(b * T_ + t) * kvs + g * HS + d] = FromFloat<T>(static_cast<float>(dk_acc[a]));
          dv[(b * T_ + t) * kvs + g * HS + d] = FromFloat<T>(static_cast<float>(dv_acc[a]));
        }
      }
    }
  }
  return Status::Ok();
}

// ---- fast CPU path ----

template <typename T>
Status AttentionForwardCpu(T* out, float* lse, const T* q, const T* k, const T* v,
                           const AttentionShape& s) {
  const char* op = "AttentionForwardCpu";
  TF_RETURN_IF_ERROR(ValidateAttention(op, s));
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"out", out},
                           {"lse", lse},
                           {"q", q},
                           {"k", k},
                           {"v", v}}) {
    TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, name, ptr));
  }
  const int64_t T_ = s.seq_len, group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_size));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  ops_internal::ForEachChunk(s.batch * s.heads, 1, [&](int64_t bh, int64_t, int64_t) {
    const int64_t b = bh / s.heads, h = bh % s.heads, g = h / group;
    RowMatrix Qh, Kg, Vg, O(T_, s.head_size), S;
    LoadHead(q, b, h, s.qs(), s, &Qh);
    LoadHead(k, b, g, s.kvs(), s, &Kg);
    LoadHead(v, b, g, s.kvs(), s, &Vg);
    for (int64_t i0 = 0; i0 < T_; i0 += kQueryBlock) {
      const int64_t rows = std::min(kQueryBlock, T_ - i0), keys = i0 + rows;
      S.noalias() = (Qh.middleRows(i0, rows) * Kg.topRows(keys).transpose()) * scale;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = i0 + r + 1; j < keys; ++j) S(r, j) = neg_inf;
        if (s.seq_start != nullptr) {
          const int64_t first = s.seq_start[b * T_ + i0 + r];
          for (int64_t j = 0; j < first; ++j) S(r, j) = neg_inf;
        }
        const float m = S.row(r).maxCoeff();
        S.row(r) = (S.row(r).array() - m).exp().matrix();
        const float l = S.row(r).sum();
        S.row(r) /= l;
        lse[(b * s.heads + h) * T_ + i0 + r] = m + std::log(l);
      }
      O.middleRows(i0, rows).noalias() = S * Vg.topRows(keys);
    }
    StoreHead(O, b, h, s.heads * s.head_size, s, out);
  });
  return Status::Ok();
}

template <typename T>
Status AttentionBackwardCpu(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                            const T* out, const float* lse, const AttentionShape& s) {
  const char* op = "AttentionBackwardCpu";
  TF_RETURN_IF_ERROR(ValidateAttention(op, s));
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"dq", dq},
                           {"dk", dk},
                           {"dv", dv},
                           {"dout", dout},
                           {"q", q},
                           {"k", k},
                           {"v", v},
                           {"out", out},
                           {"lse", lse}}) {
    TF_RETURN_IF_ERROR(ops_internal::CheckNotNull(op, name, ptr));
  }
  const int64_t T_ = s.seq_len, group = s.heads / s.kv_heads, packed = s.heads * s.head_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_size));
  // One task per (b, kv head): it owns dk and dv of that head and walks its
  // query heads in order, so the accumulation order is fixed.
  ops_internal::ForEachChunk(s.batch * s.kv_heads, 1, [&](int64_t bg, int64_t, int64_t) {
    const int64_t b = bg / s.kv_heads, g = bg % s.kv_heads;
    RowMatrix Kg, Vg, Qh, dOh, Oh, dQ(T_, s.head_size), P, dP;
    RowMatrix dK = RowMatrix::Zero(T_, s.head_size), dV = RowMatrix::Zero(T_, s.head_size);
    Eigen::VectorXf D(T_);
    LoadHead(k, b, g, s.kvs(), s, &Kg);
    LoadHead(v, b, g, s.kvs(), s, &Vg);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      LoadHead(q, b, h, s.qs(), s, &Qh);
      LoadHead(dout, b, h, packed, s, &dOh);
      LoadHead(out, b, h, packed, s, &Oh);
      D = (dOh.array() * Oh.array()).rowwise().sum().matrix();
      const float* row_lse = lse + (b * s.heads + h) * T_;
      for (int64_t i0 = 0; i0 < T_; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T_ - i0), keys = i0 + rows;
        P.noalias() = (Qh.middleRows(i0, rows) * Kg.topRows(keys).transpose()) * scale;
        for (int64_t r = 0; r < rows; ++r) {
          P.row(r) = (P.row(r).array() - row_lse[i0 + r]).exp().matrix();
          for (int64_t j = i0 + r + 1; j < keys; ++j) P(r, j) = 0.0f;
          if (s.seq_start != nullptr) {
            const int64_t first = s.seq_start[b * T_ + i0 + r];
            for (int64_t j = 0; j < first; ++j) P(r, j) = 0.0f;
          }
        }
        dV.topRows(keys).noalias() += P.transpose() * dOh.middleRows(i0, rows);
        dP.noalias() = dOh.middleRows(i0, rows) * Vg.topRows(keys).transpose();
        // dS = P * (dP - D), stored in dP.
        dP = (P.array() * (dP.array().colwise() - D.segment(i0, rows).array())).matrix();
        dQ.middleRows(i0, rows).noalias() = (dP * Kg.topRows(keys)) * scale;
        dK.topRows(keys).noalias() += (dP.transpose() * Qh.middleRows(i0, rows)) * scale;
      }
      StoreHead(dQ, b, h, s.qs(), s, dq);
    }
    StoreHead(dK, b, g, s.kvs(), s, dk);
    StoreHead(dV, b, g, s.kvs(), s, dv);
  });
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status AttentionForward(Stream& stream, T* out, float* lse, const T* q, const T* k, const T* v,
                        const AttentionShape& s) {
  TF_RETURN_IF_ERROR(ValidateAttention("AttentionForward", s));
  return stream.Launch(TF_OP_KERNEL(
      AttentionForward,
      op_costs::AttentionForward(s.batch, s.seq_len, s.heads, s.kv_heads, s.head_size, sizeof(T)),
      out, lse, q, k, v, s));
}

template <typename T>
Status AttentionBackward(Stream& stream, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                         const T* v, const T* out, const float* lse, const AttentionShape& s) {
  TF_RETURN_IF_ERROR(ValidateAttention("AttentionBackward", s));
  return stream.Launch(TF_OP_KERNEL(
      AttentionBackward,
      op_costs::AttentionBackward(s.batch, s.seq_len, s.heads, s.kv_heads, s.head_size, sizeof(T)),
      dq, dk, dv, dout, q, k, v, out, lse, s));
}

#define TF_INSTANTIATE_ATTENTION(T)                                                           \
  template Status AttentionForwardReference<T>(T*, float*, const T*, const T*, const T*,      \
                                               const AttentionShape&);                        \
  template Status AttentionForwardCpu<T>(T*, float*, const T*, const T*, const T*,            \
                                         const AttentionShape&);                              \
  template Status AttentionForward<T>(Stream&, T*, float*, const T*, const T*, const T*,      \
                                      const AttentionShape&);                                 \
  template Status AttentionBackwardReference<T>(T*, T*, T*, const T*, const T*, const T*,     \
                                                const T*, const T*, const float*,             \
                                                const AttentionShape&);                       \
  template Status AttentionBackwardCpu<T>(T*, T*, T*, const T*, const T*, const T*, const T*, \
                                          const T*, const float*, const AttentionShape&);     \
  template Status AttentionBackward<T>(Stream&, T*, T*, T*, const T*, const T*, const T*,     \
                                       const T*, const T*, const float*, const AttentionShape&);
TF_INSTANTIATE_ATTENTION(float)
TF_INSTANTIATE_ATTENTION(bf16)
TF_INSTANTIATE_ATTENTION(fp16)

}  // namespace tierflow
