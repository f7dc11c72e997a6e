// `tierflow bench engine`: one optimizer step of a model, each stage measured
// alone (compute, D2H, gradient accumulation, CPU optimizer, NVMe state I/O,
// H2D) and then the pipelined step through the OffloadEngine, so the step can
// be compared with its slowest stage. The model is the synthetic GEMM stack
// (a chosen size) or a real transformer (a preset or a config.json, random
// weights); for a transformer the planner's predicted step time for the same
// inputs is reported beside the measurement (bench/engine_prediction.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_options.h"
#include "plan/planner.h"
#include "tierflow/device.h"

namespace tierflow {

struct EngineBenchOptions {
  // "" = the synthetic model below; otherwise a preset name, a directory
  // holding config.json, or a config.json path (tierflow/model_config.h,
  // ResolveModel): that transformer with seeded random weights. Default: "".
  std::string model;
  // Synthetic model: total parameters, equal units, tokens per micro-batch.
  uint64_t params = 64ull << 20;  // Default: 64Mi
  int units = 16;                 // Default: 16
  int tokens = 512;               // Default: 512
  // Transformer: sequences per micro-batch and tokens per sequence (the
  // step's tokens are micro_batch x seq_len), activation checkpointing.
  int micro_batch = 4;        // Default: 4
  int seq_len = 2048;         // Default: 2048 (8Ki tokens per step)
  bool checkpointing = true;  // Default: on (what a 0.5-8B fine-tune uses)
  // The checkpoints in pinned host memory (TrainShape::offload_checkpoints).
  // REQUIRES checkpointing. Default: off.
  bool offload_checkpoints = false;
  int steps = 4;  // timed steps per round, back to back (after a warm-up). Default: 4
  // Rounds of (every stage alone, then the pipelined steps through a fresh
  // engine). Shared machines and disks drift by tens of percent within
  // seconds, so the limit and the pipeline are measured side by side, several
  // times. Default: 3
  int rounds = 3;
  // offload, nvme_paths, pipeline, dtype, ... and params: parameter
  // offload (--offload-param). With host or nvme and no streamed units the
  // bench streams every other block (the synthetic model: every other unit),
  // the second, fourth, ...; an nvme swap set goes into nvme_paths beside
  // the optimizer state's (bench/engine_bench_params.h).
  EngineOptions engine;
};

struct EngineBenchRound {
  // Each stage alone. With parameter offload, "h2d" uploads only the
  // resident units' updated weights (the streamed units' go to their copy)
  // and "h2d_params" is the streamed uploads of one step through the ring.
  std::map<std::string, double> stage_seconds;
  std::string slowest_stage;
  double slowest_stage_seconds = 0;
  double step_seconds = 0;  // pipelined: steady-state seconds per step
};

// The planner's view of the same step (transformer models only).
struct EngineBenchPrediction {
  double step_seconds = 0;        // Plan::predicted_step_seconds
  std::vector<StageTime> stages;  // the planner's stages
  std::string basis;              // which rates it was given, for humans
};

struct EngineBenchResult {
  std::string model;  // "synthetic (16 units)" or the transformer's name
  uint64_t params = 0;
  int64_t tokens_per_step = 0;
  std::vector<EngineBenchRound> rounds;
  // The summary takes every measurement at its best over the rounds (noise on
  // a shared machine only ever adds time): each stage's fastest time alone,
  // the slowest of those, and the fastest pipelined round.
  std::map<std::string, double> stage_seconds;
  std::string slowest_stage;
  double slowest_stage_seconds = 0;
  double step_seconds = 0;
  double overlap_efficiency = 0;  // (sum alone - step) / (sum alone - slowest), clamped to [0, 1]
  double median_round_ratio = 0;  // the median over rounds of step / slowest stage, same round
  StepStats engine_stats;         // the engine's own view of the last step
  // Bytes per parameter across PCIe in the last pipelined step: gradients
  // D2H (every micro-batch, in the gradient transfer dtype) and weights H2D.
  double d2h_bytes_per_param = 0, h2d_bytes_per_param = 0;
  // Parameter offload: the placement run (units filled in), bytes of
  // streamed weights uploaded (part of H2D above) and read from NVMe in the
  // last pipelined step, and in the h2d_params stage alone (the same fetches).
  ParamStreaming param_streaming;
  uint64_t streamed_params = 0;
  uint64_t param_h2d_bytes = 0, param_nvme_read_bytes = 0;
  uint64_t param_stage_h2d_bytes = 0, param_stage_nvme_read_bytes = 0;
  bool has_prediction = false;  // a transformer: `prediction` is set
  EngineBenchPrediction prediction;
};

StatusOr<EngineBenchResult> RunEngineBench(Device& device, const EngineBenchOptions& options);

}  // namespace tierflow
