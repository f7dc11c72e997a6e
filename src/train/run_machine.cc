// Describes the machine for the planner: train's live device or plan's flags.
#include "train/run_machine.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>

#include "common/units.h"
#include "io/sim_profile_file.h"
#include "plan/hardware_detect.h"
#include "plan/hardware_profile.h"

namespace tierflow {
namespace {

Status DescribeHost(const MachineRequest& r, MachineDescription& d) {
  Hardware& hw = d.hardware;
  if (r.host_memory_bytes) {
    hw.host_memory_bytes = *r.host_memory_bytes;
    d.notes.push_back("host:   " + FormatBytes(hw.host_memory_bytes) + " (" + r.host_memory_origin +
                      ")");
    return Status::Ok();
  }
  TF_ASSIGN_OR_RETURN(HostMemoryInfo mem, DetectHostMemory("/"));
  hw.host_memory_bytes = mem.usable_bytes;
  const std::string limit = mem.cgroup_limit_bytes > 0
                                ? "cgroup limit " + FormatBytes(mem.cgroup_limit_bytes) + " (" +
                                      mem.cgroup_limit_file + ")"
                                : "no cgroup limit";
  d.notes.push_back("host:   " + FormatBytes(hw.host_memory_bytes) + " usable, detected (" +
                    "MemAvailable " + FormatBytes(mem.mem_available_bytes) + " of " +
                    FormatBytes(mem.mem_total_bytes) + ", " + limit + ")");
  return Status::Ok();
}

// The device: the live one, a simulated one, a GPU by its stated memory or
// detected, else the emulated CPU device.
Status DescribeDevice(const MachineRequest& r, const std::optional<SimProfile>& sim,
                      MachineDescription& d) {
  Hardware& hw = d.hardware;
  std::string note;
  if (r.live != nullptr) {
    d.device_kind = r.live->kind();
    hw.device_is_gpu = d.device_kind != DeviceKind::kCpu;  // sim: a GPU's memory, simulated
    hw.device_memory_is_host_memory = d.device_kind == DeviceKind::kCpu;
    hw.device_memory_bytes = r.live->DeviceMemory().capacity_bytes;
    hw.device_description = r.live->description();
    note = "device: " + hw.device_description + ", " + FormatBytes(hw.device_memory_bytes) +
           (d.device_kind == DeviceKind::kCuda ? " free, detected" : " (the run's device)");
  } else if (sim) {
    d.device_kind = DeviceKind::kSim;
    hw.device_is_gpu = true;
    hw.device_memory_bytes = r.device_memory_bytes.value_or(
        static_cast<uint64_t>(sim->memory_gib * static_cast<double>(1ull << 30)));
    hw.device_description = "sim:" + sim->name + " (simulated GPU)";
    note = "device: " + hw.device_description + ", " + FormatBytes(hw.device_memory_bytes) +
           " (its published figures; --device sim:" + r.device.sim_profile + ")";
  } else if (r.device_memory_bytes && r.device.choice != DeviceChoice::kCpu) {
    d.device_kind = DeviceKind::kCuda;
    hw.device_memory_bytes = *r.device_memory_bytes;
    hw.device_is_gpu = true;
    hw.device_reserved_bytes = kCudaContextBytes;
    hw.device_description = "GPU with " + FormatBytes(hw.device_memory_bytes);
    note = "device: GPU, " + FormatBytes(hw.device_memory_bytes) + " (" + r.device_memory_origin +
           "; " + FormatBytes(kCudaContextBytes) + " of it reserved for the CUDA context)";
  } else if (r.device.choice != DeviceChoice::kCpu && BuiltWithCuda() &&
             CudaUnavailableReason().empty()) {
    DeviceOptions options;
    options.kind = DeviceChoice::kCuda;
    auto device = CreateDevice(options);
    if (!device.ok()) return device.status().WithContext("detecting the GPU");
    d.device_kind = DeviceKind::kCuda;
    hw.device_is_gpu = true;
    hw.device_memory_bytes = (*device)->DeviceMemory().capacity_bytes;
    hw.device_description = (*device)->description();
    note = "device: " + hw.device_description + ", " + FormatBytes(hw.device_memory_bytes) +
           " free, detected";
  } else if (r.device.choice == DeviceChoice::kCuda) {
    return UnavailableError("--device cuda: no usable GPU (" + CudaUnavailableReason() +
                            "); give " + r.device_memory_origin + " to plan for one");
  } else {
    d.device_kind = DeviceKind::kCpu;
    hw.device_memory_is_host_memory = true;
    hw.device_memory_bytes = r.device_memory_bytes.value_or(hw.host_memory_bytes);
    hw.device_description = "emulated CPU device";
    const std::string why = r.device.choice == DeviceChoice::kCpu
                                ? "--device cpu"
                                : "no GPU: " + CudaUnavailableReason();
    note = "device: emulated CPU device (" + why + "), " + FormatBytes(hw.device_memory_bytes) +
           ", its memory is host RAM; give --gpu-memory 24GiB to plan for a GPU";
  }
  d.notes.insert(d.notes.begin(), note);
  return Status::Ok();
}

Status DescribeNvme(const MachineRequest& r, MachineDescription& d) {
  Hardware& hw = d.hardware;
  if (r.nvme_capacity_bytes) {
    hw.nvme_capacity_bytes = *r.nvme_capacity_bytes;
    d.notes.push_back("nvme:   " + FormatBytes(hw.nvme_capacity_bytes) + " (" +
                      r.nvme_capacity_origin + ")");
    return Status::Ok();
  }
  std::vector<std::string> paths = r.nvme_paths;
  if (paths.empty()) paths.push_back(DefaultNvmeBase());
  std::set<dev_t> filesystems;  // two paths on one filesystem share its free space
  std::string where;
  for (const std::string& path : paths) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "--nvme-path " + path);
    TF_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytesAt(path));
    where += (where.empty() ? "" : ", ") + path + " " + FormatBytes(free_bytes) + " free";
    if (filesystems.insert(st.st_dev).second) hw.nvme_capacity_bytes += free_bytes;
  }
  d.notes.push_back("nvme:   " + FormatBytes(hw.nvme_capacity_bytes) + ", detected (" + where +
                    (r.nvme_paths.empty() ? "; the default path, give --nvme-path" : "") + ")");
  return Status::Ok();
}

