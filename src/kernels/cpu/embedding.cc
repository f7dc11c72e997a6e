// Embedding lookup with learned positions: reference, fast CPU path, dispatch.
#include "kernels/embedding.h"

#include "kernels/op_costs.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "common/half.h"
#include "kernels/cpu/cpu_rows.h"

namespace tierflow {
namespace {

using ops_internal::kRowChunk;

Status CheckTokens(const char* op, const int32_t* tokens, const EmbeddingShape& s) {
  const int64_t n = s.batch * s.seq_len;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= s.vocab) {
      return InvalidArgumentError(std::string(op) + ": token " + std::to_string(tokens[i]) +
                                  " at position " + std::to_string(i) + " is outside [0, " +
                                  std::to_string(s.vocab) + "): check the tokenizer's vocab");
    }
  }
  return Status::Ok();
}

using NamedPointers = std::initializer_list<std::pair<const char*, const void*>>;

// A forward call's checks, in order: the shape, the named pointers, the tokens.
Status CheckForwardCall(const char* op, const EmbeddingShape& s, const int32_t* tokens,
                        NamedPointers ptrs) {
  TF_RETURN_IF_ERROR(ValidateEmbedding(op, s));
  TF_RETURN_IF_ERROR(ops_internal::CheckAllNotNull(op, ptrs));
  return CheckTokens(op, tokens, s);
}

// A backward call's: the shape and gradient rows, the named pointers, the tokens.
Status CheckBackwardCall(const char* op, const EmbeddingShape& s, const float* dwte,
                         const float* dwpe, const int32_t* tokens, NamedPointers ptrs) {
  TF_RETURN_IF_ERROR(ValidateEmbeddingBackward(op, s, dwte, dwpe));
  TF_RETURN_IF_ERROR(ops_internal::CheckAllNotNull(op, ptrs));
  return CheckTokens(op, tokens, s);
}

// Columns per task in the backward pass: each task owns whole columns of
// dwte/dwpe, so accumulation needs no atomics and its order is fixed.
constexpr int64_t kColumnChunk = 64;

}  // namespace

Status ValidateEmbedding(const char* op, const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(ops_internal::CheckAllPositive(
      op,
      {{"batch", s.batch}, {"seq_len", s.seq_len}, {"channels", s.channels}, {"vocab", s.vocab}}));
  return Status::Ok();
}

Status ValidateEmbeddingBackward(const char* op, const EmbeddingShape& s, const float* dwte,
                                 const float* dwpe) {
  TF_RETURN_IF_ERROR(ValidateEmbedding(op, s));
  if (s.grad_row_begin < 0) {
    return InvalidArgumentError(std::string(op) + ": grad_row_begin " +
                                std::to_string(s.grad_row_begin) + " < 0");
  }
  if (s.grad_rows < 0) {
    return InvalidArgumentError(std::string(op) + ": grad_rows " + std::to_string(s.grad_rows) +
                                " < 0");
  }
  if (s.grad_row_end() > s.vocab) {
    return InvalidArgumentError(
        std::string(op) + ": gradient rows [" + std::to_string(s.grad_row_begin) + ", " +
        std::to_string(s.grad_row_end()) + ") (grad_row_begin " + std::to_string(s.grad_row_begin) +
        ", grad_rows " + std::to_string(s.grad_rows) + ") end past vocab " +
        std::to_string(s.vocab));
  }
  if (dwte == nullptr && dwpe == nullptr) {
    return InvalidArgumentError(std::string(op) + ": dwte and dwpe are both null");
  }
  return Status::Ok();
}

// ---- reference ----

template <typename T>
Status EmbeddingForwardReference(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                 const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(CheckForwardCall("EmbeddingForwardReference", s, tokens, {}));
  const int64_t C = s.channels;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq_len; ++t) {
      const int64_t row = b * s.seq_len + t;
      const T* e = wte + tokens[row] * C;
      for (int64_t c = 0; c < C; ++c) {
        float v = ToFloat(e[c]);
        if (wpe != nullptr) v += ToFloat(wpe[t * C + c]);
        out[row * C + c] = FromFloat<T>(v);
      }
    }
  }
  return Status::Ok();
}

template <typename T>
Status EmbeddingBackwardReference(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                                  const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(CheckBackwardCall("EmbeddingBackwardReference", s, dwte, dwpe, tokens, {}));
  const int64_t C = s.channels, begin = s.grad_row_begin, end = s.grad_row_end();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq_len; ++t) {
      const int64_t row = b * s.seq_len + t;
      const int64_t tok = tokens[row];
      const bool in_range = dwte != nullptr && tok >= begin && tok < end;
      for (int64_t c = 0; c < C; ++c) {
        const float g = ToFloat(dout[row * C + c]);
        if (in_range) dwte[(tok - begin) * C + c] += g;
        if (dwpe != nullptr) dwpe[t * C + c] += g;
      }
    }
  }
  return Status::Ok();
}

