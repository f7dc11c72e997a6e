// What this machine offers the planner: usable host memory (/proc/meminfo
// and cgroup v1/v2 memory limits), usable cores (CPU affinity and cgroup CPU
// quotas) and free space on the NVMe paths (statvfs).
//
// The /proc and /sys files are read under `root` ("/" normally) so tests can
// point detection at a directory of fake files. Thread safety: reentrant.
#pragma once

#include <cstdint>
#include <string>

#include "tierflow/status.h"

namespace tierflow {

struct HostMemoryInfo {
  uint64_t mem_total_bytes = 0;      // /proc/meminfo MemTotal
  uint64_t mem_available_bytes = 0;  // MemAvailable (MemFree + Cached on kernels without it)
  uint64_t cgroup_limit_bytes = 0;   // tightest cgroup memory limit; 0 = none
  std::string cgroup_limit_file;     // where that limit was read ("" = none)
  uint64_t usable_bytes = 0;         // min(mem_available, cgroup limit)
};

// Reads root/proc/meminfo and the memory limits of this process's cgroups:
// v2 memory.max ("max" = none) under root/sys/fs/cgroup (or .../unified) and
// v1 memory.limit_in_bytes (>= 2^60 = none) under root/sys/fs/cgroup/memory,
// from the process's own cgroup (root/proc/self/cgroup) up to the
// hierarchy's root, taking the smallest. Missing cgroup files mean no limit.
// Errors: NotFound when root/proc/meminfo cannot be read (give
// --host-memory instead); InvalidArgument naming the file for unreadable
// contents.
StatusOr<HostMemoryInfo> DetectHostMemory(const std::string& root = "/");

struct CpuInfo {
  int online_cpus = 0;            // CPUs this process may run on
  double cgroup_cpu_limit = 0;    // quota / period; 0 = none
  std::string cgroup_limit_file;  // where the quota was read ("" = none)
  int usable_cores = 0;           // min(online_cpus, ceil(cgroup limit)), at least 1
};

// Applies the cgroup CPU quota (v2 cpu.max "QUOTA PERIOD" or "max PERIOD";
// v1 cpu.cfs_quota_us / cpu.cfs_period_us, -1 = none) found under `root`
// to `online_cpus`. Errors: InvalidArgument naming the file for unreadable
// contents.
StatusOr<CpuInfo> DetectCpus(const std::string& root, int online_cpus);

// CPUs in this process's affinity mask (std::thread::hardware_concurrency
// when the mask cannot be read).
int OnlineCpus();

// Free bytes for an unprivileged writer at `path` (statvfs f_bavail *
// f_frsize). The path must exist; errors name it.
StatusOr<uint64_t> FreeBytesAt(const std::string& path);

}  // namespace tierflow
