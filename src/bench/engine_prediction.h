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

// REQUIRES: `stages` holds positive times for compute, d2h, h2d, accumulate
// and optimizer (and nvme when the options put state there); params is the
// model's parameter count. Errors are the planner's (an input it refuses).
StatusOr<EngineBenchPrediction> PredictEngineStep(const Device& device, const ModelConfig& config,
                                                  const EngineBenchOptions& options,
                                                  uint64_t params,
                                                  const std::map<std::string, double>& stages);

}  // namespace tierflow
