// The optimizer's hot loops, compiled once per instruction-set level (see
// common/cpu_isa.h): adam_kernel.cc, lion_kernel.cc, sgd_kernel.cc and
// grad_kernels.cc are built three times, each time in its own namespace
// (tierflow::isa_baseline, isa_avx2, isa_avx512), and each defines its table
// of functions declared here. The entry points (adam.cc, ...) validate, compute the
// per-step constants, pick the table of the level and call it per range of
// chunks (optim/chunk_loop.h).
//
// Every function handles any [begin, end) of its spans, elementwise, with the
// operation sequence of the header that documents it (adam.h, lion.h, sgd.h,
// grad_accumulate.h): one IEEE operation at a time, no FMA, the last few
// elements through the same vector code, so results are the same bits at
// every level, alignment and thread count. The reductions (grad_kernels.cc)
// add in a fixed order that does not depend on the vector width.
//
// Internal header: plain declarations only, so the per-level objects can
// include it without pulling in any inline function.
#pragma once

#include <cstddef>

#include "common/grad_stats_kernels.h"
#include "common/isa_tables.h"

namespace tierflow::optim_internal {

// Table indices: dtypes as static_cast<int>(DType) (f32, bf16, f16); the
// copy out as that + 1, with 0 for none.
inline constexpr int kNumDtypes = 3;
inline constexpr int kNumOuts = 4;

// The spans of one step (optim/optim_spans.h), pointers only.
struct StepStreams {
  float* params;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grads;
  void* out;
  // The backup of the old state (optim_spans.h); all null when none.
  float* backup_params;
  float* backup_exp_avg;
  float* backup_exp_avg_sq;
};

// Per-step constants, each already rounded to fp32 (see adam.cc).
struct AdamConstants {
  float grad_scale;
  float weight_decay;  // the L2 term, used when l2
  bool l2;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float decay;      // 1 - lr * weight_decay when decoupled, else 1
  float step_size;  // lr / (1 - beta1^t)
};

struct LionConstants {
  float grad_scale;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float decay;  // 1 - lr * weight_decay
  float lr;
};

struct SgdConstants {
  float grad_scale;
  float weight_decay;  // L2 term, used when != 0
  float lr;
  bool use_momentum;
  bool first_step;  // the momentum buffer is set to the gradient
  bool nesterov;
  float momentum;
  float one_minus_dampening;
};

// A step over [begin, end) of the spans; returns true when some scaled
// gradient there was Inf or NaN.
using AdamFn = bool (*)(const AdamConstants& c, const StepStreams& s, size_t begin, size_t end);
using LionFn = bool (*)(const LionConstants& c, const StepStreams& s, size_t begin, size_t end);
using SgdFn = bool (*)(const SgdConstants& c, const StepStreams& s, size_t begin, size_t end);

struct AdamKernels {
  AdamFn step[kNumDtypes][kNumOuts];  // [grad dtype][out]
};
struct LionKernels {
  LionFn step[kNumDtypes][kNumOuts];
};
struct SgdKernels {
  SgdFn step[kNumDtypes][kNumOuts];
};

// Gradient statistics of one chunk, summed in blocks as GradStats sums them
// (common/grad_stats_kernels.h).
using grad_stats_internal::ChunkStats;

// acc[begin, end) = float(grads) (first) or acc + float(grads).
using AccumulateFn = void (*)(float* acc, const void* grads, size_t begin, size_t end, bool first);
// The accumulation and then the statistics of acc[begin, end), in one pass.
using AccumulateStatsFn = ChunkStats (*)(float* acc, const void* grads, size_t begin, size_t end,
                                         bool first);

struct GradKernels {
  AccumulateFn accumulate[kNumDtypes];
  AccumulateStatsFn accumulate_stats[kNumDtypes];
};

}  // namespace tierflow::optim_internal

TF_DECLARE_ISA_TABLES(optim_internal::AdamKernels, kAdamKernels)
TF_DECLARE_ISA_TABLES(optim_internal::LionKernels, kLionKernels)
TF_DECLARE_ISA_TABLES(optim_internal::SgdKernels, kSgdKernels)
TF_DECLARE_ISA_TABLES(optim_internal::GradKernels, kGradKernels)
