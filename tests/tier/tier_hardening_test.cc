// The tier commands against crafted and damaged checkpoints (issue 18): unit
// names that climb out of the checkpoint, mistyped and absurd fields, symlinks
// out of the directories the commands own, and cancellation. Each test is
// named after the defect it pins; each failed on the tree before the fix
// (read outside, wrote outside, reported OK, threw, or ignored the request).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/cancel.h"
#include "io/dir_lock.h"
#include "offload/aligned_buffer.h"
#include "offload/state_store.h"
#include "tests/tier/tier_test_util.h"
#include "tier/tier_export.h"
#include "tier/tier_ls.h"
#include "tier/tier_migrate.h"
#include "tier/tier_scan.h"
#include "tier/tier_verify.h"
#include "train/checkpoint.h"

namespace tierflow::tier {
namespace {
namespace fs = std::filesystem;
using tier_test::Ckpt;
using tier_test::ReadState;
using tier_test::TempDir;
using tier_test::ToHost;
using tier_test::ToNvme;
using tier_test::WriteState;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The first problem `tier verify` reports for `ckpt` ("" when it says OK).
std::string VerifyProblem(const std::string& ckpt) {
  auto report = VerifyTierPath(ckpt);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  if (!report.ok()) return "(no report)";
  for (const VerifyItem& i : report->items) {
    if (!i.ok) return i.problems.empty() ? "(not ok, no problem given)" : i.problems[0];
  }
  return "";
}

// A host-layout checkpoint whose first unit is renamed to "../../escaped",
// with that unit's real file copied to where the escaping name points
// (OUT/checkpoints/escaped.safetensors), so that following the name would
// succeed and read outside the checkpoint.
std::string MakeEscapingHostCheckpoint(const TempDir& out) {
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  nlohmann::json doc = ReadState(ckpt);
  const std::string unit = doc["units"][0]["name"];
  fs::copy_file(ckpt + "/optimizer/" + unit + ".safetensors",
                out / "checkpoints/escaped.safetensors");
  doc["units"][0]["name"] = "../../escaped";
  WriteState(ckpt, doc);
  return ckpt;
}

TEST(TierExport, RefusesUnitNameEscapingCheckpoint) {
  TempDir out, files;
  const std::string ckpt = MakeEscapingHostCheckpoint(out);
  auto r = ExportCheckpoint(ckpt, files / "state.safetensors");
  ASSERT_FALSE(r.ok()) << "exported a unit read from outside the checkpoint";
  EXPECT_TRUE(Contains(r.status().message(), "units[0].name")) << r.status().ToString();
  EXPECT_FALSE(fs::exists(files / "state.safetensors"));
}

TEST(TierVerify, ReportsPathEscapeAsCorrupt) {
  TempDir out;
  const std::string ckpt = MakeEscapingHostCheckpoint(out);
  const std::string problem = VerifyProblem(ckpt);
  EXPECT_TRUE(Contains(problem, "units[0].name")) << "verify said: '" << problem << "'";
  EXPECT_FALSE(VerifyCheckpoint(ckpt).verified);
}

TEST(TierMigrate, ToNvmeRefusesUnitNameEscapingCheckpoint) {
  TempDir out, nvme;
  const std::string ckpt = MakeEscapingHostCheckpoint(out);
  auto r = MigrateCheckpoint(ckpt, ToNvme(nvme.path()));
  ASSERT_FALSE(r.ok()) << "migrated a unit read from outside the checkpoint";
  EXPECT_TRUE(Contains(r.status().message(), "units[0].name")) << r.status().ToString();
  EXPECT_TRUE(CheckpointStoreDirectories(nvme.path()).empty());
}

// An nvme-layout checkpoint whose only unit is "../../escaped", backed by a
// real, complete swap set holding "../../escaped/master" etc. Migrating it
// to the host layout used to write OUT/checkpoints/escaped.safetensors.
TEST(TierMigrate, ToHostRefusesToWriteOutsideCheckpoint) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  const std::string store_dir = nvme / "crafted";
  const std::string unit = "../../escaped";
  constexpr uint64_t kParams = 16;
  fs::create_directories(store_dir);
  {
    offload::StateStoreOptions o;
    o.directories = {store_dir};
    o.run_id = "crafted-run";
    o.block_size_bytes = 4096;
    o.spare_bytes_per_directory = 4096;
    std::vector<offload::TensorSpec> specs;
    for (const char* a : {"master", "exp_avg", "exp_avg_sq"})
      specs.push_back({OptimizerSwapTensorName(unit, a), DType::kF32, kParams * 4});
    auto store = offload::StateStore::Create(o, specs);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto buf = offload::AlignedBuffer::Allocate(offload::kDirectIoAlignment);
    ASSERT_TRUE(buf.ok());
    std::memset(buf->data(), 0, offload::kDirectIoAlignment);
    for (const auto& s : specs) {
      auto id = (*store)->Find(s.name);
      ASSERT_TRUE(id.ok());
      ASSERT_TRUE((*store)->Write(*id, buf->data()).ok());
    }
    ASSERT_TRUE((*store)->CloseKeepingFiles().ok());
  }
  nlohmann::json doc = ReadState(ckpt);
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : doc["files"]) {
    if (f["path"].get<std::string>().rfind("optimizer/", 0) != 0) files.push_back(f);
  }
  doc["files"] = files;
  doc["units"] = {{{"name", unit}, {"num_params", kParams}}};
  doc["optimizer_layout"] = "nvme";
  doc["swap_set"] = {{"run_id", "crafted-run"}, {"directories", {store_dir}}};
  WriteState(ckpt, doc);
  fs::remove_all(ckpt + "/optimizer");

