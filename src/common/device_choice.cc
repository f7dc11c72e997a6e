// DeviceChoice names and parsing.
#include "tierflow/device_choice.h"

#include <string>

namespace tierflow {

std::string_view DeviceChoiceName(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kAuto:
      return "auto";
    case DeviceChoice::kCpu:
      return "cpu";
    case DeviceChoice::kCuda:
      return "cuda";
    case DeviceChoice::kSim:
      return "sim";
  }
  return "?";
}

StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view what, std::string_view text) {
  DeviceSpec spec;
  if (text == "auto") return spec;
  if (text == "cpu" || text == "cuda") {
    spec.choice = text == "cpu" ? DeviceChoice::kCpu : DeviceChoice::kCuda;
    return spec;
  }
  constexpr std::string_view kSimPrefix = "sim:";
  if (text.substr(0, kSimPrefix.size()) == kSimPrefix && text.size() > kSimPrefix.size()) {
    spec.choice = DeviceChoice::kSim;
    spec.sim_profile = std::string(text.substr(kSimPrefix.size()));
    return spec;
  }
  return InvalidArgumentError(std::string(what) + ": unknown device '" + std::string(text) +
                              "': use auto, cpu, cuda or sim:PROFILE (a simulated GPU: "
                              "h100-sxm, h100-pcie, a100-80gb, l40s, rtx-4090, or a JSON file)");
}

std::string DeviceSpecName(const DeviceSpec& spec) {
  if (spec.choice == DeviceChoice::kSim) return "sim:" + spec.sim_profile;
  return std::string(DeviceChoiceName(spec.choice));
}

}  // namespace tierflow
