// The --device / --device-memory flags.
#include "tools/device_flags.h"

#include <cstdio>

#include "common/units.h"

namespace tierflow::cli {

void DeviceFlags::Add(CLI::App& cmd) {
  cmd.add_option("--device", kind, "auto | cpu | cuda (auto: CUDA when a GPU answers, else cpu)");
  cmd.add_option("--device-memory", memory,
                 "Device memory limit, e.g. 2GiB (cpu default 2GiB; cuda default: free memory)");
}

std::unique_ptr<Device> DeviceFlags::CreateOrReport() const {
  DeviceOptions options;
  auto choice = ParseDeviceChoice("--device", kind);
  if (!choice.ok()) {
    std::fprintf(stderr, "tierflow: %s\n", choice.status().message().c_str());
    return nullptr;
  }
  options.kind = *choice;
  if (!memory.empty()) {
    auto bytes = ParseByteSize(memory);
    if (!bytes.ok()) {
      std::fprintf(stderr, "tierflow: --device-memory: %s\n", bytes.status().message().c_str());
      return nullptr;
    }
    options.memory_capacity_bytes = *bytes;
  }
  auto device = CreateDevice(options);
  if (!device.ok()) {
    std::fprintf(stderr, "tierflow: %s\n", device.status().ToString().c_str());
    return nullptr;
  }
  return std::move(device).value();
}

}  // namespace tierflow::cli