  EXPECT_TRUE(Contains(VerifyProblem(ckpt), "units[0].name"));
  auto r = MigrateCheckpoint(ckpt, ToHost());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "units[0].name")) << r.status().ToString();
  EXPECT_FALSE(fs::exists(out / "checkpoints/escaped.safetensors"));
}

TEST(TierVerify, ReportsInvalidRunIdAsCorrupt) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  ASSERT_TRUE(MigrateCheckpoint(ckpt, ToNvme(nvme.path())).ok());
  nlohmann::json doc = ReadState(ckpt);
  doc["swap_set"]["run_id"] = "../" + doc["swap_set"]["run_id"].get<std::string>();
  WriteState(ckpt, doc);
  EXPECT_TRUE(Contains(VerifyProblem(ckpt), "swap_set.run_id"));
}

// A mistyped field made nlohmann throw out of `tier verify` (through the
// run id of the checkpoint's swap set) instead of reporting the checkpoint.
TEST(TierVerify, MistypedRunIdIsReportedNotThrown) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  ASSERT_TRUE(MigrateCheckpoint(ckpt, ToNvme(nvme.path())).ok());
  nlohmann::json doc = ReadState(ckpt);
  doc["swap_set"]["run_id"] = 7;
  WriteState(ckpt, doc);
  const std::string problem = VerifyProblem(ckpt);
  EXPECT_TRUE(Contains(problem, "swap_set.run_id must be a string, not 7")) << problem;
}

TEST(TierLs, MistypedStepIsReportedNotThrown) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  nlohmann::json doc = ReadState(ckpt);
  doc["step"] = "four";
  WriteState(ckpt, doc);
  auto l = ListTier(ckpt, /*verify=*/false);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->checkpoints.size(), 1u);
  EXPECT_TRUE(Contains(l->checkpoints[0].info.problem, "step must be an integer"))
      << l->checkpoints[0].info.problem;
}

