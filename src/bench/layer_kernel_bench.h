// `bench kernels`' bandwidth cases: every kernel of the Llama and GPT-2
// blocks, the loss and the gradient's landing that is not a GEMM or
// attention, each timed at a Llama-3-8B layer's shapes (4096 tokens, C =
// 4096, F = 14336; GPT-2's F = 4C) and reported as GB/s of op_costs' bytes,
// the bytes a one-pass kernel must move (kernels/op_costs.h).
//
//   rmsnorm_fwd/bwd, layernorm_fwd/bwd   (tokens, C); backward's dweight
//                                        (and dbias) included
//   rope_fwd/bwd                         q: (tokens, 32 heads, 128)
//   swiglu_fwd/bwd                       (tokens, F)
//   gelu_fwd/bwd, bias_add, bias_bwd     (tokens, 4C)
//   embedding_fwd/bwd                    (tokens, C) from a 32000-row table
//   cross_entropy                        one head chunk (HeadChunkRows rows
//                                        of V = 128256), loss and gradient in
//                                        place, as the model runs it
//   cross_entropy_grad_slice             the sliced head's second pass
//   grad_cast                            fp32 -> bf16 over C * F elements
//
// `small` divides the shapes by 16 (the vocabulary to 2000).
#pragma once

#include <vector>

#include "bench/kernel_bench.h"
#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow {

// Appends one figure per case to `out`, each with memory_bound set.
Status RunLayerKernelBench(Device& device, Stream& stream, const KernelBenchOptions& options,
                           std::vector<KernelFigure>* out);

}  // namespace tierflow
