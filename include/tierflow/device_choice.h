// The device a run asks for (DeviceOptions::kind, TrainConfig::device):
// a DeviceKind, or kAuto, which CreateDevice resolves. Kept apart from
// DeviceKind (tierflow/device.h) so that code switching on a live device's
// kind never has to handle "auto", and low in the layers (tierflow_common)
// so that config parsing can read it without linking a device backend.
#pragma once

#include <cstdint>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

enum class DeviceChoice : uint8_t { kAuto, kCpu, kCuda };

// "auto", "cpu", "cuda": the names used on the command line and in configs.
std::string_view DeviceChoiceName(DeviceChoice choice);

// Accepts "auto", "cpu", "cuda". `what` names where the text came from (a
// flag such as "--device", a config key); the InvalidArgument error names
// it, the text and the accepted values.
StatusOr<DeviceChoice> ParseDeviceChoice(std::string_view what, std::string_view text);

}  // namespace tierflow