TEST(TierExport, MistypedNumParamsIsAnErrorNotAnException) {
  TempDir out, files;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  nlohmann::json doc = ReadState(ckpt);
  doc["units"][1]["num_params"] = "1000";
  WriteState(ckpt, doc);
  auto r = ExportCheckpoint(ckpt, files / "state.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "units[1].num_params must be a non-negative integer"))
      << r.status().ToString();
}

TEST(TierExport, AbsurdNumParamsIsAnErrorNotBadAlloc) {
  TempDir out, files;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  nlohmann::json doc = ReadState(ckpt);
  doc["units"][0]["num_params"] = uint64_t{1} << 60;
  WriteState(ckpt, doc);
  auto r = ExportCheckpoint(ckpt, files / "state.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "units[0].num_params")) << r.status().ToString();
  doc["units"][0]["num_params"] = UINT64_MAX;
  WriteState(ckpt, doc);
  r = ExportCheckpoint(ckpt, files / "state.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "units[0].num_params")) << r.status().ToString();
}

TEST(TierVerify, ReportsAbsurdNumParamsAsCorrupt) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  nlohmann::json doc = ReadState(ckpt);
  doc["units"][0]["num_params"] = uint64_t{1} << 60;
  WriteState(ckpt, doc);
  EXPECT_TRUE(Contains(VerifyProblem(ckpt), "units[0].num_params"));
}

// num_params that fits the file but not its tensors: verify said OK, and
// export, migrate and resume failed later on the size mismatch.
TEST(TierVerify, ReportsNumParamsNotMatchingUnitFile) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  nlohmann::json doc = ReadState(ckpt);
  doc["units"][0]["num_params"] = doc["units"][0]["num_params"].get<uint64_t>() - 1;
  WriteState(ckpt, doc);
  const std::string problem = VerifyProblem(ckpt);
  EXPECT_TRUE(Contains(problem, "units[0].num_params says")) << problem;
}

// The same for an nvme-layout checkpoint: the swap tensors' sizes bound it.
TEST(TierVerify, ReportsAbsurdNumParamsInNvmeLayoutAsCorrupt) {
  TempDir out, nvme, files;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  ASSERT_TRUE(MigrateCheckpoint(ckpt, ToNvme(nvme.path())).ok());
  nlohmann::json doc = ReadState(ckpt);
  doc["units"][0]["num_params"] = uint64_t{1} << 62;  // * 4 wraps to 0 in 64 bits
  WriteState(ckpt, doc);
  EXPECT_TRUE(Contains(VerifyProblem(ckpt), "num_params"));
  EXPECT_FALSE(ExportCheckpoint(ckpt, files / "state.safetensors").ok());
}

// A unit file the "files" list does not cover was never checksummed, yet
// verify said OK.
TEST(TierVerify, ReportsUnitFileMissingFromFilesList) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  nlohmann::json doc = ReadState(ckpt);
  const std::string rel =
      "optimizer/" + doc["units"][0]["name"].get<std::string>() + ".safetensors";
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : doc["files"]) {
    if (f["path"] != rel) files.push_back(f);
  }
  ASSERT_EQ(files.size() + 1, doc["files"].size());
  doc["files"] = files;
  WriteState(ckpt, doc);
  const std::string problem = VerifyProblem(ckpt);
  EXPECT_TRUE(Contains(problem, rel)) << problem;
}

// The checkpoint's first unit file replaced by a symlink to an identical copy
// outside it: every checksum matches, so only the link itself is wrong.
std::string MakeSymlinkedUnitFile(const TempDir& out, std::string* outside) {
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  const std::string unit = ReadState(ckpt)["units"][0]["name"];
  const std::string file = ckpt + "/optimizer/" + unit + ".safetensors";
  *outside = out / "outside.safetensors";
  fs::rename(file, *outside);
  fs::create_symlink(*outside, file);
  return file;
}

TEST(TierExport, DoesNotFollowSymlinkOut) {
  TempDir out, files;
  std::string outside;
  const std::string link = MakeSymlinkedUnitFile(out, &outside);
  auto r = ExportCheckpoint(Ckpt(out, 4), files / "state.safetensors");
  ASSERT_FALSE(r.ok()) << "exported through a symlink";
  EXPECT_TRUE(Contains(r.status().message(), link + " is a symbolic link"))
      << r.status().ToString();
}

TEST(TierMigrate, DoesNotFollowSymlinkOut) {
  TempDir out, nvme;
  std::string outside;
  const std::string link = MakeSymlinkedUnitFile(out, &outside);
  auto r = MigrateCheckpoint(Ckpt(out, 4), ToNvme(nvme.path()));
  ASSERT_FALSE(r.ok()) << "migrated through a symlink";
  EXPECT_TRUE(Contains(r.status().message(), link + " is a symbolic link"))
      << r.status().ToString();
  EXPECT_TRUE(CheckpointStoreDirectories(nvme.path()).empty());
  EXPECT_TRUE(Contains(VerifyProblem(Ckpt(out, 4)), "symbolic link"));
}

