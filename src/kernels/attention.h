// Causal scaled-dot-product attention with grouped KV heads (MHA when
// NKV == NH, GQA when NKV divides NH, MQA when NKV == 1). Query head h reads
// KV head h / (NH / NKV). Scale 1/sqrt(HS).
//
//   out[b,t,h,:] = sum_{j<=t} softmax_j(q[b,t,h,:] . k[b,j,g,:] * scale) v[b,j,g,:]
//   lse[b,h,t]   = log sum_{j<=t} exp(q . k_j * scale)     (fp32, for backward)
//
// Forward saves only the per-row logsumexp; backward recomputes the
// probabilities from q, k and lse (flash-attention style), so no T x T matrix
// outlives a call. The CPU path materialises one (64 x T) score block of one
// head at a time; the CUDA kernels keep tiles in shared memory and registers
// (no T x T in global memory).
//
// Layout: q/dq (B, T, NH, HS), k, v, dk, dv (B, T, NKV, HS), out/dout packed
// (B, T, NH, HS). q_stride / kv_stride (elements between tokens) let q, k and
// v be slices of a fused qkv tensor (GPT-2's (B, T, 3C): q_stride = kv_stride
// = 3C, k = q + C, v = q + 2C); dq, dk, dv use the same strides, so backward
// can write straight into a fused dqkv. Backward OVERWRITES dq, dk and dv.
// Deterministic on the CPU (each task owns one (b, kv head)) and on CUDA (no
// atomics: dk/dv and dq are produced by separate kernels).
//
// Packed sequences (several samples in one row): seq_start, when given, is a
// device array (B, T) holding for each query t the index of the first token
// of its sample; t then attends to keys seq_start[b, t] <= j <= t only, so
// attention never crosses from one sample into another. REQUIRES 0 <=
// seq_start[b, t] <= t (the model checks it on the host).
//
// Errors: InvalidArgument for non-positive shapes, NKV not dividing NH, strides
// too small, or (CUDA) head_size above kAttentionMaxHeadSizeCuda.
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"

namespace tierflow {

struct AttentionShape {
  int64_t batch = 0;                   // B
  int64_t seq_len = 0;                 // T
  int64_t heads = 0;                   // NH (query heads)
  int64_t kv_heads = 0;                // NKV (divides NH)
  int64_t head_size = 0;               // HS
  int64_t q_stride = 0;                // elements between tokens of q and dq; 0 = NH * HS
  int64_t kv_stride = 0;               // elements between tokens of k, v, dk, dv; 0 = NKV * HS
  const int32_t* seq_start = nullptr;  // (B, T) first key of each query's sample; null = 0
  int64_t qs() const { return q_stride != 0 ? q_stride : heads * head_size; }
  int64_t kvs() const { return kv_stride != 0 ? kv_stride : kv_heads * head_size; }
};

// The CUDA kernels keep a head's row in registers, 8 floats per lane.
constexpr int64_t kAttentionMaxHeadSizeCuda = 256;

Status ValidateAttention(const char* op, const AttentionShape& s);

template <typename T>
Status AttentionForwardReference(T* out,      // (B, T, NH, HS)
                                 float* lse,  // (B, NH, T)
                                 const T* q,  // (B, T, NH, HS), q_stride
                                 const T* k,  // (B, T, NKV, HS), kv_stride
                                 const T* v,  // (B, T, NKV, HS), kv_stride
                                 const AttentionShape& s);
template <typename T>
Status AttentionForwardCpu(T* out, float* lse, const T* q, const T* k, const T* v,
                           const AttentionShape& s);
template <typename T>
Status AttentionForward(Stream& stream, T* out, float* lse, const T* q, const T* k, const T* v,
                        const AttentionShape& s);

template <typename T>
Status AttentionBackwardReference(T* dq,             // (B, T, NH, HS), q_stride, overwritten
                                  T* dk,             // (B, T, NKV, HS), kv_stride, overwritten
                                  T* dv,             // (B, T, NKV, HS), kv_stride, overwritten
                                  const T* dout,     // (B, T, NH, HS)
                                  const T* q,        // (B, T, NH, HS), q_stride
                                  const T* k,        // (B, T, NKV, HS), kv_stride
                                  const T* v,        // (B, T, NKV, HS), kv_stride
                                  const T* out,      // (B, T, NH, HS) from forward
                                  const float* lse,  // (B, NH, T) from forward
                                  const AttentionShape& s);
template <typename T>
Status AttentionBackwardCpu(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                            const T* out, const float* lse, const AttentionShape& s);
template <typename T>
Status AttentionBackward(Stream& stream, T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                         const T* v, const T* out, const float* lse, const AttentionShape& s);

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status AttentionForwardCuda(cudaStream_t stream, T* out, float* lse, const T* q, const T* k,
                            const T* v, const AttentionShape& s);
// Needs no scratch: each block recomputes the row dot products dout . out of
// the query tile it reads.
template <typename T>
Status AttentionBackwardCuda(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dout, const T* q,
                             const T* k, const T* v, const T* out, const float* lse,
                             const AttentionShape& s);
#endif

}  // namespace tierflow
