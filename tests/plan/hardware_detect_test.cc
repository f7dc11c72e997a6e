// Hardware detection against fake /proc and /sys trees: cgroup v1 and v2
// memory limits ("max", v1's huge "unlimited", nested cgroups, missing
// files), CPU quotas, and errors that name the bad file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "plan/hardware_detect.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kMeminfo[] =
    "MemTotal:       32768000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:   20000000 kB\n"
    "Buffers:          100000 kB\n"
    "Cached:          5000000 kB\n";

class FakeRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tierflow_hwdetect_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    fs::path p = root_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }

  HostMemoryInfo Memory() {
    auto info = DetectHostMemory(root_.string());
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? *info : HostMemoryInfo{};
  }

  fs::path root_;
};

TEST_F(FakeRoot, NoCgroupFilesMeansMemAvailable) {
  Write("proc/meminfo", kMeminfo);
  HostMemoryInfo m = Memory();
  EXPECT_EQ(m.mem_total_bytes, 32768000ull * 1024);
  EXPECT_EQ(m.mem_available_bytes, 20000000ull * 1024);
  EXPECT_EQ(m.cgroup_limit_bytes, 0u);
  EXPECT_EQ(m.usable_bytes, 20000000ull * 1024);
}

TEST_F(FakeRoot, CgroupV2LimitBelowAvailableWins) {
  Write("proc/meminfo", kMeminfo);
  Write("proc/self/cgroup", "0::/user.slice/job-7\n");
  Write("sys/fs/cgroup/user.slice/job-7/memory.max", "8589934592\n");
  HostMemoryInfo m = Memory();
  EXPECT_EQ(m.cgroup_limit_bytes, 8589934592u);
  EXPECT_EQ(m.usable_bytes, 8589934592u);
  EXPECT_THAT(m.cgroup_limit_file, HasSubstr("job-7/memory.max"));
}

TEST_F(FakeRoot, CgroupV2MaxMeansNoLimitButAnAncestorCanLimit) {
  Write("proc/meminfo", kMeminfo);
  Write("proc/self/cgroup", "0::/a/b\n");
  Write("sys/fs/cgroup/a/b/memory.max", "max\n");
  EXPECT_EQ(Memory().cgroup_limit_bytes, 0u);
  Write("sys/fs/cgroup/a/memory.max", "4294967296\n");  // the parent's limit applies too
  HostMemoryInfo m = Memory();
  EXPECT_EQ(m.cgroup_limit_bytes, 4294967296u);
  EXPECT_EQ(m.usable_bytes, 4294967296u);
}

TEST_F(FakeRoot, CgroupV2LimitAboveAvailableLeavesAvailable) {
  Write("proc/meminfo", kMeminfo);
  Write("proc/self/cgroup", "0::/\n");
  Write("sys/fs/cgroup/memory.max", std::to_string(64ull << 30) + "\n");
  HostMemoryInfo m = Memory();
  EXPECT_EQ(m.cgroup_limit_bytes, 64ull << 30);
  EXPECT_EQ(m.usable_bytes, 20000000ull * 1024);
}

TEST_F(FakeRoot, CgroupV1LimitIsRead) {
  Write("proc/meminfo", kMeminfo);
  Write("proc/self/cgroup", "9:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n");
  Write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  HostMemoryInfo m = Memory();
  EXPECT_EQ(m.cgroup_limit_bytes, 2147483648u);
  EXPECT_EQ(m.usable_bytes, 2147483648u);
}

TEST_F(FakeRoot, CgroupV1HugeValueMeansNoLimit) {
  Write("proc/meminfo", kMeminfo);
  Write("proc/self/cgroup", "4:memory:/x\n");
  Write("sys/fs/cgroup/memory/x/memory.limit_in_bytes", "9223372036854771712\n");
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  HostMemoryInfo m = Memory();
  EXPECT_EQ(m.cgroup_limit_bytes, 0u);
  EXPECT_EQ(m.usable_bytes, 20000000ull * 1024);
}

