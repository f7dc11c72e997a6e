// A peer-shaped AdamW: the CPU Adam step as a peer library writes it
// (DeepSpeed's cpu_adam: 8x-unrolled intrinsics at the machine's widest
// vector width, FMA, static contiguous per-thread ranges), written here from
// that description, as the yardstick `tierflow bench adam` holds the step to.
//
// Per element, with t = args.step, bc1 = 1 - beta1^t, bc2 = 1 - beta2^t
// (both 1 without bias correction):
//   Adam (L2):  g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   denom = sqrt(v) * (1 / sqrt(bc2)) + eps
//   AdamW:      p = p + (-lr * weight_decay) * p
//   p = p + (-lr / bc1) * (m / denom)
//   out = p rounded to out_dtype (when spans.out is set)
// the formulas of optim/adam.h rearranged as DeepSpeed does, with fused
// multiply-adds: results agree with AdamReferenceStep within a few fp32 ulps
// but are not bit-identical to AdamStep. A benchmark instrument, not for
// training: it has no gradient scaling and no non-finite report.
#pragma once

#include "common/cpu_isa.h"
#include "optim/adam.h"
#include "optim/optim_spans.h"
#include "tierflow/status.h"

namespace tierflow {

// The level the peer runs at on this CPU: AVX-512 when CpuSupportsIsa says
// so, else AVX2 (with FMA and F16C). Errors: Unavailable when the CPU has
// neither (the peer has no scalar form; a peer library would not run there
// either).
StatusOr<Isa> AdamPeerIsa();

// One step over spans (params, exp_avg, exp_avg_sq required; any grad and
// out dtype) with the vector code of level `isa` (AdamPeerIsa() for the
// yardstick; AVX2 on an AVX-512 CPU is there to be tested). Thread t of the
// calling oneTBB arena's T threads updates the contiguous t-th 1/T of the
// span.
// Errors: InvalidArgument for bad options, step < 1, missing spans,
// args.grad_scale != 1, the baseline level or a level this CPU lacks. The
// spans are then untouched.
Status AdamPeerStep(const AdamOptions& options, const AdamStepArgs& args, const OptimSpans& spans,
                    Isa isa);

}  // namespace tierflow
