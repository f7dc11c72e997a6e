// `tierflow tier` on state written by `tierflow train` (tiny-llama on the
// CPU device): ls, verify (with corruption in a safetensors file and in a
// swap file), migrate both ways, resume after a migration bit-exact,
// interrupted migrations at every step, clean (live, stale and
// checkpoint-referenced sets), and export from either layout.
#include <filesystem>
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/safetensors_reader.h"
#include "offload/aligned_buffer.h"
#include "offload/state_store.h"
#include "offload/swap_reader.h"
#include "offload/swap_set.h"
#include "tests/tier/tier_test_util.h"
#include "tier/tier_clean.h"
#include "tier/tier_export.h"
#include "tier/tier_json.h"
#include "tier/tier_ls.h"
#include "tier/tier_migrate.h"
#include "tier/tier_scan.h"
#include "tier/tier_verify.h"
#include "train/checkpoint.h"

namespace tierflow::tier {
namespace {
namespace fs = std::filesystem;
using tier_test::Ckpt;
using tier_test::TempDir;
using tier_test::ToHost;
using tier_test::ToNvme;

// Every unit's three arrays, as bytes, by "<unit>/<array>".
std::map<std::string, std::string> StateBytes(const std::string& ckpt) {
  std::map<std::string, std::string> out;
  auto s = CheckpointOptimizerState::Open(ckpt);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return out;
  for (size_t u = 0; u < (*s)->units().size(); ++u) {
    const auto& unit = (*s)->units()[u];
    std::vector<float> a(unit.num_params), b(unit.num_params), c(unit.num_params);
    EXPECT_TRUE((*s)->ReadUnit(u, a.data(), b.data(), c.data()).ok());
    out[unit.name.str() + "/master"] = std::string(reinterpret_cast<char*>(a.data()), a.size() * 4);
    out[unit.name.str() + "/exp_avg"] =
        std::string(reinterpret_cast<char*>(b.data()), b.size() * 4);
    out[unit.name.str() + "/exp_avg_sq"] =
        std::string(reinterpret_cast<char*>(c.data()), c.size() * 4);
  }
  return out;
}

TEST(TierLs, ListsCheckpointsAndModelOfATrainingRun) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  auto l = ListTier(out.path(), /*verify=*/true);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->kind, PathKind::kOutputDir);
  ASSERT_EQ(l->checkpoints.size(), 2u);
  EXPECT_EQ(l->checkpoints[0].step, 4);
  EXPECT_EQ(l->checkpoints[1].step, 2);
  for (const auto& c : l->checkpoints) {
    EXPECT_TRUE(c.info.verified) << c.info.problem;
    EXPECT_EQ(c.layout, OffloadPlacement::kHost);
    EXPECT_GT(c.num_units, 1u);
    EXPECT_GT(c.num_bytes, 0u);
  }
  EXPECT_EQ(l->final_model_dir, out / "model");
  EXPECT_GT(l->final_model_bytes, 0u);
}

TEST(TierLs, JsonCarriesWhatTheListingHolds) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  for (bool verify : {false, true}) {
    auto l = ListTier(out.path(), verify);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    const nlohmann::json j = TierListingToJson(*l, verify);
    EXPECT_EQ(j.at("path_kind"), "output_dir");
    ASSERT_EQ(j.at("checkpoints").size(), l->checkpoints.size());
    for (size_t i = 0; i < l->checkpoints.size(); ++i) {
      const auto& c = l->checkpoints[i];
      const nlohmann::json& jc = j.at("checkpoints")[i];
      EXPECT_EQ(jc.at("path"), c.info.path);
      EXPECT_EQ(jc.at("step"), c.step);
      ASSERT_TRUE(c.layout.has_value());
      EXPECT_EQ(jc.at("layout"), std::string(OffloadPlacementName(*c.layout)));
      EXPECT_EQ(jc.at("bytes"), c.num_bytes);
      EXPECT_EQ(jc.at("units"), c.num_units);
      EXPECT_EQ(jc.at("complete"), true);
      if (verify) {
        EXPECT_EQ(jc.at("verified"), true);
      } else {
        EXPECT_TRUE(jc.at("verified").is_null()) << "not verified is not 'verified: false'";
      }
    }
    EXPECT_EQ(j.at("final_model").at("path"), l->final_model_dir);
    EXPECT_EQ(j.at("final_model").at("bytes"), l->final_model_bytes);
  }
}

