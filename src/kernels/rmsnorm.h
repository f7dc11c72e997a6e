// RMSNorm over the last dimension (Llama): out = x * rstd * weight, with
// rstd = 1 / sqrt(mean(x^2) + eps).
//
// Forward saves rstd (fp32, one per row; nullptr when no backward follows).
// Backward ACCUMULATES into dinp ("+=", the residual stream's gradient, as
// LayerNorm does) and into fp32 dweight ("+="). dinp must not alias dout.
// dweight is reduced over fixed row chunks in a fixed order on both devices.
// Errors: InvalidArgument for non-positive shapes or null required pointers.
#pragma once

#include <cstdint>

#include "kernels/layernorm.h"
#include "kernels/ops_common.h"

namespace tierflow {

// Llama's default rms_norm_eps is 1e-5 or 1e-6 (see config.json); pass it.
constexpr float kRmsNormEps = 1e-5f;

template <typename T>
Status RmsNormForwardReference(T* out,           // (N, C)
                               float* rstd,      // (N) or nullptr
                               const T* inp,     // (N, C)
                               const T* weight,  // (C)
                               const NormShape& s, float eps = kRmsNormEps);
template <typename T>
Status RmsNormForwardCpu(T* out, float* rstd, const T* inp, const T* weight, const NormShape& s,
                         float eps = kRmsNormEps);
template <typename T>
Status RmsNormForward(Stream& stream, T* out, float* rstd, const T* inp, const T* weight,
                      const NormShape& s, float eps = kRmsNormEps);

template <typename T>
Status RmsNormBackwardReference(T* dinp,            // (N, C) +=
                                float* dweight,     // (C) +=
                                const T* dout,      // (N, C)
                                const T* inp,       // (N, C)
                                const T* weight,    // (C)
                                const float* rstd,  // (N) from forward
                                const NormShape& s);
template <typename T>
Status RmsNormBackwardCpu(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                          const float* rstd, const NormShape& s);
template <typename T>
Status RmsNormBackward(Stream& stream, T* dinp, float* dweight, const T* dout, const T* inp,
                       const T* weight, const float* rstd, const NormShape& s);

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status RmsNormForwardCuda(cudaStream_t stream, T* out, float* rstd, const T* inp, const T* weight,
                          const NormShape& s, float eps);
template <typename T>
Status RmsNormBackwardCuda(cudaStream_t stream, T* dinp, float* dweight, const T* dout,
                           const T* inp, const T* weight, const float* rstd, const NormShape& s);
#endif

}  // namespace tierflow
