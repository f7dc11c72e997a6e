// The ownership rule (checkpoint/swap_set_owner.h): who may remove a stale
// swap set. Issue 40's findings 1 and 2 were removals that skipped it:
// retention removed the set a copied checkpoint named although another
// checkpoint owned it, and a crafted OUT/swap_runs.json made a run remove any
// set it named.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/swap_set_owner.h"
#include "checkpoint/trainer_state.h"
#include "offload/state_store.h"
#include "offload/swap_set.h"
#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {
namespace fs = std::filesystem;
using testing_common::ScratchDir;

// A stale set `run_id` under `dir` (made by a store that then let go of its
// lock, as a crashed run's is), with `owner` as its owner record.
void MakeStaleSet(const std::string& dir, const std::string& run_id, const std::string& owner) {
  offload::StateStoreOptions o;
  o.directories = {dir};
  o.run_id = run_id;
  o.block_size_bytes = 64 << 10;
  o.io_mode = offload::IoMode::kBuffered;
  o.spare_bytes_per_directory = 64 << 10;
  o.owner = owner;
  auto store = offload::StateStore::Create(o, {{"x", DType::kF32, 4096}});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->CloseKeepingFiles().ok());
}

offload::SwapSetInfo Listed(const std::string& dir, const std::string& run_id) {
  auto sets = offload::ListSwapSets(dir);
  EXPECT_TRUE(sets.ok());
  for (const auto& s : *sets) {
    if (s.run_id == run_id) return s;
  }
  ADD_FAILURE() << "no set " << run_id << " under " << dir;
  return {};
}

SwapSetVerdict Judge(const std::string& dir, const std::string& run_id, SwapSetRemover::Kind kind,
                     const std::string& path) {
  return JudgeSwapSetRemoval(dir, Listed(dir, run_id), SwapSetRemover{kind, path});
}

// A minimal nvme-layout trainer_state.json naming the set `run_id` in `dir`.
void WriteNvmeCheckpoint(const std::string& ckpt, const std::string& dir,
                         const std::string& run_id) {
  fs::create_directories(ckpt);
  CheckpointState s;
  s.step = 1;
  nlohmann::json doc = NewTrainerStateDocument(s);
  doc["optimizer_layout"] = "nvme";
  doc["swap_set"] = {{"run_id", run_id}, {"directories", {dir}}};
  doc["units"] = nlohmann::json::array();
  doc["files"] = nlohmann::json::array();
  std::ofstream(ckpt + "/trainer_state.json") << SealTrainerState(doc);
}

// The training run's set belongs to the output directory that made it: the
// directory itself (also after a move within its file system), never a copy
// of it or another directory.
TEST(SwapSetOwner, AnOutputDirectoryOwnsOnlyTheSetsItsRunsMade) {
  ScratchDir root;
  const std::string nvme = root / "nvme", out = root / "out";
  fs::create_directories(nvme);
  fs::create_directories(out);
  MakeStaleSet(nvme, "run-a", OwnerRecordForOutputDir(out));

  const auto kind = SwapSetRemover::Kind::kOutputDir;
  EXPECT_TRUE(Judge(nvme, "run-a", kind, out).remove);
  // Another directory, and a copy of OUT (cp -r: another inode) with its
  // swap_runs.json and all, do not own it.
  fs::create_directories(root / "other");
  const SwapSetVerdict other = Judge(nvme, "run-a", kind, root / "other");
  EXPECT_FALSE(other.remove);
  EXPECT_NE(other.why.find("not of " + root / "other"), std::string::npos) << other.why;
  fs::copy(out, root / "copy", fs::copy_options::recursive);
  EXPECT_FALSE(Judge(nvme, "run-a", kind, root / "copy").remove);
  // OUT moved: still the directory that made it.
  fs::rename(out, root / "moved");
  EXPECT_TRUE(Judge(nvme, "run-a", kind, root / "moved").remove);
}

// A set without an owner record (an older tierflow's, or a creation cut
// short) is not a run's to remove; a person running tier clean may.
TEST(SwapSetOwner, ASetWithoutAnOwnerRecordIsLeftToTierClean) {
  ScratchDir root;
  const std::string nvme = root / "nvme";
  fs::create_directories(nvme);
  fs::create_directories(root / "out");
  MakeStaleSet(nvme, "run-old", "");
  const SwapSetVerdict run = Judge(nvme, "run-old", SwapSetRemover::Kind::kOutputDir, root / "out");
  EXPECT_FALSE(run.remove);
  EXPECT_NE(run.why.find("no owner record"), std::string::npos) << run.why;
  EXPECT_NE(run.why.find("tierflow tier clean " + nvme), std::string::npos) << run.why;
  EXPECT_TRUE(Judge(nvme, "run-old", SwapSetRemover::Kind::kUser, "").remove);

  // A malformed or oversized record is no record.
  std::ofstream(offload::RunDirectory(nvme, "run-old") + "/owner") << "{\"out_dir\": 7";
  EXPECT_FALSE(Judge(nvme, "run-old", SwapSetRemover::Kind::kOutputDir, root / "out").remove);
}

