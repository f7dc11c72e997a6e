// Causal GQA attention on tensor cores (mma.sync m16n8k16: bf16 or fp16 in,
// fp32 accumulate), flash-attention-2 style, for the head sizes and layouts
// the models use. attention.cu calls these where AttentionMmaApplies holds
// and its scalar kernels elsewhere (fp32, other head sizes, unaligned views).
// Only src/kernels/cuda sees this header.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>

#include "kernels/attention.h"

namespace tierflow {

// True when the tensor-core kernels take this call: T is bf16 or fp16, the
// head size is 32, 64, 96 or 128, every pointer is 16-byte aligned and the
// token strides are multiples of 8 elements (rows are staged 16 bytes at a
// time), and the GPU is sm_80 or newer (mma.sync on 16-bit floats).
bool AttentionMmaApplies(const AttentionShape& s, std::initializer_list<const void*> pointers);

// Same contracts as AttentionForwardCuda / AttentionBackwardCuda (attention.h);
// REQUIRES AttentionMmaApplies. Backward writes dq in one kernel (a block of
// 64 query rows over every key) and dk/dv in another (a block of 64 keys
// over every query of the group's heads): each output element is written by
// one thread, deterministic without atomics. No T x T matrix exists.
template <typename T>
Status AttentionForwardMma(cudaStream_t stream, T* out, float* lse, const T* q, const T* k,
                           const T* v, const AttentionShape& s);
template <typename T>
Status AttentionBackwardMma(cudaStream_t stream, T* dq, T* dk, T* dv, const T* dout, const T* q,
                            const T* k, const T* v, const T* out, const float* lse,
                            const AttentionShape& s);

}  // namespace tierflow
