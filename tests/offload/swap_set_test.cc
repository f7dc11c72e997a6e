// Swap sets on disk: live vs stale by flock, the stale-set error and its
// advice, cleaning that spares live runs, and the O_DIRECT capability check.
#include "offload/swap_set.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "tests/offload/offload_test_util.h"

namespace tierflow::offload {
namespace {

namespace fs = std::filesystem;
using testing_util::ScratchDir;

// Makes DIR/tierflow-swap/RUN with a swap file; returns its lock (held = live).
RunLock MakeSet(const std::string& dir, const std::string& run) {
  fs::create_directories(RunDirectory(dir, run));
  std::ofstream(SwapFilePath(dir, run, 0)) << "data";
  StatusOr<RunLock> lock = RunLock::Acquire(RunDirectory(dir, run));
  EXPECT_TRUE(lock.ok()) << lock.status().ToString();
  return std::move(lock).value();
}

TEST(SwapSet, NamesFollowTheLayout) {
  EXPECT_EQ(RunDirectory("/nvme0", "run-1"), "/nvme0/tierflow-swap/run-1");
  EXPECT_EQ(SwapFilePath("/nvme0", "run-1", 2), "/nvme0/tierflow-swap/run-1/state-2.swap");
  EXPECT_TRUE(ValidateRunId(MakeRunId()).ok());
  EXPECT_NE(MakeRunId(), MakeRunId());
  for (const char* bad : {"", ".", "..", "a/b", "x y", "run*"}) {
    EXPECT_EQ(ValidateRunId(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SwapSet, EmptyDirectoryHasNoSets) {
  ScratchDir dir;
  StatusOr<std::vector<SwapSetInfo>> sets = ListSwapSets(dir.path());
  ASSERT_TRUE(sets.ok());
  EXPECT_TRUE(sets->empty());
  EXPECT_TRUE(CheckNoStaleSwapSets(dir.path()).ok());
}

TEST(SwapSet, HeldLockIsLiveReleasedLockIsStale) {
  ScratchDir dir;
  RunLock live = MakeSet(dir.path(), "run-live");
  RunLock crashed = MakeSet(dir.path(), "run-crashed");
  crashed.Release();  // what a crash does: the kernel drops the flock
  StatusOr<std::vector<SwapSetInfo>> sets = ListSwapSets(dir.path());
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 2u);
  for (const SwapSetInfo& s : *sets) {
    EXPECT_EQ(s.state, s.run_id == "run-live" ? SwapSetState::kLive : SwapSetState::kStale)
        << s.run_id;
    EXPECT_EQ(s.num_files, 1u);
  }
  // A second lock on a live set fails.
  StatusOr<RunLock> again = RunLock::Acquire(RunDirectory(dir.path(), "run-live"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
}

TEST(SwapSet, StaleSetIsReportedWithHowToCleanIt) {
  ScratchDir dir;
  MakeSet(dir.path(), "run-crashed").Release();
  Status s = CheckNoStaleSwapSets(dir.path());
  ASSERT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(RunDirectory(dir.path(), "run-crashed")), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("tierflow tier clean " + dir.path()), std::string::npos)
      << s.message();
}

// Data-parallel ranks create their sets in one directory at once: a set
// caught between its mkdir and its lock (no lock file yet, or an unheld one,
// and no swap file) must not stop another rank's start. tier clean still
// sees it as stale.
TEST(SwapSet, ASetWithoutSwapFilesDoesNotStopAStart) {
  ScratchDir dir;
  ASSERT_TRUE(fs::create_directories(RunDirectory(dir.path(), "run-mkdir-only")));
  ASSERT_TRUE(fs::create_directories(RunDirectory(dir.path(), "run-lock-file-only")));
  { std::ofstream(fs::path(RunDirectory(dir.path(), "run-lock-file-only")) / "lock"); }
  EXPECT_TRUE(CheckNoStaleSwapSets(dir.path()).ok());
  StatusOr<std::vector<SwapSetInfo>> sets = ListSwapSets(dir.path());
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 2u);
  for (const SwapSetInfo& s : *sets) EXPECT_EQ(s.state, SwapSetState::kStale) << s.run_id;
  // Its creator then takes the lock, even while a probe holds it a moment.
  const std::string run_dir = RunDirectory(dir.path(), "run-lock-file-only");
  int probe = open((fs::path(run_dir) / "lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  ASSERT_EQ(flock(probe, LOCK_EX | LOCK_NB), 0);
  std::thread release([probe] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    close(probe);
  });
  StatusOr<RunLock> lock = RunLock::Acquire(run_dir, /*fresh=*/true);
  release.join();
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  // A stale set with a swap file still stops it.
  MakeSet(dir.path(), "run-crashed").Release();
  EXPECT_EQ(CheckNoStaleSwapSets(dir.path()).code(), StatusCode::kFailedPrecondition);
}

TEST(SwapSet, CleaningRemovesStaleSetsAndSparesLiveOnes) {
  ScratchDir dir;
  RunLock live = MakeSet(dir.path(), "run-live");
  MakeSet(dir.path(), "run-a").Release();
  MakeSet(dir.path(), "run-b").Release();
  EXPECT_EQ(RemoveSwapSet(dir.path(), "run-live").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(RemoveSwapSet(dir.path(), "run-none").code(), StatusCode::kNotFound);
  StatusOr<uint32_t> removed = RemoveStaleSwapSets(dir.path());
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 2u);
  EXPECT_FALSE(fs::exists(RunDirectory(dir.path(), "run-a")));
  EXPECT_TRUE(fs::exists(SwapFilePath(dir.path(), "run-live", 0)));
  EXPECT_TRUE(CheckNoStaleSwapSets(dir.path()).ok());
  live.Release();
  ASSERT_TRUE(RemoveSwapSet(dir.path(), "run-live").ok());
  EXPECT_FALSE(fs::exists(fs::path(dir.path()) / kSwapRootName));  // empty root removed too
}

TEST(SwapSet, DirectOpenOnTmpfsIsUnavailableWithTheBufferedHint) {
  struct statfs sfs {};
  if (statfs("/dev/shm", &sfs) != 0 || sfs.f_type != TMPFS_MAGIC)
    TIERFLOW_SKIP_WITHOUT("tmpfs") << "/dev/shm is not tmpfs here";
  ScratchDir dir("/dev/shm");
  std::string path = dir.path() + "/state-0.swap";
  StatusOr<int> fd = OpenSwapFile(path, IoMode::kDirect, /*create=*/true);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(fd.status().message().find("does not support O_DIRECT"), std::string::npos);
  EXPECT_NE(fd.status().message().find("--nvme-buffered"), std::string::npos);
  EXPECT_NE(fd.status().message().find(path), std::string::npos);
  EXPECT_FALSE(fs::exists(path)) << "a refused open must not leave a file";
  // Buffered mode, chosen explicitly, works there.
  StatusOr<int> buffered = OpenSwapFile(path, IoMode::kBuffered, /*create=*/true);
  ASSERT_TRUE(buffered.ok()) << buffered.status().ToString();
  close(*buffered);
}

TEST(SwapSet, DirectOpenOnDiskWorksAndCreateIsExclusive) {
  ScratchDir dir;
  std::string path = dir.path() + "/state-0.swap";
  StatusOr<int> fd = OpenSwapFile(path, IoMode::kDirect, /*create=*/true);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  EXPECT_NE(fcntl(*fd, F_GETFL) & O_DIRECT, 0);
  close(*fd);
  StatusOr<int> again = OpenSwapFile(path, IoMode::kDirect, /*create=*/true);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find(path), std::string::npos);
  StatusOr<int> missing =
      OpenSwapFile(dir.path() + "/nope.swap", IoMode::kDirect, /*create=*/false);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.swap"), std::string::npos);
}

}  // namespace
}  // namespace tierflow::offload
