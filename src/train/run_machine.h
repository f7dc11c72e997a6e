// The machine a run is planned for: its device, host memory, NVMe space,
// cores and rates. One function describes it for `tierflow train` (from the
// device the run created) and for `tierflow plan` (from its flags, or from
// the device a `plan --config` run would create), so the two plan against the
// same figures by construction, not by care.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/hardware_profile.h"
#include "plan/planner.h"
#include "tierflow/device.h"
#include "tierflow/device_choice.h"
#include "tierflow/status.h"

namespace tierflow {

// Where the NVMe state goes when no directory is given: train makes its
// temporary swap directory here, and plan counts this filesystem's space.
// $TMPDIR, else /var/tmp (not /tmp, which is often RAM).
std::string DefaultNvmeBase();

struct MachineRequest {
  DeviceSpec device;  // auto | cpu | cuda | sim:PROFILE
  // The device the run created: its kind, description and the memory it
  // reports (free memory on a GPU, the set capacity on the CPU device and the
  // simulated ones). Null: described by device_memory_bytes or detected.
  const Device* live = nullptr;
  // Given figures, each overriding what is detected (unset: detect).
  std::optional<uint64_t> device_memory_bytes;  // without a live device: a GPU's total
  std::optional<uint64_t> host_memory_bytes;
  std::optional<uint64_t> nvme_capacity_bytes;
  std::optional<int> cores;
  // The CPUs counted before cgroup limits when cores is unset: this
  // process's affinity (unset), or the node's online CPUs for a rank that
  // the launcher bound to its share of them (the plan is of the node).
  std::optional<int> node_cpus;
  // Counted when nvme_capacity_bytes is unset; empty: DefaultNvmeBase().
  // Paths on one filesystem count its free space once.
  std::vector<std::string> nvme_paths;
  std::string profile;       // hardware profile; "" = the one `bench all` saved, if any
  double device_tflops = 0;  // > 0: overrides the device's figure
  double network_gbps = 0;   // > 0: between nodes; needs nodes >= 2
  int nodes = 1;
  // The names of the flags or keys behind each figure, for the notes.
  std::string host_memory_origin = "--host-memory";
  std::string nvme_capacity_origin = "--nvme-capacity";
  std::string device_memory_origin = "--gpu-memory";
};

struct MachineDescription {
  Hardware hardware;
  DeviceKind device_kind = DeviceKind::kCpu;  // what the run's collectives are resolved for
  // Where each figure came from, one line each (plan prints them).
  std::vector<std::string> notes;
  std::string default_profile;  // the saved profile's path when it was used
  // The hardware profile read (the one read of it in a command); "" and
  // nullopt when the built-in rates serve.
  std::string profile_path;
  std::optional<NvmeStoreProfile> nvme_store;  // its "nvme_store", when tuned
};

// Errors: a device that cannot be described (cuda without a GPU and no
// device_memory_bytes: names --gpu-memory), unreadable /proc or NVMe paths
// (named), a profile that does not parse (its file named).
StatusOr<MachineDescription> DescribeMachine(const MachineRequest& request);

}  // namespace tierflow
