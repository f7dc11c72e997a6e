// Retention and resume around an nvme-layout checkpoint whose NVMe directory
// is missing for a while (a drive not mounted): it is kept and reported, and
// --resume does not silently go back past it.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/tier/tier_test_util.h"
#include "tier/tier_migrate.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tierflow::tier {
namespace {
namespace fs = std::filesystem;
using tier_test::Ckpt;
using tier_test::TempDir;

class Notes : public TrainReporter {
 public:
  void OnNote(const std::string& m) override { notes += m + "\n"; }
  std::string notes;
};

// Retention used to delete every older checkpoint that failed verification,
// whatever the reason: with its NVMe directory missing, the newest
// checkpoint was destroyed by the next saves, orphaning its swap set.
TEST(Checkpoint, RetentionKeepsCheckpointWithMissingNvmeDirectory) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());  // checkpoints at steps 2 and 4
  const std::string newest = Ckpt(out, 4);
  MigrateOptions to_nvme;
  to_nvme.to = OffloadPlacement::kNvme;
  to_nvme.nvme_paths = {nvme.path()};
  to_nvme.block_size_bytes = 64 << 10;
  auto migrated = MigrateCheckpoint(newest, to_nvme);
  ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
  ASSERT_TRUE(VerifyCheckpoint(newest).verified);

  const std::string away = nvme.path() + "-unmounted";
  fs::rename(nvme.path(), away);
  CheckpointInfo info = VerifyCheckpoint(newest);
  EXPECT_FALSE(info.verified);
  EXPECT_TRUE(info.environmental()) << StatusCodeName(info.problem_code) << ": " << info.problem;

  // --resume stops at it instead of going back to step 2.
  Notes refused;
  TrainConfig c = tier_test::SmallRun(out.path(), 7);
  c.resume = true;
  auto r = RunTraining(c, refused);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(newest), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("kept"), std::string::npos) << r.status().message();

  // Going on from step 2 explicitly: saves at 3, 6 and 7, whose retention
  // removes superseded verified checkpoints but keeps step 4, saying so.
  Notes notes;
  c.resume = false;
  c.resume_from = Ckpt(out, 2);
  c.checkpoint_every = 3;
  r = RunTraining(c, notes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(fs::exists(newest + "/trainer_state.json"));
  EXPECT_NE(notes.notes.find("kept checkpoint " + newest), std::string::npos) << notes.notes;
  EXPECT_FALSE(fs::exists(Ckpt(out, 2))) << "superseded: two newer verified checkpoints";
  EXPECT_FALSE(fs::exists(Ckpt(out, 3)));

  // The drive comes back: the checkpoint and its swap set are whole.
  fs::rename(away, nvme.path());
  CheckpointInfo back = VerifyCheckpoint(newest);
  EXPECT_TRUE(back.verified) << back.problem;
}

// Issue 40, finding 1's sibling: moving a copied checkpoint's state back to
// the host removed the swap set it read, which the original checkpoint owns.
TEST(Checkpoint, MigratingACopyBackToTheHostKeepsTheOwnersSwapSet) {
  TempDir out1, out2, nvme;
  tier_test::CopyBaseRun(out1.path());
  const std::string original = Ckpt(out1, 4);
  auto migrated = MigrateCheckpoint(original, tier_test::ToNvme(nvme.path()));
  ASSERT_TRUE(migrated.ok()) << migrated.status().ToString();
  const std::string copy = Ckpt(out2, 4);
  fs::create_directories(out2 / "checkpoints");
  fs::copy(original, copy, fs::copy_options::recursive);

  auto back = MigrateCheckpoint(copy, tier_test::ToHost());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  std::string notes;
  for (const std::string& n : back->notes) notes += n + "\n";
  EXPECT_NE(notes.find("optimizer state of checkpoint " + original), std::string::npos) << notes;
  EXPECT_TRUE(VerifyCheckpoint(copy).verified) << VerifyCheckpoint(copy).problem;
  const CheckpointInfo owner = VerifyCheckpoint(original);
  EXPECT_TRUE(owner.verified) << owner.problem;

  // The owner moving back removes its own set.
  auto owner_back = MigrateCheckpoint(original, tier_test::ToHost());
  ASSERT_TRUE(owner_back.ok()) << owner_back.status().ToString();
  EXPECT_TRUE(owner_back->notes.empty()) << owner_back->notes[0];
  EXPECT_TRUE(fs::is_empty(nvme / "tierflow-checkpoints"));
}

}  // namespace
}  // namespace tierflow::tier
