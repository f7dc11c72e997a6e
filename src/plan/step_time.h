// Predicted time of one optimizer step, per stage, from FLOPs and the
// bandwidths in Hardware; how the stages overlap follows the engine's
// pipeline (docs/PLANNER.md, "Time").
#pragma once

#include <string>

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
// With several ranks the stages are one rank's (each computes its own
// micro-batches and moves the whole gradient and weights over its PCIe
// link, shared by gpus_per_pcie_link GPUs) and one node's (the CPU
// optimizer and NVMe serve all its ranks' parts), plus the reduce-scatters
// of the gradient (one per micro-batch, during backward) and the all-gather
// of the new weights (during the update), over the interconnect's bus
// bandwidth; plan.data_parallel gets their seconds.
void PredictStepTime(const PlanInput& input, const Hardware& hardware, Plan& plan);

// The stage that takes longest per step (what the step waits on most).
const StageTime& SlowestStage(const Plan& plan);

// Data parallelism: whether adding GPUs per node still helps, from
// plan.data_parallel.scaling, and if not what binds and what to change.
std::string ScalingAdvice(const PlanInput& input, const Plan& plan);

}  // namespace tierflow
