// Host memory, cores and free disk space as this process may use them.
// Containers make the machine's totals misleading: a cgroup limit, not
// MemTotal, is what an out-of-memory kill obeys, so detection reads the
// limits of the process's own cgroup and its ancestors.
#include "plan/hardware_detect.h"

#include <sched.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "io/file_reader.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;

// v1 reports "no limit" as a huge page-aligned number (9223372036854771712).
constexpr uint64_t kCgroupV1Unlimited = 1ull << 60;

// /proc and cgroup files are a few KB; an unreadable one (no such
// controller, no permission) means "no limit known here", not an error.
bool ReadFile(const fs::path& path, std::string* out) {
  auto text = ReadFileToString(path.string(), 1u << 20);
  if (!text.ok()) return false;
  *out = std::move(text).value();
  return true;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool ParseU64(const std::string& text, uint64_t* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || text[0] == '-') return false;
  *value = v;
  return true;
}

bool ParseI64(const std::string& text, int64_t* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *value = v;
  return true;
}

Status Unreadable(const fs::path& file, const std::string& content, const char* expected) {
  return InvalidArgumentError("cannot read cgroup file '" + file.string() + "': expected " +
                              expected + ", got '" + content + "'");
}

// This process's cgroup paths from root/proc/self/cgroup: the v2 path
// ("0::/a/b") and the v1 path of each controller ("4:memory:/a/b").
struct CgroupPaths {
  std::string v2;
  std::string v1_memory;
  std::string v1_cpu;
};

CgroupPaths ReadCgroupPaths(const fs::path& root) {
  CgroupPaths p;
  std::string text;
  if (!ReadFile(root / "proc/self/cgroup", &text)) return p;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    size_t c1 = line.find(':');
    size_t c2 = line.find(':', c1 == std::string::npos ? c1 : c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path = line.substr(c2 + 1);
    if (line.substr(0, c1) == "0" && controllers.empty()) {
      p.v2 = path;
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name == "memory") p.v1_memory = path;
      if (name == "cpu") p.v1_cpu = path;
    }
  }
  return p;
}

// `base`/`relative` and each ancestor up to `base` itself, deepest first.
std::vector<fs::path> CgroupDirs(const fs::path& base, const std::string& relative) {
  std::vector<fs::path> dirs;
  fs::path rel = fs::path(relative).relative_path();
  while (!rel.empty()) {
    dirs.push_back(base / rel);
    rel = rel.parent_path();
  }
  dirs.push_back(base);
  return dirs;
}

// Tightens *limit with the value in `file` if it holds one; "max" and v1's
// huge value mean none.
Status ApplyMemoryLimitFile(const fs::path& file, uint64_t* limit, std::string* limit_file) {
  std::string text;
  if (!ReadFile(file, &text)) return Status::Ok();
  text = Trim(text);
  if (text == "max") return Status::Ok();
  uint64_t v = 0;
  if (!ParseU64(text, &v)) return Unreadable(file, text, "a byte count or 'max'");
  if (v >= kCgroupV1Unlimited) return Status::Ok();
  if (*limit == 0 || v < *limit) {
    *limit = v;
    *limit_file = file.string();
  }
  return Status::Ok();
}

// CPUs allowed by one cgroup directory's quota; 0 when unlimited or absent.
StatusOr<double> CpuQuotaIn(const fs::path& dir, bool v2, fs::path* file) {
  std::string text;
  if (v2) {
    *file = dir / "cpu.max";
    if (!ReadFile(*file, &text)) return 0.0;
    std::istringstream fields(Trim(text));
    std::string quota, period;
    fields >> quota >> period;
    if (quota == "max") return 0.0;
    int64_t q = 0, p = 0;
    if (!ParseI64(quota, &q) || !ParseI64(period, &p) || q <= 0 || p <= 0) {
      return Unreadable(*file, Trim(text), "'QUOTA PERIOD' or 'max PERIOD'");
    }
    return static_cast<double>(q) / static_cast<double>(p);
  }
  *file = dir / "cpu.cfs_quota_us";
  if (!ReadFile(*file, &text)) return 0.0;
  int64_t q = 0;
  if (!ParseI64(Trim(text), &q)) return Unreadable(*file, Trim(text), "microseconds or -1");
  if (q < 0) return 0.0;
  fs::path period_file = dir / "cpu.cfs_period_us";
  std::string period_text;
  int64_t p = 0;
  if (!ReadFile(period_file, &period_text) || !ParseI64(Trim(period_text), &p) || p <= 0) {
    return Unreadable(period_file, Trim(period_text), "a positive period in microseconds");
  }
  if (q == 0) return Unreadable(*file, Trim(text), "a positive quota or -1");
  return static_cast<double>(q) / static_cast<double>(p);
}

}  // namespace