TEST_F(FakeRoot, CgroupPathMissingInsideContainerFallsBackToTheMountRoot) {
  // A container without a cgroup namespace sees the host's path, which does
  // not exist under its own /sys/fs/cgroup; the limit sits at the root.
  Write("proc/meminfo", kMeminfo);
  Write("proc/self/cgroup", "0::/kubepods/pod123/ctr\n");
  Write("sys/fs/cgroup/memory.max", "1073741824\n");
  EXPECT_EQ(Memory().usable_bytes, 1073741824u);
}

TEST_F(FakeRoot, KernelsWithoutMemAvailableUseFreePlusCaches) {
  Write("proc/meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n");
  EXPECT_EQ(Memory().mem_available_bytes, 310u * 1024);
}

TEST_F(FakeRoot, MissingMeminfoAndGarbageAreErrorsNamingTheFile) {
  auto missing = DetectHostMemory(root_.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("proc/meminfo"));
  EXPECT_THAT(missing.status().message(), HasSubstr("--host-memory"));

  Write("proc/meminfo", kMeminfo);
  Write("sys/fs/cgroup/memory.max", "lots\n");
  auto garbage = DetectHostMemory(root_.string());
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(garbage.status().message(), HasSubstr("memory.max"));
  EXPECT_THAT(garbage.status().message(), HasSubstr("lots"));
}

TEST_F(FakeRoot, CpuQuotaV2) {
  Write("proc/self/cgroup", "0::/job\n");
  Write("sys/fs/cgroup/job/cpu.max", "150000 100000\n");
  auto cpus = DetectCpus(root_.string(), 16);
  ASSERT_TRUE(cpus.ok()) << cpus.status().ToString();
  EXPECT_DOUBLE_EQ(cpus->cgroup_cpu_limit, 1.5);
  EXPECT_EQ(cpus->usable_cores, 2);  // 1.5 CPUs of quota keep 2 threads busy part-time
  Write("sys/fs/cgroup/job/cpu.max", "max 100000\n");
  cpus = DetectCpus(root_.string(), 16);
  ASSERT_TRUE(cpus.ok());
  EXPECT_EQ(cpus->cgroup_cpu_limit, 0);
  EXPECT_EQ(cpus->usable_cores, 16);
}

TEST_F(FakeRoot, CpuQuotaV1AndNoLimit) {
  Write("proc/self/cgroup", "3:cpu,cpuacct:/grp\n");
  Write("sys/fs/cgroup/cpu,cpuacct/grp/cpu.cfs_quota_us", "400000\n");
  Write("sys/fs/cgroup/cpu,cpuacct/grp/cpu.cfs_period_us", "100000\n");
  auto cpus = DetectCpus(root_.string(), 64);
  ASSERT_TRUE(cpus.ok()) << cpus.status().ToString();
  EXPECT_EQ(cpus->usable_cores, 4);
  EXPECT_EQ(DetectCpus(root_.string(), 2)->usable_cores, 2);  // fewer CPUs than quota

  Write("sys/fs/cgroup/cpu,cpuacct/grp/cpu.cfs_quota_us", "-1\n");
  EXPECT_EQ(DetectCpus(root_.string(), 64)->usable_cores, 64);
  Write("sys/fs/cgroup/cpu,cpuacct/grp/cpu.cfs_quota_us", "abc\n");
  auto bad = DetectCpus(root_.string(), 64);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("cpu.cfs_quota_us"));
}

TEST(FreeBytes, ExistingAndMissingPaths) {
  auto tmp = FreeBytesAt(fs::temp_directory_path().string());
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
  EXPECT_GT(*tmp, 0u);
  auto missing = FreeBytesAt("/nonexistent/tierflow/path");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/tierflow/path"));
  EXPECT_GE(OnlineCpus(), 1);
}

}  // namespace
}  // namespace tierflow
