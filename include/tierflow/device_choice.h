// The device a run asks for (DeviceOptions::kind, TrainConfig::device):
// a DeviceKind, or kAuto, which CreateDevice resolves. Kept apart from
// DeviceKind (tierflow/device.h) so that code switching on a live device's
// kind never has to handle "auto", and low in the layers (tierflow_common)
// so that config parsing can read it without linking a device backend.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

enum class DeviceChoice : uint8_t { kAuto, kCpu, kCuda, kSim };

// "auto", "cpu", "cuda", "sim": the names used on the command line and in configs.
std::string_view DeviceChoiceName(DeviceChoice choice);

// A device as the user wrote it: "auto", "cpu", "cuda" or "sim:PROFILE",
// where PROFILE names a built-in simulated GPU (tierflow/sim_profile.h) or a
// JSON file with its fields (resolved by io/sim_profile_file.h).
struct DeviceSpec {
  DeviceChoice choice = DeviceChoice::kAuto;
  std::string sim_profile;  // non-empty exactly when choice == kSim
};

// "auto", "cpu", "cuda" or "sim:PROFILE" ("sim" with an empty profile is an
// error). `what` names where the text came from (a flag such as "--device",
// a config key); the InvalidArgument error names it, the text and the
// accepted values.
StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view what, std::string_view text);

// The text ParseDeviceSpec reads back to `spec`.
std::string DeviceSpecName(const DeviceSpec& spec);

}  // namespace tierflow