StatusOr<HostMemoryInfo> DetectHostMemory(const std::string& root_dir) {
  const fs::path root = root_dir;
  const fs::path meminfo = root / "proc/meminfo";
  std::string text;
  if (!ReadFile(meminfo, &text)) {
    return NotFoundError("cannot read '" + meminfo.string() +
                         "' to size host memory: give it with --host-memory");
  }
  HostMemoryInfo info;
  uint64_t mem_free = 0, cached = 0, buffers = 0;
  bool have_available = false;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    if (!(fields >> key >> kib)) continue;
    const uint64_t bytes = kib * 1024;
    if (key == "MemTotal:") info.mem_total_bytes = bytes;
    if (key == "MemAvailable:") {
      info.mem_available_bytes = bytes;
      have_available = true;
    }
    if (key == "MemFree:") mem_free = bytes;
    if (key == "Cached:") cached = bytes;
    if (key == "Buffers:") buffers = bytes;
  }
  if (info.mem_total_bytes == 0) {
    return InvalidArgumentError("no MemTotal line in " + meminfo.string());
  }
  if (!have_available) info.mem_available_bytes = mem_free + cached + buffers;

  const CgroupPaths paths = ReadCgroupPaths(root);
  for (const char* base : {"sys/fs/cgroup", "sys/fs/cgroup/unified"}) {
    for (const fs::path& dir : CgroupDirs(root / base, paths.v2)) {
      TF_RETURN_IF_ERROR(ApplyMemoryLimitFile(dir / "memory.max", &info.cgroup_limit_bytes,
                                              &info.cgroup_limit_file));
    }
  }
  for (const fs::path& dir : CgroupDirs(root / "sys/fs/cgroup/memory", paths.v1_memory)) {
    TF_RETURN_IF_ERROR(ApplyMemoryLimitFile(dir / "memory.limit_in_bytes", &info.cgroup_limit_bytes,
                                            &info.cgroup_limit_file));
  }
  info.usable_bytes = info.mem_available_bytes;
  if (info.cgroup_limit_bytes > 0) {
    info.usable_bytes = std::min(info.usable_bytes, info.cgroup_limit_bytes);
  }
  return info;
}

StatusOr<CpuInfo> DetectCpus(const std::string& root_dir, int online_cpus) {
  const fs::path root = root_dir;
  CpuInfo info;
  info.online_cpus = std::max(online_cpus, 1);
  const CgroupPaths paths = ReadCgroupPaths(root);
  auto consider = [&](const fs::path& dir, bool v2) -> Status {
    fs::path file;
    TF_ASSIGN_OR_RETURN(double cpus, CpuQuotaIn(dir, v2, &file));
    if (cpus > 0 && (info.cgroup_cpu_limit == 0 || cpus < info.cgroup_cpu_limit)) {
      info.cgroup_cpu_limit = cpus;
      info.cgroup_limit_file = file.string();
    }
    return Status::Ok();
  };
  for (const char* base : {"sys/fs/cgroup", "sys/fs/cgroup/unified"}) {
    for (const fs::path& dir : CgroupDirs(root / base, paths.v2)) {
      TF_RETURN_IF_ERROR(consider(dir, /*v2=*/true));
    }
  }
  for (const char* base : {"sys/fs/cgroup/cpu", "sys/fs/cgroup/cpu,cpuacct"}) {
    for (const fs::path& dir : CgroupDirs(root / base, paths.v1_cpu)) {
      TF_RETURN_IF_ERROR(consider(dir, /*v2=*/false));
    }
  }
  info.usable_cores = info.online_cpus;
  if (info.cgroup_cpu_limit > 0) {
    const int quota_cores = static_cast<int>(std::ceil(info.cgroup_cpu_limit - 1e-9));
    info.usable_cores = std::max(1, std::min(info.usable_cores, quota_cores));
  }
  return info;
}

int OnlineCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

StatusOr<uint64_t> FreeBytesAt(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) return ErrnoStatus(errno, "statvfs " + path);
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

}  // namespace tierflow
