// The planner's step time for what `tierflow bench engine` just measured.
//
// The planner (plan/step_time.h) is handed the same model, shape, dtypes,
// placement and pipeline as the bench, and rates measured in the same run:
// each host and link stage's rate is its measured time alone (so a wrong
// prediction is the planner's model of how the stages overlap, not a stale
// profile). The device's compute is what `tierflow plan` would use: on the
// simulated accelerator the profile's tensor peak x efficiency with the
// planner's FLOP count; elsewhere (no published figure) the measured compute
// stage.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "bench/engine_bench.h"
#include "tierflow/device.h"
#include "tierflow/model_config.h"

namespace tierflow {

// Parameter offload (options.engine.params host or nvme, its units filled
// in): the planner is asked for the same placement and slots, but picks its
// own streamed units (at least one block, the least traffic); the basis
// names both sets. The streamed uploads take the link rate of h2d; with the
// weights on NVMe and the state on host, the drive's rates are the
// h2d_params stage's (the ring's reads and uploads alone).
//
// REQUIRES: `stages` holds positive times for compute, d2h, optimizer, h2d
// (unless every unit streams), h2d_params when parameters stream, and nvme
// when the options put state there; params is the model's parameter count,
// resident_params those whose weights stay on the device. Errors are the
// planner's (an input it refuses).
StatusOr<EngineBenchPrediction> PredictEngineStep(const Device& device, const ModelConfig& config,
                                                  const EngineBenchOptions& options,
                                                  uint64_t params, uint64_t resident_params,
                                                  const std::map<std::string, double>& stages,
                                                  uint64_t param_stage_bytes = 0);

}  // namespace tierflow
