#include "common/host_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tierflow {
namespace {

bool AllZero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

TEST(HostMemoryTest, SmallBlocksArePageAlignedAndZeroed) {
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4097}, kHugePageBytes - 1}) {
    char* p = static_cast<char*>(AllocateHostPages(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u) << n;
    EXPECT_TRUE(AllZero(p, n)) << n;
    FreeHostPages(p, n);
  }
}

TEST(HostMemoryTest, LargeBlocksAreHugePageAlignedAndZeroed) {
  for (size_t n : {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes + 12345}) {
    char* p = static_cast<char*>(AllocateHostPages(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << n;
    EXPECT_TRUE(AllZero(p, n)) << n;
    p[n - 1] = 1;  // the whole size is writable
    FreeHostPages(p, n);
  }
}

// The mapping carries the huge-page advice: /proc/self/smaps lists it with
// the "hg" VmFlag. (Whether the kernel then backs it with huge pages is its
// choice, and not asserted.)
TEST(HostMemoryTest, LargeBlocksAreAdvisedHugePages) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  if (!thp || !std::getline(thp, mode) || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "no transparent huge pages on this kernel";
  }
  const size_t n = 4 * kHugePageBytes;
  char* p = static_cast<char*>(AllocateHostPages(n));
  ASSERT_NE(p, nullptr);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_block = false, advised = false, found = false;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> lo >> dash >> hi && dash == '-') {
      in_block = lo <= begin && begin < hi;
      found = found || in_block;
      continue;
    }
    if (in_block && line.rfind("VmFlags:", 0) == 0) {
      advised = line.find(" hg") != std::string::npos;
    }
  }
  FreeHostPages(p, n);
  ASSERT_TRUE(found);
  EXPECT_TRUE(advised);
}

// Pages of [p, p + n) the kernel has backed with memory (mincore).
size_t ResidentPages(const char* p, size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((n + page - 1) / page);
  if (mincore(const_cast<char*>(p), n, vec.data()) != 0) return SIZE_MAX;
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return resident;
}

// A fresh block is backed on first touch; a populated one (the emulated
// pinned memory, the engine's speculation backups) is backed all at once,
// and keeps its zeros.
TEST(HostMemoryTest, PopulateBacksEveryPage) {
  const size_t n = 8 * kHugePageBytes + 4096;
  const size_t pages = n / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto fresh = HostPages::Allocate(n, "fresh block");
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_LT(ResidentPages(fresh->as<char>(), n), pages);
  auto resident = HostPages::AllocateResident(n, "resident block");
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  EXPECT_EQ(ResidentPages(resident->as<char>(), n), pages);
  EXPECT_TRUE(AllZero(resident->as<char>(), n));
  // Below a huge page the block is malloc'd and zero-filled: already backed.
  auto small = HostPages::AllocateResident(12345, "small block");
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_TRUE(AllZero(small->as<char>(), 12345));
  EXPECT_TRUE(PopulateHostPages(nullptr, 0, "nothing").ok());
}

TEST(HostMemoryTest, HostPagesOwnsAndMoves) {
  auto a = HostPages::Allocate(3 * kHugePageBytes, "test block");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  float* data = a->as<float>();
  data[0] = 1.0f;
  HostPages b = std::move(*a);
  EXPECT_EQ(b.as<float>(), data);
  EXPECT_EQ(b.num_bytes(), 3 * kHugePageBytes);
  EXPECT_EQ(a->data(), nullptr);  // moved-from is empty
  auto empty = HostPages::Allocate(0, "nothing");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
}

TEST(HostMemoryTest, SizesBeyondAnyAddressSpaceFailWithoutWrapping) {
  for (size_t n : {SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX - kHugePageBytes}) {
    EXPECT_EQ(AllocateHostPages(n), nullptr) << n;
  }
}

TEST(HostMemoryTest, ImpossibleSizeNamesWhatFailed) {
  auto a = HostPages::Allocate(size_t{1} << 62, "the impossible buffer");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(a.status().message().find("the impossible buffer"), std::string::npos);
}

}  // namespace
}  // namespace tierflow

namespace tierflow {
namespace {

// Locked memory of this process (VmLck), bytes.
uint64_t LockedBytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// pin_memory: Lock page-locks the block (VmLck counts it) until it is freed,
// and a kernel refusal names the buffer and RLIMIT_MEMLOCK.
TEST(HostMemoryTest, LockPageLocksUntilFreedAndRefusalsNameTheLimit) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "The sanitizers intercept mlock as a no-op: page-locking is not observable "
                  "in this build (the release build runs this test)";
#endif
  const uint64_t before = LockedBytes();
  {
    auto pages = HostPages::Allocate(4u << 20, "test state");
    ASSERT_TRUE(pages.ok());
    Status locked = pages->Lock("test state");
    ASSERT_TRUE(locked.ok()) << locked.ToString();
    EXPECT_TRUE(pages->locked());
    EXPECT_GE(LockedBytes(), before + (4u << 20));
    HostPages moved = std::move(*pages);
    EXPECT_TRUE(moved.locked());
    EXPECT_FALSE(pages->locked());
  }
  EXPECT_EQ(LockedBytes(), before);

  // A soft limit below the block: refused, unless the process may lock past
  // limits (CAP_IPC_LOCK, e.g. root), which the kernel then allows.
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &low), 0);
  auto big = HostPages::Allocate(8u << 20, "optimizer state (pin_memory)");
  ASSERT_TRUE(big.ok());
  Status s = big->Lock("optimizer state (pin_memory)");
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &saved), 0);
  if (s.ok()) {
    GTEST_SKIP() << "this process may lock past RLIMIT_MEMLOCK (CAP_IPC_LOCK): the refusal "
                    "path is not reachable here";
  }
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("optimizer state (pin_memory)"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("RLIMIT_MEMLOCK is 64.00 KiB"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("ulimit -l"), std::string::npos);
}

}  // namespace
}  // namespace tierflow
