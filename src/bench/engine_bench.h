// `tierflow bench engine`: one optimizer step of a synthetic model of a given
// size, each stage measured alone (compute, D2H, gradient accumulation, CPU
// optimizer, NVMe state I/O, H2D) and then the pipelined step through the
// OffloadEngine, so the step can be compared with its slowest stage.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_options.h"
#include "tierflow/device.h"

namespace tierflow {

struct EngineBenchOptions {
  uint64_t params = 64ull << 20;  // total parameters. Default: 64Mi
  int units = 16;                 // equal units (layers). Default: 16
  int tokens = 512;               // tokens per micro-batch. Default: 512
  int steps = 4;  // timed steps per round, back to back (after a warm-up). Default: 4
  // Rounds of (every stage alone, then the pipelined steps through a fresh
  // engine). Shared machines and disks drift by tens of percent within
  // seconds, so the limit and the pipeline are measured side by side, several
  // times. Default: 3
  int rounds = 3;
  EngineOptions engine;  // offload, nvme_paths, pipeline, dtype, ...
};

struct EngineBenchRound {
  std::map<std::string, double> stage_seconds;  // each stage alone
  std::string slowest_stage;
  double slowest_stage_seconds = 0;
  double step_seconds = 0;  // pipelined: steady-state seconds per step
};

struct EngineBenchResult {
  uint64_t params = 0;
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
};

StatusOr<EngineBenchResult> RunEngineBench(Device& device, const EngineBenchOptions& options);

}  // namespace tierflow
