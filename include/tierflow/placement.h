// Where the fp32 optimizer state (master weights and Adam moments) lives:
// the one enum that the command line, DeepSpeed configs, the planner, the
// engine and checkpoints share. Text becomes an OffloadPlacement once, where
// it enters (a flag, a config key, trainer_state.json); inside, code compares
// enums, and printing goes through OffloadPlacementName so that outputs keep
// their spelling.
#pragma once

#include <cstdint>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

enum class OffloadPlacement : uint8_t {
  kAuto,  // the planner decides: host while it fits, the rest on NVMe
  kHost,  // all in host RAM
  kNvme,  // on NVMe (all, or the last sub-groups given a ratio)
};

// "auto", "host", "nvme": the names used on the command line and in files.
std::string_view OffloadPlacementName(OffloadPlacement placement);

// Accepts "auto", "host", "nvme" and "cpu" (DeepSpeed's spelling of host).
// `what` names where the text came from (a flag such as
// "--offload-optimizer", a config key such as
// "zero_optimization.offload_optimizer.device"); the InvalidArgument error
// names it, the text and the accepted values. Callers that need a resolved
// placement reject kAuto themselves, naming the same thing.
StatusOr<OffloadPlacement> ParseOffloadPlacement(std::string_view what, std::string_view text);

}  // namespace tierflow