Status DescribeCores(const MachineRequest& r, MachineDescription& d) {
  if (r.cores) {
    d.hardware.cores = *r.cores;
    d.notes.push_back("cores:  " + std::to_string(*r.cores) + " (--cores)");
    return Status::Ok();
  }
  TF_ASSIGN_OR_RETURN(CpuInfo cpus, DetectCpus("/", r.node_cpus.value_or(OnlineCpus())));
  d.hardware.cores = cpus.usable_cores;
  d.notes.push_back(
      "cores:  " + std::to_string(cpus.usable_cores) + ", detected" +
      (cpus.cgroup_cpu_limit > 0 ? " (cgroup quota in " + cpus.cgroup_limit_file + ")" : ""));
  return Status::Ok();
}

Status DescribeRatesOf(const MachineRequest& r, const std::optional<SimProfile>& sim,
                       MachineDescription& d) {
  Bandwidths& b = d.hardware.bandwidths;
  b = DefaultBandwidths(d.hardware.device_is_gpu, d.hardware.cores);
  TF_ASSIGN_OR_RETURN(std::optional<std::string> profile,
                      ResolveProfilePath(r.profile, &d.default_profile));
  if (profile) {
    TF_ASSIGN_OR_RETURN(HardwareProfile read, LoadHardwareProfile(*profile, b));
    b = read.rates;
    d.profile_path = read.path;
    d.nvme_store = read.nvme_store;
  }
  if (sim) {
    // The simulated GPU's own figures: what its streams will take.
    b.device_tflops = sim->tensor_tflops;
    b.device_efficiency = sim->tensor_efficiency;
    b.h2d_gb_per_second = sim->link_gb_per_s * sim->link_efficiency;
    b.d2h_gb_per_second = sim->link_gb_per_s * sim->link_efficiency;
    b.source += ", device and link from sim:" + sim->name;
  }
  if (r.device_tflops > 0) {
    b.device_tflops = r.device_tflops;
    b.source += ", device TFLOP/s from --device-tflops";
  }
  if (r.network_gbps > 0) {
    if (r.nodes < 2) {
      return InvalidArgumentError(
          "--network-gbps describes the network between nodes, and this plan has one node: "
          "give --nodes 2 or more, or drop it");
    }
    b.inter_node_busbw_gb_per_second = r.network_gbps / 8;
    b.source += ", network from --network-gbps";
  }
  char line[512];
  std::snprintf(line, sizeof(line),
                "rates:  H2D %.1f / D2H %.1f GB/s, host memory %.1f GB/s, optimizer %.2g "
                "params/s, NVMe %.1f read / %.1f write GB/s, device %.3g TFLOP/s x %.0f%%",
                b.h2d_gb_per_second, b.d2h_gb_per_second, b.host_memory_gb_per_second,
                b.adam_params_per_second, b.nvme_read_gb_per_second, b.nvme_write_gb_per_second,
                b.device_tflops, b.device_efficiency * 100);
  d.notes.push_back(line);
  return Status::Ok();
}

}  // namespace

std::string DefaultNvmeBase() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/var/tmp";
}

StatusOr<MachineDescription> DescribeMachine(const MachineRequest& r) {
  std::optional<SimProfile> sim;
  if (r.device.choice == DeviceChoice::kSim) {
    TF_ASSIGN_OR_RETURN(sim, ResolveSimProfile(r.device.sim_profile));
  }
  MachineDescription d;
  // Host memory first: the emulated device shares it.
  TF_RETURN_IF_ERROR(DescribeHost(r, d));
  TF_RETURN_IF_ERROR(DescribeDevice(r, sim, d));
  TF_RETURN_IF_ERROR(DescribeNvme(r, d));
  TF_RETURN_IF_ERROR(DescribeCores(r, d));
  TF_RETURN_IF_ERROR(DescribeRatesOf(r, sim, d));
  return d;
}

}  // namespace tierflow