TEST(TierVerify, CorruptSafetensorsNamesFileTensorAndBytes) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  auto ok = VerifyTierPath(out.path());
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->ok());
  EXPECT_EQ(ok->items.size(), 2u);
  // Flip a byte inside the exp_avg tensor of one unit's file.
  std::string victim;
  for (const auto& e : fs::directory_iterator(Ckpt(out, 4) + "/optimizer")) victim = e.path();
  auto reader = SafetensorsReader::Open(victim);
  ASSERT_TRUE(reader.ok());
  const auto* t = (*reader)->Find("exp_avg");
  ASSERT_NE(t, nullptr);
  const uint64_t begin = (*reader)->header().data_offset_bytes() + t->begin_bytes;
  const uint64_t end = (*reader)->header().data_offset_bytes() + t->end_bytes;
  tier_test::FlipByte(victim, begin + 5);
  auto bad = VerifyTierPath(out.path());
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->ok());
  int corrupt = 0;
  for (const auto& item : bad->items) {
    if (item.ok) continue;
    ++corrupt;
    EXPECT_EQ(item.path, Ckpt(out, 4));
    ASSERT_EQ(item.problems.size(), 1u);
    const std::string& p = item.problems[0];
    EXPECT_NE(p.find(victim), std::string::npos) << p;
    EXPECT_NE(p.find("tensor 'exp_avg' bytes [" + std::to_string(begin) + ", " +
                     std::to_string(end) + ")"),
              std::string::npos)
        << p;
  }
  EXPECT_EQ(corrupt, 1);
  const nlohmann::json j = VerifyReportToJson(*bad);
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_EQ(j.at("checked"), bad->items.size());
  EXPECT_EQ(j.at("corrupt"), 1);
  int listed_corrupt = 0;
  for (const auto& item : j.at("items")) {
    if (item.at("ok") == true) continue;
    ++listed_corrupt;
    ASSERT_EQ(item.at("problems").size(), 1u);
    EXPECT_NE(item.at("problems")[0].get<std::string>().find(victim), std::string::npos);
  }
  EXPECT_EQ(listed_corrupt, 1);
  EXPECT_EQ(VerifyReportToJson(*ok).at("ok"), true);
}

