// Where the 16-bit working weights of units that do not stay on the device
// live (ZeRO-Infinity's parameter offload, DeepSpeed's
// zero_optimization.offload_param.device): the one enum that the command
// line, DeepSpeed configs, the planner and the engine share. Text becomes a
// ParamOffload once, where it enters; printing goes through ParamOffloadName.
#pragma once

#include <cstdint>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

enum class ParamOffload : uint8_t {
  kAuto,  // the planner decides: every unit resident while that fits, else stream some
  kNone,  // every unit's weights stay on the device
  kHost,  // streamed units' weights live in pinned host memory
  kNvme,  // streamed units' weights live on NVMe (read through pinned staging)
};

// A streamed copy on NVMe needs, beyond its units' blocks (the engine
// allocates these, the planner counts them): write-back buffers of one
// slot each in host memory, a unit's new weights on their way to the
// drive; and spare blocks of this many slots per directory, as two units
// may be rewriting at once while the old copy stays readable.
inline constexpr int kStreamedWriteBackBuffers = 2;
inline constexpr int kStreamedSpareSlotsPerDirectory = 3;

// "auto", "none", "host", "nvme": the names used on the command line and in files.
std::string_view ParamOffloadName(ParamOffload where);

// Accepts "auto", "none" (also "device", "gpu"), "host" (also DeepSpeed's
// "cpu") and "nvme". `what` names where the text came from (a flag such as
// "--offload-param", a key such as "zero_optimization.offload_param.device");
// the InvalidArgument error names it, the text and the accepted values.
StatusOr<ParamOffload> ParseParamOffload(std::string_view what, std::string_view text);

}  // namespace tierflow
