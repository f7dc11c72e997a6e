// Predicted time of one optimizer step, per stage, from FLOPs and the
// bandwidths in Hardware; how the stages overlap follows the engine's
// pipeline (docs/PLANNER.md, "Time").
#pragma once

#include "plan/planner.h"

namespace tierflow {

// Training FLOPs per token: 6 * N (N = parameters used in matmuls: all but
// the input embedding lookups; a tied head counts once) plus attention
// 12 * L * T * H * D (PaLM's formula, causal savings not taken), times 4/3
// with checkpointing (one more forward).
double TrainingFlopsPerToken(const ModelConfig& model, int64_t seq_len, bool checkpointing);

// Host memory bytes per parameter that taking in one step's gradients moves,
// with `transfer_bytes` per gradient across PCIe and `grad_accum`
// micro-batches. One micro-batch: none (the gradients land in the
// accumulator as they crossed PCIe, and the device computed their norm).
// More: each micro-batch reads its staging and reads and writes the fp32 sum.
double AccumulateBytesPerParam(int64_t grad_accum, double transfer_bytes);

// Fills plan.stages, plan.flops_per_step, plan.predicted_step_seconds and
// plan.serial_step_seconds. REQUIRES: the memory part of `plan` is computed
// (placement, params, tokens_per_step) and every bandwidth is positive.
void PredictStepTime(const PlanInput& input, const Hardware& hardware, Plan& plan);

}  // namespace tierflow
