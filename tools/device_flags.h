// The --device and --device-memory flags shared by every subcommand that
// runs on a device, and the device they select.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "tierflow/device.h"

namespace tierflow::cli {

struct DeviceFlags {
  std::string kind = "auto";
  std::string memory = "";  // e.g. "2GiB"; empty = the backend's default

  void Add(CLI::App& cmd);
  // Creates the device, or prints why not to stderr and returns nullptr.
  std::unique_ptr<Device> CreateOrReport() const;
};

}  // namespace tierflow::cli
