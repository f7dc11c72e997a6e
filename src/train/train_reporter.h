// What a training run tells whoever runs it (train/trainer.h's
// RunTraining, and what it calls: checkpoint retention, the swap sets'
// cleanup): the run at its start, each step, notes, evaluations and
// checkpoints. Library code reports through it and never prints; the
// command prints, tests collect.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine_options.h"
#include "tierflow/dtype.h"

namespace tierflow {

struct RunInfo {
  int rank = 0, world_size = 1;  // data parallelism: this process among the ranks
  std::string device;            // description
  std::string model;             // name and parameter count
  int64_t params = 0;
  int64_t train_tokens = 0, eval_tokens = 0;
  std::string offload;       // where the optimizer state lives
  std::string offload_from;  // who chose that: the planner, or the configuration
  // The rates the plan (placement, speculation budget, predicted step) used:
  // a profile and how old it is, or the defaults and where a profile was looked for.
  std::string rates;
  std::string nvme_dir;  // "" when on host
  std::string out_dir;
  int64_t start_step = 0;    // > 0 when resumed
  std::string resumed_from;  // checkpoint path, "" when starting fresh
  int64_t tokens_per_step = 0;
  double predicted_step_seconds = 0;  // the planner's prediction
  // Parameters updated speculatively per step, and where that figure came
  // from (Placement::speculation_from: "free host memory", "input", ...).
  int64_t speculation_params = 0;
  std::string speculation_from;
  DType grad_transfer_dtype = DType::kBF16;  // what gradients cross PCIe in
};

struct StepReport {
  int64_t step = 0, total_steps = 0;
  StepStats stats;
  float lr = 0;
  double tokens_per_second = 0;
  double elapsed_seconds = 0;
  double eta_seconds = 0;
  uint64_t device_bytes = 0, pinned_bytes = 0, host_state_bytes = 0, nvme_bytes = 0;
};

class TrainReporter {
 public:
  virtual ~TrainReporter() = default;
  virtual void OnStart(const RunInfo& info) {}
  virtual void OnNote(const std::string& message) {}  // e.g. "no checkpoint: starting fresh"
  virtual void OnStep(const StepReport& report) {}
  virtual void OnEval(int64_t step, double eval_loss) {}
  virtual void OnCheckpoint(int64_t step, const std::string& path) {}
};

}  // namespace tierflow
