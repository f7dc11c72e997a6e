// DirLock: one holder at a time, the refusal names the directory and the
// holder, a lock file left by a dead holder is taken again, and a symlinked
// lock file is refused rather than followed.
#include "io/dir_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using testing_common::ScratchDir;

TEST(DirLock, SecondHolderIsRefusedNamingDirectoryAndPid) {
  ScratchDir dir;
  auto first = DirLock::Acquire(dir.path(), "tierflow train");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Another open description, as another process would have: refused.
  auto second = DirLock::Acquire(dir.path(), "tierflow train");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  const std::string msg = second.status().message();
  EXPECT_NE(msg.find(dir.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(::getpid())), std::string::npos) << msg;
  EXPECT_NE(msg.find("tierflow train"), std::string::npos) << msg;
  EXPECT_EQ(DirLock::CheckNotHeld(dir.path()).code(), StatusCode::kFailedPrecondition);

  first->Release();
  EXPECT_TRUE(DirLock::CheckNotHeld(dir.path()).ok());
  EXPECT_TRUE(DirLock::Acquire(dir.path(), "tierflow train").ok());
}

TEST(DirLock, LockOfAKilledHolderIsTakenAgain) {
  ScratchDir dir;
  const pid_t child = ::fork();
  if (child == 0) {
    auto held = DirLock::Acquire(dir.path(), "child");
    ::_exit(held.ok() ? 0 : 1);  // exits holding it: the kernel drops the flock
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(dir.File(DirLock::kFileName)));
  auto again = DirLock::Acquire(dir.path(), "tierflow train");
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST(DirLock, NoLockFileIsNotHeldAndCheckingCreatesNothing) {
  ScratchDir dir;
  EXPECT_TRUE(DirLock::CheckNotHeld(dir.path()).ok());
  EXPECT_FALSE(fs::exists(dir.File(DirLock::kFileName)));
}

TEST(DirLock, SymlinkedLockFileIsRefusedNotFollowed) {
  ScratchDir dir, elsewhere;
  const std::string target = elsewhere.File("not-a-lock");
  std::ofstream(target) << "keep me";
  fs::create_symlink(target, dir.File(DirLock::kFileName));
  auto lock = DirLock::Acquire(dir.path(), "tierflow train");
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("symbolic link"), std::string::npos)
      << lock.status().ToString();
  EXPECT_EQ(testing_common::ReadWholeFile(target), "keep me");
}

// The holder's line was written in place: through a hard link it
// overwrote the other file (issue 40).
TEST(DirLock, LockHardLinkIsNotOverwritten) {
  ScratchDir dir, elsewhere;
  const std::string other = elsewhere.File("precious");
  std::ofstream(other) << "keep me";
  ASSERT_EQ(::link(other.c_str(), dir.File(DirLock::kFileName).c_str()), 0);
  auto lock = DirLock::Acquire(dir.path(), "tierflow train");
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), StatusCode::kFailedPrecondition) << lock.status().ToString();
  EXPECT_NE(lock.status().message().find(dir.File(DirLock::kFileName) + " has 2 hard links"),
            std::string::npos)
      << lock.status().ToString();
  EXPECT_EQ(testing_common::ReadWholeFile(other), "keep me");
}

}  // namespace
}  // namespace tierflow