// A checkpoint's kept set belongs to the checkpoint its marker names: a copy
// of that checkpoint (finding 1) does not own it, and while the owner still
// uses it nobody removes it.
TEST(SwapSetOwner, OnlyTheCheckpointItsMarkerNamesRetiresACheckpointSet) {
  ScratchDir root;
  const std::string store = root / "nvme/tierflow-checkpoints/ckpt-1";
  const std::string owner = root / "out1/checkpoints/step-00000002";
  const std::string copy = root / "out2/checkpoints/step-00000002";
  fs::create_directories(store);
  MakeStaleSet(store, "ckpt-1", "");
  WriteNvmeCheckpoint(owner, store, "ckpt-1");
  ASSERT_TRUE(WriteMarker(store, "ckpt-1", owner).ok());
  fs::create_directories(root / "out2/checkpoints");
  fs::copy(owner, copy, fs::copy_options::recursive);

  const auto kind = SwapSetRemover::Kind::kCheckpoint;
  // While the owner uses it, nobody removes it, a person included.
  for (const std::string& who : {owner, copy}) {
    const SwapSetVerdict v = Judge(store, "ckpt-1", kind, who);
    EXPECT_FALSE(v.remove) << who;
    EXPECT_NE(v.why.find("optimizer state of checkpoint " + owner), std::string::npos) << v.why;
  }
  EXPECT_FALSE(Judge(store, "ckpt-1", SwapSetRemover::Kind::kUser, "").remove);

  // The owner gone (retired: its trainer_state.json first), the copy still
  // may not remove it: it is not what the marker names.
  fs::remove(owner + "/trainer_state.json");
  const SwapSetVerdict by_copy = Judge(store, "ckpt-1", kind, copy);
  EXPECT_FALSE(by_copy.remove);
  EXPECT_NE(by_copy.why.find("belongs to checkpoint " + owner), std::string::npos) << by_copy.why;
  EXPECT_TRUE(Judge(store, "ckpt-1", kind, owner).remove);

  // Removal through the rule takes the set, its marker and the store directory.
  auto removed = RemoveSwapSetIfAllowed(store, "ckpt-1", SwapSetRemover{kind, owner});
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_TRUE(removed->remove);
  EXPECT_FALSE(fs::exists(store));
}

// Markers written before identities hold the checkpoint's path alone: they
// are matched by path.
TEST(SwapSetOwner, AMarkerFromBeforeIdentitiesMatchesByPath) {
  ScratchDir root;
  const std::string store = root / "store";
  const std::string ckpt = root / "out/checkpoints/step-00000001";
  fs::create_directories(store);
  fs::create_directories(ckpt);
  MakeStaleSet(store, "ckpt-2", "");
  std::ofstream(MarkerPath(store, "ckpt-2")) << ckpt << "\n";
  auto marker = ReadMarker(store, "ckpt-2");
  ASSERT_TRUE(marker.has_value());
  EXPECT_EQ(marker->checkpoint, ckpt);
  EXPECT_FALSE(marker->identity.has_value());
  EXPECT_TRUE(Judge(store, "ckpt-2", SwapSetRemover::Kind::kCheckpoint, ckpt).remove);
  EXPECT_FALSE(
      Judge(store, "ckpt-2", SwapSetRemover::Kind::kCheckpoint, root / "elsewhere").remove);
}

// A training run's set is never taken for a checkpoint's, nor the reverse.
TEST(SwapSetOwner, ARunDoesNotRemoveACheckpointSetAndACheckpointNotARunSet) {
  ScratchDir root;
  const std::string nvme = root / "nvme", out = root / "out";
  fs::create_directories(nvme);
  fs::create_directories(out);
  MakeStaleSet(nvme, "ckpt-3", OwnerRecordForOutputDir(out));
  ASSERT_TRUE(WriteMarker(nvme, "ckpt-3", root / "gone").ok());
  EXPECT_FALSE(Judge(nvme, "ckpt-3", SwapSetRemover::Kind::kOutputDir, out).remove);
  // (In a directory of its own: a store is never made beside a stale set.)
  const std::string nvme2 = root / "nvme2";
  fs::create_directories(nvme2);
  MakeStaleSet(nvme2, "run-b", OwnerRecordForOutputDir(out));
  EXPECT_TRUE(Judge(nvme2, "run-b", SwapSetRemover::Kind::kOutputDir, out).remove);
  EXPECT_FALSE(Judge(nvme2, "run-b", SwapSetRemover::Kind::kCheckpoint, out).remove);
}

TEST(SwapSetOwner, ALiveSetIsKeptWhoeverAsks) {
  ScratchDir root;
  const std::string nvme = root / "nvme", out = root / "out";
  fs::create_directories(nvme);
  fs::create_directories(out);
  offload::StateStoreOptions o;
  o.directories = {nvme};
  o.run_id = "run-live";
  o.block_size_bytes = 64 << 10;
  o.io_mode = offload::IoMode::kBuffered;
  o.spare_bytes_per_directory = 64 << 10;
  o.owner = OwnerRecordForOutputDir(out);
  auto store = offload::StateStore::Create(o, {{"x", DType::kF32, 4096}});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  for (auto kind : {SwapSetRemover::Kind::kOutputDir, SwapSetRemover::Kind::kUser}) {
    const SwapSetVerdict v = Judge(nvme, "run-live", kind, out);
    EXPECT_FALSE(v.remove);
    EXPECT_NE(v.why.find("live"), std::string::npos) << v.why;
  }
  ASSERT_TRUE((*store)->Close().ok());
  EXPECT_FALSE(fs::exists(offload::RunDirectory(nvme, "run-live")));  // the owner file went too
}

}  // namespace
}  // namespace tierflow
