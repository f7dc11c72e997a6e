// `tierflow tier clean` against what it must leave alone: a symbolic link in
// place of a swap run directory (or of the swap root), and an output
// directory whose run is still going (its lock is held).
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "io/dir_lock.h"
#include "offload/swap_set.h"
#include "tests/tier/tier_test_util.h"
#include "tier/tier_clean.h"

namespace tierflow::tier {
namespace {
namespace fs = std::filesystem;
using tier_test::TempDir;

// A directory shaped like a stale swap set (an unheld lock file and a swap
// file) that is not tierflow's to remove.
void MakeLookalikeSet(const std::string& dir) {
  fs::create_directories(dir);
  std::ofstream(dir + "/lock") << "";
  std::ofstream(dir + "/state-0.swap") << "someone else's data";
}

bool Mentions(const CleanReport& r, const std::string& path, const std::string& words) {
  for (const CleanEntry& e : r.kept) {
    if (e.path == path && e.why.find(words) != std::string::npos) return true;
  }
  return false;
}

// tier clean used to follow a symlinked run directory: it probed the target's
// lock, found it unheld ("stale"), and unlinked the lock and swap files there.
TEST(TierClean, DoesNotFollowSymlinkedRunDirectory) {
  TempDir nvme, elsewhere;
  const std::string target = elsewhere / "victim";
  MakeLookalikeSet(target);
  const std::string root = nvme / offload::kSwapRootName;
  fs::create_directories(root);
  const std::string link = root + "/run-linked";
  fs::create_directory_symlink(target, link);

  for (bool dry_run : {true, false}) {
    auto clean = CleanTier(nvme.path(), dry_run);
    ASSERT_TRUE(clean.ok()) << clean.status().ToString();
    EXPECT_TRUE(clean->removed.empty()) << clean->removed[0].path;
    EXPECT_TRUE(Mentions(*clean, link, "symbolic link")) << "the skip is reported";
  }
  EXPECT_TRUE(fs::exists(target + "/lock"));
  EXPECT_TRUE(fs::exists(target + "/state-0.swap"));
  EXPECT_TRUE(fs::is_symlink(link));
  // Asked directly, removal refuses the link by name.
  Status refused = offload::RemoveSwapSet(nvme.path(), "run-linked");
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("symbolic link"), std::string::npos) << refused.message();
  EXPECT_TRUE(fs::exists(target + "/state-0.swap"));

  // The swap root itself a link: not followed either.
  TempDir nvme2;
  MakeLookalikeSet(elsewhere / "root/run-x");
  fs::create_directory_symlink(elsewhere / "root", nvme2 / offload::kSwapRootName);
  auto clean = CleanTier(nvme2.path(), false);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->removed.empty());
  EXPECT_TRUE(Mentions(*clean, nvme2 / offload::kSwapRootName, "symbolic link"));
  EXPECT_TRUE(fs::exists(elsewhere / "root/run-x/state-0.swap"));
}

// A pid that no process has: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// tier clean removed a live run's files as leftovers (a checkpoint
// temporary named after a pid that is gone, say, after pid reuse); a run's
// output directory is now its own while its lock is held.
TEST(TierClean, SkipsOutputDirectoryWhoseRunHoldsItsLock) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  const std::string leftover =
      out / ("checkpoints/.step-00000006.tmp-" + std::to_string(DeadPid()));
  fs::create_directories(leftover);
  {
    auto held = DirLock::Acquire(out.path(), "tierflow train");
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    for (bool dry_run : {true, false}) {
      auto clean = CleanTier(out.path(), dry_run);
      ASSERT_TRUE(clean.ok()) << clean.status().ToString();
      EXPECT_TRUE(clean->removed.empty());
      EXPECT_TRUE(Mentions(*clean, out.path(), "in use")) << "dry run " << dry_run;
      EXPECT_TRUE(Mentions(*clean, out.path(), "pid " + std::to_string(::getpid())));
    }
    EXPECT_TRUE(fs::exists(leftover));
  }
  auto clean = CleanTier(out.path(), false);  // the run is over
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_FALSE(fs::exists(leftover));
}

// Temporaries of a final-model save cut short by a crash were never
// removed; clean removes them when OUT/model is there, and otherwise keeps
// them (one may be the only copy of the model), saying so.
TEST(TierClean, RemovesFinalModelLeftoversUnlessTheyMayBeTheOnlyCopy) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  ASSERT_TRUE(fs::exists(out / "model"));
  for (const char* name : {".model.tmp-4242", ".model.old-4242"}) {
    fs::create_directories(out / name);
  }
  auto clean = CleanTier(out.path(), false);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_FALSE(fs::exists(out / ".model.tmp-4242"));
  EXPECT_FALSE(fs::exists(out / ".model.old-4242"));

  fs::rename(out / "model", out / ".model.old-4343");  // a crash between the two renames
  clean = CleanTier(out.path(), false);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(fs::exists(out / ".model.old-4343/model.safetensors"));
  EXPECT_TRUE(Mentions(*clean, out / ".model.old-4343", "only copy"));
}

}  // namespace
}  // namespace tierflow::tier
