// Rotary position embedding (RoPE), Hugging Face Llama's rotate-half form:
// for a head vector x of size HS, half = HS/2, i < half,
//   inv_freq[i] from RopeFreq (kernels/rope_freq.h: theta^(-2i/HS), optionally
//   scaled by HF's "linear" or "llama3" rope_scaling), a = t * inv_freq[i] (fp32)
//   out[i]        = x[i] * cos(a) - x[i + half] * sin(a)
//   out[i + half] = x[i + half] * cos(a) + x[i] * sin(a)
// Apply it to q (heads = NH) and to k (heads = NKV) separately. Backward is the
// rotation by -a (the map is orthogonal). Positions are 0..T-1 per sequence,
// or, for packed sequences, positions[b, t] (a device array (B, T); REQUIRES
// 0 <= positions[b, t] < T, which the model checks on the host).
//
// In place is allowed (out == inp, dinp == dout). token_stride lets q or k be
// a slice of a fused (B, T, (NH + 2*NKV) * HS) qkv tensor; dinp is written
// with the same stride. Errors: InvalidArgument for non-positive shapes, an
// odd head size or a token_stride smaller than heads * head_size.
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"
#include "kernels/rope_freq.h"

namespace tierflow {

struct RopeShape {
  int64_t batch = 0;                   // B
  int64_t seq_len = 0;                 // T
  int64_t heads = 0;                   // NH for q, NKV for k
  int64_t head_size = 0;               // HS (even)
  int64_t token_stride = 0;            // elements between tokens; 0 = heads * head_size
  const int32_t* positions = nullptr;  // (B, T) each token's position; null = t
  int64_t stride() const { return token_stride != 0 ? token_stride : heads * head_size; }
};

// Also checks the frequencies: theta > 0, factor > 0, llama3's low < high.
Status ValidateRope(const char* op, const RopeShape& s, const RopeFreq& freq);

template <typename T>
Status RopeForwardReference(T* out,        // (B, T, heads, HS) with token_stride
                            const T* inp,  // (B, T, heads, HS) with token_stride
                            const RopeShape& s, const RopeFreq& freq = {});
template <typename T>
Status RopeForwardCpu(T* out, const T* inp, const RopeShape& s, const RopeFreq& freq = {});
template <typename T>
Status RopeForward(Stream& stream, T* out, const T* inp, const RopeShape& s,
                   const RopeFreq& freq = {});

template <typename T>
Status RopeBackwardReference(T* dinp,        // (B, T, heads, HS), overwritten
                             const T* dout,  // (B, T, heads, HS)
                             const RopeShape& s, const RopeFreq& freq = {});
template <typename T>
Status RopeBackwardCpu(T* dinp, const T* dout, const RopeShape& s, const RopeFreq& freq = {});
template <typename T>
Status RopeBackward(Stream& stream, T* dinp, const T* dout, const RopeShape& s,
                    const RopeFreq& freq = {});

#ifdef TIERFLOW_HAVE_CUDA
// sign = +1 forward, -1 backward.
template <typename T>
Status RopeCuda(cudaStream_t stream, T* out, const T* inp, const RopeShape& s, const RopeFreq& freq,
                float sign);
#endif

}  // namespace tierflow
