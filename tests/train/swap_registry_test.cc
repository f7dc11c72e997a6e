// OUT/swap_runs.json is a hint, never an authority (issue 40, finding 2): a
// crafted or copied registry made `train` remove any stale swap set it named,
// anywhere on disk. Now a run removes only the sets whose own owner record
// says a run of its output directory made them.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/swap_set_owner.h"
#include "checkpoint/trainer_state.h"
#include "offload/state_store.h"
#include "offload/swap_set.h"
#include "tests/common/scratch_dir.h"
#include "train/swap_registry.h"
#include "train/trainer.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using testing_common::ReadWholeFile;
using testing_common::ScratchDir;

class Notes : public TrainReporter {
 public:
  void OnNote(const std::string& m) override { notes += m + "\n"; }
  std::string notes;
};

// Stale sets under `dir`, {run id, owner record} each, as crashed runs leave
// them: all made while the others are live (a store is never made beside a
// stale set), then let go of without removing their files.
void MakeStaleSets(const std::string& dir,
                   const std::vector<std::pair<std::string, std::string>>& sets) {
  fs::create_directories(dir);
  std::vector<std::unique_ptr<offload::StateStore>> stores;
  for (const auto& [run_id, owner] : sets) {
    offload::StateStoreOptions o;
    o.directories = {dir};
    o.run_id = run_id;
    o.block_size_bytes = 64 << 10;
    o.io_mode = offload::IoMode::kBuffered;
    o.spare_bytes_per_directory = 64 << 10;
    o.owner = owner;
    auto store = offload::StateStore::Create(o, {{"x", DType::kF32, 4096}});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    stores.push_back(std::move(store).value());
  }
  for (auto& store : stores) ASSERT_TRUE(store->CloseKeepingFiles().ok());
}

TEST(SwapRegistry, CraftedSwapRunsJsonRemovesOnlyWhatThisDirectorysRunsMade) {
  ScratchDir root;
  const std::string out = root / "out", other = root / "other-out";
  const std::string nvme = root / "nvme", elsewhere = root / "elsewhere";
  const std::string store = root / "nvme2/tierflow-checkpoints/ckpt-1";
  fs::create_directories(out);
  fs::create_directories(other);
  MakeStaleSets(nvme, {{"run-mine", OwnerRecordForOutputDir(out)},
                       {"run-mine-params", OwnerRecordForOutputDir(out)}});
  MakeStaleSets(elsewhere, {{"run-theirs", OwnerRecordForOutputDir(other)}, {"run-legacy", ""}});
  // Another run's checkpoint and its kept set.
  MakeStaleSets(store, {{"ckpt-1", ""}});
  const std::string ckpt = other + "/checkpoints/step-00000001";
  fs::create_directories(ckpt);
  nlohmann::json doc = NewTrainerStateDocument(CheckpointState{});
  doc["optimizer_layout"] = "nvme";
  doc["swap_set"] = {{"run_id", "ckpt-1"}, {"directories", {store}}};
  std::ofstream(ckpt + "/trainer_state.json") << SealTrainerState(doc);
  ASSERT_TRUE(WriteMarker(store, "ckpt-1", ckpt).ok());

  std::ofstream(out + "/swap_runs.json")
      << nlohmann::json::array({{{"run_id", "run-mine"}, {"paths", {nvme}}},
                                {{"run_id", "run-theirs"}, {"paths", {elsewhere}}},
                                {{"run_id", "run-legacy"}, {"paths", {elsewhere}}},
                                {{"run_id", "ckpt-1"}, {"paths", {store}}},
                                {{"run_id", "run-rel"}, {"paths", {"relative/nvme"}}}})
             .dump();
  Notes notes;
  ASSERT_TRUE(CleanStaleSwapSets(nullptr, out, {nvme}, "", notes).ok());

  EXPECT_FALSE(fs::exists(offload::RunDirectory(nvme, "run-mine"))) << notes.notes;
  EXPECT_FALSE(fs::exists(offload::RunDirectory(nvme, "run-mine-params"))) << notes.notes;
  EXPECT_TRUE(fs::exists(offload::RunDirectory(elsewhere, "run-theirs")));
  EXPECT_TRUE(fs::exists(offload::RunDirectory(elsewhere, "run-legacy")));
  EXPECT_TRUE(fs::exists(offload::RunDirectory(store, "ckpt-1")));
  EXPECT_TRUE(CheckpointUsesSwapSet(ckpt, "ckpt-1"));
  EXPECT_NE(notes.notes.find("removed stale swap set " + offload::RunDirectory(nvme, "run-mine")),
            std::string::npos)
      << notes.notes;
  EXPECT_NE(notes.notes.find("not of " + out), std::string::npos) << notes.notes;
  EXPECT_NE(notes.notes.find("no owner record"), std::string::npos) << notes.notes;
  EXPECT_NE(notes.notes.find("optimizer state of checkpoint " + ckpt), std::string::npos)
      << notes.notes;
  EXPECT_NE(notes.notes.find("relative/nvme"), std::string::npos) << notes.notes;

  // The kept sets' entries are dropped (no later run here may remove them
  // either); nothing of this run's own is recorded (no run id).
  const nlohmann::json runs = nlohmann::json::parse(ReadWholeFile(out + "/swap_runs.json"));
  EXPECT_TRUE(runs.is_array() && runs.empty()) << runs.dump();
}

}  // namespace
}  // namespace tierflow
