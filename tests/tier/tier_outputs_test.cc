// Where the tier commands write (issue 40): `export` and `migrate` never
// write inside the checkpoint they read, and `export` never through a link.
// Each test is named after the finding it pins and failed on the tree
// before the fix (the checkpoint was overwritten and the command exited 0).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/tier/tier_test_util.h"
#include "tier/tier_export.h"
#include "tier/tier_migrate.h"
#include "tier/tier_scan.h"
#include "train/checkpoint.h"

namespace tierflow::tier {
namespace {
namespace fs = std::filesystem;
using tier_test::Ckpt;
using tier_test::ReadFile;
using tier_test::TempDir;
using tier_test::ToNvme;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The checkpoint's unit files and their bytes.
std::vector<std::pair<std::string, std::string>> OptimizerFiles(const std::string& ckpt) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& e : fs::directory_iterator(ckpt + "/optimizer")) {
    files.emplace_back(e.path().string(), ReadFile(e.path().string()));
  }
  return files;
}

TEST(TierExport, ExportIntoItsOwnCheckpointIsRefused) {
  TempDir out, files;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  const auto before = OptimizerFiles(ckpt);
  ASSERT_FALSE(before.empty());
  fs::create_directory_symlink(ckpt + "/optimizer", files / "into");
  const std::vector<std::string> outs = {
      ckpt + "/optimizer/x.safetensors",  // the finding's
      before[0].first,                    // a unit's own file
      ckpt + "/model/",                   // a directory of it
      ckpt,                               // the checkpoint itself
      files / "into/y.safetensors",       // through a link into it
      ckpt + "/new-dir/z.safetensors",    // a directory not made yet
  };
  for (const std::string& o : outs) {
    auto r = ExportCheckpoint(ckpt, o);
    ASSERT_FALSE(r.ok()) << "exported into its checkpoint: " << o;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), "tier export --out " + o)) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), "the checkpoint " + ckpt)) << r.status().ToString();
  }
  EXPECT_FALSE(fs::exists(ckpt + "/optimizer/x.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt + "/optimizer/y.safetensors"));
  EXPECT_EQ(OptimizerFiles(ckpt), before);
  const CheckpointInfo info = VerifyCheckpoint(ckpt);
  EXPECT_TRUE(info.verified) << info.problem;

  // In the nvme layout the swap set's directory is read as well.
  TempDir nvme;
  ASSERT_TRUE(MigrateCheckpoint(ckpt, ToNvme(nvme.path())).ok());
  auto state = CheckpointOptimizerState::Open(ckpt);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  const std::string swap_dir = (*state)->swap_set().directories.at(0);
  auto r = ExportCheckpoint(ckpt, swap_dir + "/state.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "the checkpoint's swap directory " + swap_dir))
      << r.status().ToString();
  EXPECT_FALSE(fs::exists(swap_dir + "/state.safetensors"));
  EXPECT_TRUE(VerifyCheckpoint(ckpt).verified);
}

TEST(TierExport, ExportOverASymlinkIsRefusedNotReplaced) {
  TempDir out, files;
  tier_test::CopyBaseRun(out.path());
  { std::ofstream(files / "target") << "keep"; }
  fs::create_symlink(files / "target", files / "state.safetensors");
  auto r = ExportCheckpoint(Ckpt(out, 4), files / "state.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), files / "state.safetensors" + " is a symbolic link"))
      << r.status().ToString();
  EXPECT_TRUE(fs::is_symlink(files / "state.safetensors"));
  EXPECT_EQ(ReadFile(files / "target"), "keep");
}

// --nvme-path inside the checkpoint put the new swap set under
// CKPT/optimizer, which the switch then removed with the set in it.
TEST(TierMigrate, MigrateIntoItsOwnCheckpointIsRefused) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  const auto before = OptimizerFiles(ckpt);
  for (const std::string& nvme : {ckpt + "/optimizer", ckpt, ckpt + "/model/sub"}) {
    auto r = MigrateCheckpoint(ckpt, ToNvme(nvme));
    ASSERT_FALSE(r.ok()) << "migrated into its checkpoint: " << nvme;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), "tier migrate --nvme-path " + nvme))
        << r.status().ToString();
    EXPECT_TRUE(CheckpointStoreDirectories(nvme).empty()) << nvme;
  }
  EXPECT_EQ(OptimizerFiles(ckpt), before);
  const CheckpointInfo info = VerifyCheckpoint(ckpt);
  EXPECT_TRUE(info.verified) << info.problem;
}

}  // namespace
}  // namespace tierflow::tier
