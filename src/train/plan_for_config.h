// `tierflow plan --config FILE`: the plan of the run `tierflow train
// --config FILE` would start, made by the same stages train runs (run_data.h,
// run_machine.h, resolve_run.h): the model and data read as train reads
// them, the device train would create, the same NVMe I/O choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/planner.h"
#include "tierflow/status.h"
#include "train/train_config.h"

namespace tierflow {

struct ConfigPlanRequest {
  // The ranks train would be launched with (`--nproc-per-node`, mpirun).
  int gpus_per_node = 1;
  int nodes = 1;
  // A GPU that is not here, by its memory (plan's --gpu-memory): only when
  // the configuration's device is cuda or auto and no GPU answers.
  std::optional<uint64_t> gpu_memory_bytes;
};

struct ConfigPlan {
  PlanInput input;
  Hardware hardware;
  Plan plan;
  std::vector<std::string> notes;  // where each machine figure came from; the choices made
  std::string default_profile;     // the saved profile's path when it gave the rates
};

// Errors: ValidateTrainConfig's; the model's, tokenizer's and data's (as
// train's); a cuda device without a GPU and without gpu_memory_bytes (names
// --gpu-memory); gpu_memory_bytes for a device that is not a GPU; a
// configured NVMe directory that does not exist (plan makes nothing of the
// user's).
StatusOr<ConfigPlan> PlanForConfig(const TrainConfig& config, const ConfigPlanRequest& request);

}  // namespace tierflow
