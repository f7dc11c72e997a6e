// `tierflow tier clean`.
#include "tier/tier_clean.h"

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "offload/swap_set.h"
#include "tier/tier_ls.h"
#include "tier/tier_scan.h"
#include "train/checkpoint.h"

namespace tierflow::tier {
namespace fs = std::filesystem;
namespace {

// ".step-00000008.tmp-1234" of a process that is gone.
bool OrphanedTemporary(const std::string& name) {
  const size_t at = name.rfind(".tmp-");
  if (name.rfind(".step-", 0) != 0 || at == std::string::npos) return false;
  const long pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

StatusOr<CleanReport> CleanTier(const std::string& path, bool dry_run) {
  TF_ASSIGN_OR_RETURN(TierScan scan, ScanTierPath(path));
  CleanReport report;
  auto remove_tree = [&](const std::string& p, const std::string& why) -> Status {
    CleanEntry e{p, DirectoryBytes(p), why};
    if (!dry_run) {
      std::error_code ec;
      fs::remove_all(p, ec);
      if (ec) return IoError("remove " + p + ": " + ec.message());
    }
    report.freed_bytes += e.num_bytes;
    report.removed.push_back(std::move(e));
    return Status::Ok();
  };
  for (const std::string& c : scan.checkpoints) {
    auto doc = ReadCheckpointState(c);
    const fs::path opt = fs::path(c) / "optimizer";
    std::error_code ec;
    if (doc.ok() && doc->value("optimizer_layout", "host") == "nvme" && fs::exists(opt, ec)) {
      TF_RETURN_IF_ERROR(remove_tree(
          opt.string(),
          "optimizer files of an interrupted migration (the checkpoint uses its swap set)"));
    }
  }
  if (scan.kind == PathKind::kOutputDir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(path) / "checkpoints", ec)) {
      const std::string name = e.path().filename().string();
      if (OrphanedTemporary(name)) {
        TF_RETURN_IF_ERROR(remove_tree(e.path().string(),
                                       "temporary directory of an interrupted checkpoint save"));
      }
    }
  }
  for (const std::string& dir : scan.swap_dirs) {
    TF_ASSIGN_OR_RETURN(auto sets, offload::ListSwapSets(dir));
    for (const offload::SwapSetInfo& set : sets) {
      CleanEntry e{set.path, set.num_bytes, ""};
      if (set.state == offload::SwapSetState::kLive) {
        e.why = "live: a running process holds its lock";
        report.kept.push_back(std::move(e));
        continue;
      }
      const auto marker = ReadMarker(dir, set.run_id);
      if (marker && CheckpointUsesSwapSet(*marker, set.run_id)) {
        e.why = "optimizer state of checkpoint " + *marker;
        report.kept.push_back(std::move(e));
        continue;
      }
      e.why = !marker
                  ? "stale swap set left by a run that did not exit cleanly"
                  : "swap set of checkpoint " + *marker + ", which is gone or no longer uses it";
      if (!dry_run) {
        Status s = offload::RemoveSwapSet(dir, set.run_id);
        if (s.code() == StatusCode::kFailedPrecondition) {  // became live meanwhile
          e.why = "live: a process took its lock while cleaning";
          report.kept.push_back(std::move(e));
          continue;
        }
        TF_RETURN_IF_ERROR(s);
        RemoveMarker(dir, set.run_id);
        if (marker) RemoveEmptyStoreDirectory(dir);
      }
      report.freed_bytes += e.num_bytes;
      report.removed.push_back(std::move(e));
    }
  }
  return report;
}

}  // namespace tierflow::tier