// optimizer/ as a symlink to a directory outside: `migrate --to host` wrote
// the unit files through it.
TEST(TierMigrate, ToHostDoesNotWriteThroughSymlinkedOptimizerDir) {
  TempDir out, nvme, elsewhere;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  ASSERT_TRUE(MigrateCheckpoint(ckpt, ToNvme(nvme.path())).ok());
  ASSERT_FALSE(fs::exists(ckpt + "/optimizer"));
  fs::create_directory_symlink(elsewhere.path(), ckpt + "/optimizer");
  auto r = MigrateCheckpoint(ckpt, ToHost());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), ckpt + "/optimizer is a symbolic link"))
      << r.status().ToString();
  EXPECT_TRUE(fs::is_empty(elsewhere.path()));
  EXPECT_TRUE(VerifyCheckpoint(ckpt).verified);  // still the nvme layout, intact
}

// A store directory under NVME/tierflow-checkpoints that is a symlink is not one
// tierflow made: migrate's leftover sweep must not act on the set it leads to
// (a stale set whose marker names this checkpoint, which it used to remove),
// and says it skipped it.
TEST(TierMigrate, DoesNotFollowSymlinkedStoreDirectory) {
  TempDir out, nvme, elsewhere;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  {
    offload::StateStoreOptions o;
    o.directories = {elsewhere.path()};
    o.run_id = "victim";
    o.block_size_bytes = 4096;
    o.spare_bytes_per_directory = 4096;
    auto store = offload::StateStore::Create(o, {{"x", DType::kF32, 4096}});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->CloseKeepingFiles().ok());
  }
  ASSERT_TRUE(
      WriteMarker(elsewhere.path(), "victim", fs::absolute(ckpt).lexically_normal().string()).ok());
  fs::create_directories(nvme / kCheckpointStoreSubdir);
  const std::string link = nvme / (std::string(kCheckpointStoreSubdir) + "/linked");
  fs::create_directory_symlink(elsewhere.path(), link);
  EXPECT_TRUE(CheckpointStoreDirectories(nvme.path()).empty());

  auto r = MigrateCheckpoint(ckpt, ToNvme(nvme.path()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(fs::exists(offload::RunDirectory(elsewhere.path(), "victim")));
  bool noted = false;
  for (const std::string& n : r->notes) noted = noted || Contains(n, "skipped " + link);
  EXPECT_TRUE(noted);
}

TEST(TierMigrate, StopsWhenCancelled) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  ResetCancelForTesting();
  RequestCancel(SIGTERM);
  auto r = MigrateCheckpoint(ckpt, ToNvme(nvme.path()));
  ResetCancelForTesting();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "migrating " + ckpt)) << r.status().ToString();
  EXPECT_TRUE(VerifyCheckpoint(ckpt).verified);
  EXPECT_EQ(VerifyCheckpoint(ckpt).layout, OffloadPlacement::kHost);
}

// Migration rewrites trainer_state.json and the optimizer files; with a run
// live in the output directory it raced that run's saves and retention.
TEST(TierMigrate, RefusedWhileARunHoldsTheOutputDirectory) {
  TempDir out, nvme;
  tier_test::CopyBaseRun(out.path());
  const std::string ckpt = Ckpt(out, 4);
  {
    auto lock = DirLock::Acquire(out.path(), "tierflow train");
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    auto r = MigrateCheckpoint(ckpt, ToNvme(nvme.path()));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), std::to_string(::getpid())))
        << r.status().ToString();
    EXPECT_EQ(VerifyCheckpoint(ckpt).layout, OffloadPlacement::kHost);
  }
  auto r = MigrateCheckpoint(ckpt, ToNvme(nvme.path()));  // the run has ended
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(VerifyCheckpoint(ckpt).layout, OffloadPlacement::kNvme);
}

TEST(TierExport, StopsWhenCancelled) {
  TempDir out, files;
  tier_test::CopyBaseRun(out.path());
  ResetCancelForTesting();
  RequestCancel(SIGTERM);
  auto r = ExportCheckpoint(Ckpt(out, 4), files / "state.safetensors");
  ResetCancelForTesting();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
  EXPECT_FALSE(fs::exists(files / "state.safetensors"));
}

TEST(TierVerify, StopsWhenCancelled) {
  TempDir out;
  tier_test::CopyBaseRun(out.path());
  ResetCancelForTesting();
  RequestCancel(SIGTERM);
  auto r = VerifyTierPath(out.path());
  ResetCancelForTesting();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAborted) << r.status().ToString();
}

}  // namespace
}  // namespace tierflow::tier
