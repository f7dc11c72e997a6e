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
  }
  return "?";
}

StatusOr<DeviceChoice> ParseDeviceChoice(std::string_view what, std::string_view text) {
  if (text == "auto") return DeviceChoice::kAuto;
  if (text == "cpu") return DeviceChoice::kCpu;
  if (text == "cuda") return DeviceChoice::kCuda;
  return InvalidArgumentError(std::string(what) + ": unknown device '" + std::string(text) +
                              "': use auto, cpu or cuda");
}

}  // namespace tierflow