// ---- fast CPU path ----

template <typename T>
Status EmbeddingForwardCpu(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                           const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(
      CheckForwardCall("EmbeddingForwardCpu", s, tokens, {{"out", out}, {"wte", wte}}));
  const int64_t C = s.channels, rows = s.batch * s.seq_len;
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, rows, kRowChunk),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t row = r.begin(); row < r.end(); ++row) {
          const T* e = wte + tokens[row] * C;
          T* o = out + row * C;
          if (wpe == nullptr) {
            std::copy(e, e + C, o);
            continue;
          }
          const T* p = wpe + (row % s.seq_len) * C;
          for (int64_t c = 0; c < C; ++c) o[c] = FromFloat<T>(ToFloat(e[c]) + ToFloat(p[c]));
        }
      },
      tbb::simple_partitioner());
  return Status::Ok();
}

template <typename T>
Status EmbeddingBackwardCpu(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                            const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(
      CheckBackwardCall("EmbeddingBackwardCpu", s, dwte, dwpe, tokens, {{"dout", dout}}));
  const int64_t C = s.channels, rows = s.batch * s.seq_len;
  const int64_t begin = s.grad_row_begin, end = s.grad_row_end();
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, C, kColumnChunk),
      [&](const tbb::blocked_range<int64_t>& r) {
        const int64_t c0 = r.begin(), c1 = r.end();
        // Tokens in order; those outside the gradient's rows add nothing.
        for (int64_t row = 0; row < rows && dwte != nullptr; ++row) {
          const int64_t tok = tokens[row];
          if (tok < begin || tok >= end) continue;
          const T* g = dout + row * C;
          float* w = dwte + (tok - begin) * C;
          for (int64_t c = c0; c < c1; ++c) w[c] += ToFloat(g[c]);
        }
        if (dwpe == nullptr) return;
        // Positions: sum over the batch first, in batch order, then add once.
        for (int64_t t = 0; t < s.seq_len; ++t) {
          float* p = dwpe + t * C;
          for (int64_t c = c0; c < c1; ++c) {
            float acc = 0.0f;
            for (int64_t b = 0; b < s.batch; ++b) acc += ToFloat(dout[(b * s.seq_len + t) * C + c]);
            p[c] += acc;
          }
        }
      },
      tbb::simple_partitioner());
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status EmbeddingForward(Stream& stream, T* out, const int32_t* tokens, const T* wte, const T* wpe,
                        const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(ValidateEmbedding("EmbeddingForward", s));
  return stream.Launch(TF_OP_KERNEL(
      EmbeddingForward,
      op_costs::EmbeddingForward(s.batch * s.seq_len, s.channels, sizeof(T), wpe != nullptr), out,
      tokens, wte, wpe, s));
}

template <typename T>
Status EmbeddingBackward(Stream& stream, float* dwte, float* dwpe, const T* dout,
                         const int32_t* tokens, const EmbeddingShape& s) {
  TF_RETURN_IF_ERROR(ValidateEmbeddingBackward("EmbeddingBackward", s, dwte, dwpe));
  return stream.Launch(TF_OP_KERNEL(
      EmbeddingBackward,
      op_costs::EmbeddingBackward(s.batch * s.seq_len, s.channels, sizeof(T), dwpe != nullptr),
      dwte, dwpe, dout, tokens, s));
}

#define TF_INSTANTIATE_EMBEDDING(T)                                                       \
  template Status EmbeddingForwardReference<T>(T*, const int32_t*, const T*, const T*,    \
                                               const EmbeddingShape&);                    \
  template Status EmbeddingForwardCpu<T>(T*, const int32_t*, const T*, const T*,          \
                                         const EmbeddingShape&);                          \
  template Status EmbeddingForward<T>(Stream&, T*, const int32_t*, const T*, const T*,    \
                                      const EmbeddingShape&);                             \
  template Status EmbeddingBackwardReference<T>(float*, float*, const T*, const int32_t*, \
                                                const EmbeddingShape&);                   \
  template Status EmbeddingBackwardCpu<T>(float*, float*, const T*, const int32_t*,       \
                                          const EmbeddingShape&);                         \
  template Status EmbeddingBackward<T>(Stream&, float*, float*, const T*, const int32_t*, \
                                       const EmbeddingShape&);
TF_INSTANTIATE_EMBEDDING(float)
TF_INSTANTIATE_EMBEDDING(bf16)
TF_INSTANTIATE_EMBEDDING(fp16)

}  // namespace tierflow
