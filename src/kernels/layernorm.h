// LayerNorm over the last dimension (GPT-2): out = (x - mean) * rstd * weight + bias.
//
// Forward saves mean and rstd (fp32, one per row) for backward; either may be
// nullptr when no backward follows. Backward ACCUMULATES into dinp ("+=", as
// llm.c does, so the residual stream's gradient stays one buffer the norm adds
// into; zero it or copy dout of the residual first) and into fp32 dweight and
// dbias ("+=", the parameter-gradient contract). dinp must not alias dout.
//
// The fast CPU path reduces dweight/dbias over fixed 64-row chunks in chunk
// order, and CUDA over a fixed tree, so both are deterministic.
// Errors: InvalidArgument for non-positive shapes or null required pointers.
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"

namespace tierflow {

struct NormShape {
  int64_t rows = 0;      // N = B*T
  int64_t channels = 0;  // C
};

Status ValidateNorm(const char* op, const NormShape& s);

// Default epsilon of GPT-2's LayerNorm.
constexpr float kLayerNormEps = 1e-5f;

template <typename T>
Status LayerNormForwardReference(T* out,           // (N, C)
                                 float* mean,      // (N) or nullptr
                                 float* rstd,      // (N) or nullptr
                                 const T* inp,     // (N, C)
                                 const T* weight,  // (C)
                                 const T* bias,    // (C)
                                 const NormShape& s, float eps = kLayerNormEps);
template <typename T>
Status LayerNormForwardCpu(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                           const T* bias, const NormShape& s, float eps = kLayerNormEps);
template <typename T>
Status LayerNormForward(Stream& stream, T* out, float* mean, float* rstd, const T* inp,
                        const T* weight, const T* bias, const NormShape& s,
                        float eps = kLayerNormEps);

template <typename T>
Status LayerNormBackwardReference(T* dinp,            // (N, C) +=
                                  float* dweight,     // (C) +=
                                  float* dbias,       // (C) +=
                                  const T* dout,      // (N, C)
                                  const T* inp,       // (N, C)
                                  const T* weight,    // (C)
                                  const float* mean,  // (N) from forward
                                  const float* rstd,  // (N) from forward
                                  const NormShape& s);
template <typename T>
Status LayerNormBackwardCpu(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                            const T* weight, const float* mean, const float* rstd,
                            const NormShape& s);
template <typename T>
Status LayerNormBackward(Stream& stream, T* dinp, float* dweight, float* dbias, const T* dout,
                         const T* inp, const T* weight, const float* mean, const float* rstd,
                         const NormShape& s);

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status LayerNormForwardCuda(cudaStream_t stream, T* out, float* mean, float* rstd, const T* inp,
                            const T* weight, const T* bias, const NormShape& s, float eps);
template <typename T>
Status LayerNormBackwardCuda(cudaStream_t stream, T* dinp, float* dweight, float* dbias,
                             const T* dout, const T* inp, const T* weight, const float* mean,
                             const float* rstd, const NormShape& s);
#endif

}  // namespace tierflow