TEST(TierMigrate, RoundTripKeepsStateAndVerifies) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  const auto before = StateBytes(ckpt);
  std::map<std::string, std::string> files_before;
  for (const auto& e : fs::directory_iterator(ckpt + "/optimizer"))
    files_before[e.path()] = tier_test::ReadFile(e.path());

  auto r = MigrateCheckpoint(ckpt, ToNvme(nvme.path()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->to, OffloadPlacement::kNvme);
  EXPECT_FALSE(fs::exists(ckpt + "/optimizer"));
  CheckpointInfo info = VerifyCheckpoint(ckpt);
  EXPECT_TRUE(info.verified) << info.problem;
  EXPECT_EQ(info.layout, OffloadPlacement::kNvme);
  EXPECT_EQ(StateBytes(ckpt), before);
  // ls shows the checkpoint in the nvme layout and its set as in use.
  auto l = ListTier(out.path(), false);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->checkpoints[0].layout, OffloadPlacement::kNvme);
  ASSERT_EQ(l->swap_sets.size(), 1u);
  EXPECT_TRUE(l->swap_sets[0].checkpoint_uses_it);
  EXPECT_EQ(l->swap_sets[0].tensors.size(), 3 * l->checkpoints[0].num_units);
  EXPECT_TRUE(VerifyTierPath(out.path())->ok());
  // Verifying a swap directory alone checks the set's blocks.
  auto sv = VerifyTierPath(nvme.path());
  ASSERT_TRUE(sv.ok()) << sv.status().ToString();
  EXPECT_TRUE(sv->ok());
  EXPECT_FALSE(sv->items.empty());

  auto back = MigrateCheckpoint(ckpt, ToHost());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  info = VerifyCheckpoint(ckpt);
  EXPECT_TRUE(info.verified) << info.problem;
  EXPECT_EQ(info.layout, OffloadPlacement::kHost);
  EXPECT_EQ(StateBytes(ckpt), before);
  for (const auto& [path, bytes] : files_before)
    EXPECT_EQ(tier_test::ReadFile(path), bytes) << path;
  EXPECT_TRUE(CheckpointStoreDirectories(nvme.path()).empty());
  // Already there: a note, nothing moved.
  auto again = MigrateCheckpoint(ckpt, ToHost());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state_bytes, 0u);
}

