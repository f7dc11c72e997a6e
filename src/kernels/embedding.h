// Token embedding plus optional learned positions (GPT-2's wte + wpe; Llama
// passes wpe = nullptr): out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
//
// Backward accumulates ("+=") into fp32 dwte/dwpe, deterministically on both
// devices: on the CPU each task owns a fixed column range of C and walks the
// tokens in order; on CUDA each thread owns (vocab residue class, column) and
// walks the tokens in order, so no atomics are used and repeated steps give
// identical bits.
//
// Backward can form dwte a range of vocabulary rows at a time
// (EmbeddingShape::grad_row_begin/grad_rows): dwte then holds only those rows,
// tokens outside the range add nothing, and each row's bits equal the full
// call's. dwte may be null when dwpe is not (only the positions' gradient).
//
// Errors: InvalidArgument for non-positive shapes, null pointers, a gradient
// row range outside [0, V), or (CPU paths) a token outside [0, V). CUDA cannot
// check token values without a host round trip: REQUIRES 0 <= token < V there;
// out-of-range tokens read as zero rows in forward and are dropped in backward.
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"

namespace tierflow {

struct EmbeddingShape {
  int64_t batch = 0;     // B
  int64_t seq_len = 0;   // T (<= max positions of wpe when wpe is used)
  int64_t channels = 0;  // C
  int64_t vocab = 0;     // V (rows of wte)
  // Backward only: dwte holds rows [grad_row_begin, grad_row_begin + grad_rows) of the wte gradient
  // (grad_rows = 0: all V rows); tokens outside that range add nothing. dwte may be null when dwpe
  // is not (only the positions' gradient is wanted).
  int64_t grad_row_begin = 0;
  int64_t grad_rows = 0;
  // One past the last wte row backward writes.
  int64_t grad_row_end() const { return grad_row_begin + (grad_rows != 0 ? grad_rows : vocab); }
};

Status ValidateEmbedding(const char* op, const EmbeddingShape& s);
// Backward's extra checks: the gradient row range lies in [0, V), and at least
// one of dwte / dwpe is non-null.
Status ValidateEmbeddingBackward(const char* op, const EmbeddingShape& s, const float* dwte,
                                 const float* dwpe);

template <typename T>
Status EmbeddingForwardReference(T* out,                 // (B*T, C)
                                 const int32_t* tokens,  // (B*T)
                                 const T* wte,           // (V, C)
                                 const T* wpe,           // (T, C) or nullptr
                                 const EmbeddingShape& s);
template <typename T>
Status EmbeddingForwardCpu(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                           const EmbeddingShape& s);
template <typename T>
Status EmbeddingForward(Stream& stream, T* out, const int32_t* tokens, const T* wte, const T* wpe,
                        const EmbeddingShape& s);

template <typename T>
Status EmbeddingBackwardReference(float* dwte,            // (grad rows, C) += or nullptr
                                  float* dwpe,            // (T, C) += or nullptr
                                  const T* dout,          // (B*T, C)
                                  const int32_t* tokens,  // (B*T)
                                  const EmbeddingShape& s);
template <typename T>
Status EmbeddingBackwardCpu(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                            const EmbeddingShape& s);
template <typename T>
Status EmbeddingBackward(Stream& stream, float* dwte, float* dwpe, const T* dout,
                         const int32_t* tokens, const EmbeddingShape& s);

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status EmbeddingForwardCuda(cudaStream_t stream, T* out, const int32_t* tokens, const T* wte,
                            const T* wpe, const EmbeddingShape& s);
template <typename T>
Status EmbeddingBackwardCuda(cudaStream_t stream, float* dwte, float* dwpe, const T* dout,
                             const int32_t* tokens, const EmbeddingShape& s);
#endif

}  // namespace tierflow
