// `tierflow tier clean`.
#include "tier/tier_clean.h"

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/swap_set_owner.h"
#include "checkpoint/trainer_state.h"
#include "io/dir_lock.h"
#include "offload/swap_set.h"
#include "tier/tier_ls.h"
#include "tier/tier_scan.h"

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

// The output directory `path` belongs to, when it is one or a checkpoint
// directly in one (OUT/checkpoints/step-N); "" otherwise.
std::string OwningOutputDir(const TierScan& scan, const std::string& path) {
  if (scan.kind == PathKind::kOutputDir) return path;
  if (scan.kind != PathKind::kCheckpoint) return "";
  return CheckpointOutputDir(path);
}

bool IsSymlink(const std::string& p) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(p, ec));
}

constexpr char kNotFollowed[] =
    "skipped: a symbolic link; tier clean never follows links out of the directories it cleans";

}  // namespace

StatusOr<CleanReport> CleanTier(const std::string& path, bool dry_run) {
  TF_ASSIGN_OR_RETURN(TierScan scan, ScanTierPath(path));
  CleanReport report;
  // A run in progress owns its output directory: its temporaries, swap sets
  // and checkpoints are not leftovers. So clean holds the directory's lock
  // (train cannot start meanwhile), or finds it held and leaves it alone.
  DirLock out_lock;
  if (const std::string out = OwningOutputDir(scan, path); !out.empty()) {
    Status lock_status = Status::Ok();
    if (dry_run) {
      lock_status = DirLock::CheckNotHeld(out);
    } else {
      auto lock = DirLock::Acquire(out, "tierflow tier clean");
      lock_status = lock.ok() ? Status::Ok() : lock.status();
      if (lock.ok()) out_lock = std::move(lock).value();
    }
    if (lock_status.code() == StatusCode::kFailedPrecondition) {
      report.kept.push_back({out, 0, "skipped: in use: " + lock_status.message()});
      return report;
    }
    TF_RETURN_IF_ERROR(lock_status);
  }
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
    if (c != path && IsSymlink(c)) {  // `path` itself the user named
      report.kept.push_back({c, 0, kNotFollowed});
      continue;
    }
    auto doc = ReadCheckpointState(c);
    // Typed (a mistyped optimizer_layout is not an nvme checkpoint, and must
    // not throw), and only a valid nvme layout: its swap set holds the state.
    auto layout = doc.ok() ? ParseCheckpointLayout(*doc, c + "/trainer_state.json")
                           : StatusOr<CheckpointLayout>(doc.status());
    const fs::path opt = fs::path(c) / "optimizer";
    std::error_code ec;
    if (layout.ok() && layout->layout == OffloadPlacement::kNvme && fs::exists(opt, ec)) {
      TF_RETURN_IF_ERROR(remove_tree(
          opt.string(),
          "optimizer files of an interrupted migration (the checkpoint uses its swap set)"));
    }
  }
  const std::string checkpoints_dir = (fs::path(path) / "checkpoints").string();
  if (scan.kind == PathKind::kOutputDir && IsSymlink(checkpoints_dir)) {
    report.kept.push_back({checkpoints_dir, 0, kNotFollowed});
  } else if (scan.kind == PathKind::kOutputDir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (OrphanedTemporary(name)) {
        TF_RETURN_IF_ERROR(remove_tree(e.path().string(),
                                       "temporary directory of an interrupted checkpoint save"));
      }
    }
  }
  if (scan.kind == PathKind::kOutputDir) {
    // Temporaries of an interrupted final-model save (OUT/.model.tmp-PID, the
    // new model; OUT/.model.old-PID, the previous one moved aside). We hold
    // OUT's lock, so no save is running. With OUT/model there, both are
    // superseded; without it, one of them may be the only copy.
    std::error_code ec;
    const bool have_model = fs::exists(fs::symlink_status(fs::path(path) / "model", ec));
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(".model.tmp-", 0) != 0 && name.rfind(".model.old-", 0) != 0) continue;
      if (have_model) {
        TF_RETURN_IF_ERROR(remove_tree(e.path().string(),
                                       "temporary directory of an interrupted final-model save"));
      } else {
        report.kept.push_back({e.path().string(), DirectoryBytes(e.path().string()),
                               "left by an interrupted final-model save, and " + path +
                                   "/model is missing: this may be the only copy of the final "
                                   "model (rename it to model, or remove it)"});
      }
    }
  }
  for (const std::string& dir : scan.swap_dirs) {
    TF_ASSIGN_OR_RETURN(auto sets, offload::ListSwapSets(dir));
    for (const offload::SwapSetInfo& set : sets) {
      CleanEntry e{set.path, set.num_bytes, ""};
      if (set.state == offload::SwapSetState::kSymlink) {
        e.why = kNotFollowed;
        report.kept.push_back(std::move(e));
        continue;
      }
      if (set.state == offload::SwapSetState::kLive) {
        e.why = "live: a running process holds its lock";
        report.kept.push_back(std::move(e));
        continue;
      }
      // The ownership rule (checkpoint/swap_set_owner.h), for a person who
      // may act for any owner: kept while a checkpoint uses it.
      TF_ASSIGN_OR_RETURN(SwapSetVerdict verdict,
                          RemoveSwapSetIfAllowed(dir, set, SwapSetRemover{}, dry_run));
      e.why = verdict.why;
      if (!verdict.remove) {
        report.kept.push_back(std::move(e));
        continue;
      }
      report.freed_bytes += e.num_bytes;
      report.removed.push_back(std::move(e));
    }
  }
  return report;
}

}  // namespace tierflow::tier