TEST(TierMigrate, ResumeFromMigratedCheckpointIsBitExact) {
  TempDir plain, migrated, nvme;
  tier_test::CopyBaseRun(plain.path());
  tier_test::CopyBaseRun(migrated.path());
  // Two checkpoints into the same directory, which the resumed run then uses for its own swap set.
  ASSERT_TRUE(MigrateCheckpoint(Ckpt(migrated, 2), ToNvme(nvme.path())).ok());
  auto m = MigrateCheckpoint(Ckpt(migrated, 4), ToNvme(nvme.path()));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(CheckpointStoreDirectories(nvme.path()).size(), 2u);
  TrainReporter quiet;
  for (const TempDir* d : {&plain, &migrated}) {
    TrainConfig c = tier_test::SmallRun(d->path(), 6);
    c.resume = true;
    c.nvme_paths = {nvme.path()};
    auto r = RunTraining(c, quiet);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_EQ(tier_test::ReadFile(plain / "model/model.safetensors"),
            tier_test::ReadFile(migrated / "model/model.safetensors"));
  EXPECT_EQ(StateBytes(Ckpt(plain, 6)), StateBytes(Ckpt(migrated, 6)));
  // Retention retired step 2 and its swap set with it; step 4's stays.
  EXPECT_FALSE(fs::exists(Ckpt(migrated, 2)));
  EXPECT_EQ(CheckpointStoreDirectories(nvme.path()).size(), 1u);
  EXPECT_TRUE(VerifyCheckpoint(Ckpt(migrated, 4)).verified);
}

TEST(TierVerify, CorruptSwapBlockNamesFileTensorAndBytes) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  auto r = MigrateCheckpoint(ckpt, ToNvme(nvme.path()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string file =
      offload::SwapFilePath(CheckpointStoreDirectory(nvme.path(), r->run_id), r->run_id, 0);
  auto view = offload::SwapFileView::Open(file);
  ASSERT_TRUE(view.ok());
  const auto& h = (*view)->header();
  const auto& t = h.tensors[4];  // the second unit's exp_avg
  const uint64_t offset =
      h.data_offset_bytes +
      uint64_t{(*view)->table().physical[t.first_local_block]} * h.block_size_bytes;
  tier_test::FlipByte(file, offset + 3);
  CheckpointInfo info = VerifyCheckpoint(ckpt);
  EXPECT_FALSE(info.verified);
  EXPECT_NE(info.problem.find(file), std::string::npos) << info.problem;
  EXPECT_NE(info.problem.find("tensor '" + t.name + "' bytes [0, "), std::string::npos)
      << info.problem;
  auto report = VerifyTierPath(out.path());
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->ok());
  EXPECT_FALSE(MigrateCheckpoint(ckpt, ToHost()).ok());  // never migrates a corrupt checkpoint
  // --resume does not fall back past it on its own; named, the step-2
  // checkpoint is taken and step 4 is written anew.
  TrainConfig c = tier_test::SmallRun(out.path(), 4);
  c.resume = true;
  TrainReporter quiet;
  EXPECT_EQ(RunTraining(c, quiet).status().code(), StatusCode::kFailedPrecondition);
  c.resume = false;
  c.resume_from = Ckpt(out, 2);
  ASSERT_TRUE(RunTraining(c, quiet).ok());
  info = VerifyCheckpoint(ckpt);
  EXPECT_TRUE(info.verified) << info.problem;
  EXPECT_EQ(info.layout, OffloadPlacement::kHost);
}

// Stops the migration before `step`, as a crash would.
MigrateOptions StopBefore(MigrateOptions o, const std::string& step) {
  o.before_step = [step](std::string_view s) -> Status {
    return s == step ? AbortedError("injected stop before " + step) : Status::Ok();
  };
  return o;
}

TEST(TierMigrate, InterruptedMigrationLeavesAVerifiedCheckpoint) {
  for (const std::string step : {"write", "verify", "switch", "remove_source"}) {
    SCOPED_TRACE(step);
    TempDir out, nvme;
    tier_test::CopyBaseRun(out.path());
    const std::string ckpt = Ckpt(out, 4);
    const auto before = StateBytes(ckpt);
    // host -> nvme, stopped.
    EXPECT_FALSE(MigrateCheckpoint(ckpt, StopBefore(ToNvme(nvme.path()), step)).ok());
    CheckpointInfo info = VerifyCheckpoint(ckpt);
    EXPECT_TRUE(info.verified) << info.problem;
    EXPECT_EQ(info.layout,
              step == "remove_source" ? OffloadPlacement::kNvme : OffloadPlacement::kHost);
    EXPECT_EQ(StateBytes(ckpt), before);
    // clean removes the leftovers (an unused set, or unlisted optimizer files) and nothing else.
    auto cleaned = CleanTier(out.path(), false);
    ASSERT_TRUE(cleaned.ok()) << cleaned.status().ToString();
    auto cleaned_nvme = CleanTier(nvme.path(), false);
    ASSERT_TRUE(cleaned_nvme.ok()) << cleaned_nvme.status().ToString();
    if (step != "write") {
      EXPECT_EQ(cleaned->removed.size() + cleaned_nvme->removed.size(), 1u);
    }
    EXPECT_TRUE(VerifyCheckpoint(ckpt).verified);
    EXPECT_EQ(StateBytes(ckpt), before);
    // The migration completes when run again.
    ASSERT_TRUE(MigrateCheckpoint(ckpt, ToNvme(nvme.path())).ok());
    EXPECT_EQ(VerifyCheckpoint(ckpt).layout, OffloadPlacement::kNvme);
    // nvme -> host, stopped at the same step, then again.
    EXPECT_FALSE(MigrateCheckpoint(ckpt, StopBefore(ToHost(), step)).ok());
    info = VerifyCheckpoint(ckpt);
    EXPECT_TRUE(info.verified) << info.problem;
    EXPECT_EQ(info.layout,
              step == "remove_source" ? OffloadPlacement::kHost : OffloadPlacement::kNvme);
    EXPECT_EQ(StateBytes(ckpt), before);
    auto done = MigrateCheckpoint(ckpt, ToHost());
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(VerifyCheckpoint(ckpt).layout, OffloadPlacement::kHost);
    EXPECT_EQ(StateBytes(ckpt), before);
    ASSERT_TRUE(CleanTier(out.path(), false).ok());
    ASSERT_TRUE(CleanTier(nvme.path(), false).ok());
    EXPECT_TRUE(CheckpointStoreDirectories(nvme.path()).empty());
  }
}

TEST(TierClean, KeepsLiveAndCheckpointSetsRemovesStaleOnes) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  ASSERT_TRUE(MigrateCheckpoint(Ckpt(out, 4), ToNvme(nvme.path())).ok());
  offload::StateStoreOptions o;
  o.directories = {nvme.path()};
  o.block_size_bytes = 4096;
  o.spare_bytes_per_directory = 4096;
  o.run_id = "live-run";
  auto live = offload::StateStore::Create(o, {{"y", DType::kF32, 8192}});  // held open: live
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  o.run_id = "crashed-run";
  {
    auto stale = offload::StateStore::Create(o, {{"x", DType::kF32, 8192}});
    ASSERT_TRUE(stale.ok()) << stale.status().ToString();
    ASSERT_TRUE((*stale)->CloseKeepingFiles().ok());
  }

  auto l = ListTier(nvme.path(), false);
  ASSERT_TRUE(l.ok());
  std::map<std::string, offload::SwapSetState> states;
  for (const auto& s : l->swap_sets) states[s.info.run_id] = s.info.state;
  EXPECT_EQ(states["live-run"], offload::SwapSetState::kLive);
  EXPECT_EQ(states["crashed-run"], offload::SwapSetState::kStale);
  EXPECT_EQ(states.size(), 3u);

  auto dry = CleanTier(nvme.path(), /*dry_run=*/true);
  ASSERT_TRUE(dry.ok());
  ASSERT_EQ(dry->removed.size(), 1u);
  EXPECT_EQ(dry->removed[0].path, offload::RunDirectory(nvme.path(), "crashed-run"));
  EXPECT_TRUE(fs::exists(dry->removed[0].path));

  auto clean = CleanTier(nvme.path(), false);
  ASSERT_TRUE(clean.ok());
  ASSERT_EQ(clean->removed.size(), 1u);
  EXPECT_GT(clean->freed_bytes, 0u);
  EXPECT_FALSE(fs::exists(offload::RunDirectory(nvme.path(), "crashed-run")));
  EXPECT_EQ(clean->kept.size(), 2u);  // live-run, and the checkpoint's set
  EXPECT_TRUE(VerifyCheckpoint(Ckpt(out, 4)).verified);

  // Once the checkpoint is gone its set may go.
  fs::remove_all(Ckpt(out, 4));
  clean = CleanTier(nvme.path(), false);
  ASSERT_TRUE(clean.ok());
  ASSERT_EQ(clean->removed.size(), 1u);
  EXPECT_EQ(clean->kept.size(), 1u);
  EXPECT_TRUE(CheckpointStoreDirectories(nvme.path()).empty());
  EXPECT_TRUE((*live)->Close().ok());
}

TEST(TierExport, SameTensorsFromEitherLayout) {
  TempDir out, nvme, files;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  const auto want = StateBytes(ckpt);
  auto host = ExportCheckpoint(ckpt, files / "host.safetensors");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->num_tensors, want.size());
  ASSERT_TRUE(MigrateCheckpoint(ckpt, ToNvme(nvme.path())).ok());
  auto from_nvme = ExportCheckpoint(ckpt, files / "nvme.safetensors");
  ASSERT_TRUE(from_nvme.ok()) << from_nvme.status().ToString();
  EXPECT_EQ(from_nvme->layout, OffloadPlacement::kNvme);
  for (const char* name : {"host.safetensors", "nvme.safetensors"}) {
    auto reader = SafetensorsReader::Open(files / name);
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ((*reader)->header().tensors.size(), want.size());
    for (const auto& [tensor, bytes] : want) {
      std::string got(bytes.size(), '\0');
      ASSERT_TRUE((*reader)->Read(tensor, DType::kF32, got.data(), got.size()).ok()) << tensor;
      EXPECT_EQ(got, bytes) << name << " " << tensor;
    }
  }
}

}  // namespace
}  // namespace tierflow::tier
