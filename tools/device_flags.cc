// The --device / --device-memory flags.
#include "tools/device_flags.h"

#include <cstdio>

#include "common/units.h"
#include "io/sim_profile_file.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {

void DeviceFlags::Add(CLI::App& cmd) {
  cmd.add_option("--device", kind,
                 "auto | cpu | cuda | sim:PROFILE (auto: CUDA when a GPU answers, else cpu; "
                 "sim: the cpu device timed as a GPU, PROFILE = h100-sxm, h100-pcie, a100-80gb, "
                 "l40s, rtx-4090 or a JSON file)");
  cmd.add_option("--device-memory", memory,
                 "Device memory limit, e.g. 2GiB (cpu default 2GiB; cuda default: free memory)")
      ->check(ByteSizeAtLeast(1));
}

std::unique_ptr<Device> DeviceFlags::CreateOrReport() const {
  DeviceOptions options;
  auto spec = ParseDeviceSpec("--device", kind);
  if (!spec.ok()) {
    std::fprintf(stderr, "tierflow: %s\n", spec.status().message().c_str());
    return nullptr;
  }
  options.kind = spec->choice;
  if (spec->choice == DeviceChoice::kSim) {
    auto profile = ResolveSimProfile(spec->sim_profile);
    if (!profile.ok()) {
      std::fprintf(stderr, "tierflow: --device: %s\n", profile.status().message().c_str());
      return nullptr;
    }
    options.sim = *std::move(profile);
  }
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
