// Element-wise activations of the MLP blocks.
//   GELU, tanh approximation (GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   SwiGLU (Llama): out = silu(gate) * up, silu(g) = g / (1 + exp(-g))
// Backward OVERWRITES dinp / dgate / dup (no parameters). In place is allowed
// for forward (out == inp) and for GELU backward (dinp == dout).
// Errors: InvalidArgument for n <= 0 or null pointers.
#pragma once

#include <cstdint>

#include "kernels/ops_common.h"

namespace tierflow {

template <typename T>
Status GeluForwardReference(T* out,        // (n)
                            const T* inp,  // (n)
                            int64_t n);
template <typename T>
Status GeluForwardCpu(T* out, const T* inp, int64_t n);
template <typename T>
Status GeluForward(Stream& stream, T* out, const T* inp, int64_t n);

template <typename T>
Status GeluBackwardReference(T* dinp,        // (n), overwritten
                             const T* inp,   // (n) the forward input
                             const T* dout,  // (n)
                             int64_t n);
template <typename T>
Status GeluBackwardCpu(T* dinp, const T* inp, const T* dout, int64_t n);
template <typename T>
Status GeluBackward(Stream& stream, T* dinp, const T* inp, const T* dout, int64_t n);

template <typename T>
Status SwiGluForwardReference(T* out,         // (n) e.g. (B*T, F)
                              const T* gate,  // (n)
                              const T* up,    // (n)
                              int64_t n);
template <typename T>
Status SwiGluForwardCpu(T* out, const T* gate, const T* up, int64_t n);
template <typename T>
Status SwiGluForward(Stream& stream, T* out, const T* gate, const T* up, int64_t n);

template <typename T>
Status SwiGluBackwardReference(T* dgate,       // (n), overwritten
                               T* dup,         // (n), overwritten
                               const T* dout,  // (n)
                               const T* gate,  // (n)
                               const T* up,    // (n)
                               int64_t n);
template <typename T>
Status SwiGluBackwardCpu(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);
template <typename T>
Status SwiGluBackward(Stream& stream, T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                      int64_t n);

#ifdef TIERFLOW_HAVE_CUDA
template <typename T>
Status GeluForwardCuda(cudaStream_t stream, T* out, const T* inp, int64_t n);
template <typename T>
Status GeluBackwardCuda(cudaStream_t stream, T* dinp, const T* inp, const T* dout, int64_t n);
template <typename T>
Status SwiGluForwardCuda(cudaStream_t stream, T* out, const T* gate, const T* up, int64_t n);
template <typename T>
Status SwiGluBackwardCuda(cudaStream_t stream, T* dgate, T* dup, const T* dout, const T* gate,
                          const T* up, int64_t n);
#endif

}  // namespace tierflow
