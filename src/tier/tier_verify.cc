// `tierflow tier verify`.
#include "tier/tier_verify.h"

#include <filesystem>
#include <set>

#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/trainer_state.h"
#include "common/cancel.h"
#include "offload/swap_reader.h"
#include "offload/swap_set.h"
#include "tier/tier_scan.h"

namespace tierflow::tier {
namespace fs = std::filesystem;

bool VerifyReport::ok() const {
  for (const VerifyItem& i : items) {
    if (!i.ok) return false;
  }
  return true;
}

StatusOr<VerifyReport> VerifyTierPath(const std::string& path) {
  TF_ASSIGN_OR_RETURN(TierScan scan, ScanTierPath(path));
  if (scan.checkpoints.empty() && scan.swap_dirs.empty()) {
    return InvalidArgumentError(path +
                                " holds no checkpoint and no swap set; give a training output "
                                "directory, a checkpoint directory or a swap directory");
  }
  VerifyReport report;
  std::set<std::string> checked_sets;  // run ids verified as part of a checkpoint
  for (const std::string& c : scan.checkpoints) {
    TF_RETURN_IF_ERROR(CheckCancel("verifying " + c));
    CheckpointInfo info = VerifyCheckpoint(c);
    VerifyItem item{"checkpoint", c, info.verified, "", {}};
    item.detail = "step " + std::to_string(info.step) + ", " +
                  (info.layout ? std::string(OffloadPlacementName(*info.layout)) : "?") + " layout";
    if (!info.verified) item.problems.push_back(info.problem);
    if (info.layout == OffloadPlacement::kNvme) {
      auto doc = ReadCheckpointState(c);
      auto layout = doc.ok() ? ParseCheckpointLayout(*doc, c + "/trainer_state.json")
                             : StatusOr<CheckpointLayout>(doc.status());
      if (layout.ok()) checked_sets.insert(layout->swap_set.run_id);
    }
    report.items.push_back(std::move(item));
  }
  for (const std::string& dir : scan.swap_dirs) {
    TF_ASSIGN_OR_RETURN(auto sets, offload::ListSwapSets(dir));
    for (const offload::SwapSetInfo& set : sets) {
      if (checked_sets.count(set.run_id) != 0) continue;
      if (set.state == offload::SwapSetState::kSymlink) {
        // Reported, never followed: what it points at is not ours to vouch
        // for. Not a corruption either (nothing was read), so it stays "ok".
        report.items.push_back({"swap set",
                                set.path,
                                true,
                                "skipped: a symbolic link; verify does not follow links out of "
                                "the directories it checks",
                                {}});
        continue;
      }
      const bool live = set.state == offload::SwapSetState::kLive;
      std::error_code ec;
      for (const auto& f : fs::directory_iterator(set.path, ec)) {
        if (f.path().extension() != ".swap") continue;
        TF_RETURN_IF_ERROR(CheckCancel("verifying " + f.path().string()));
        VerifyItem item{"swap file", f.path().string(), false, "", {}};
        auto view = offload::SwapFileView::Open(item.path);
        if (!view.ok()) {
          item.problems.push_back(view.status().message());
          item.detail = std::string(live ? "live" : "stale") + " set " + set.run_id;
          report.items.push_back(std::move(item));
          continue;
        }
        const auto& h = (*view)->header();
        item.detail = std::string(live ? "live" : "stale") + " set " + set.run_id + ", " +
                      std::to_string(h.tensors.size()) + " tensors";
        if (live) {
          item.detail += ", header and block table only (a live run rewrites its blocks)";
          item.ok = true;
        } else {
          uint64_t checked = 0;
          for (const offload::SwapBlockProblem& p : (*view)->VerifyBlocks(&checked)) {
            item.problems.push_back("tensor '" + p.tensor + "' bytes [" +
                                    std::to_string(p.tensor_begin_bytes) + ", " +
                                    std::to_string(p.tensor_end_bytes) + ") at file offset " +
                                    std::to_string(p.file_offset_bytes) + ": " + p.what);
          }
          item.detail += ", " + std::to_string(checked) + " blocks checked";
          if (checked == 0 && !h.tensors.empty()) {
            item.detail += " (its block map was never synced: it holds no recoverable data)";
          }
          item.ok = item.problems.empty();
        }
        report.items.push_back(std::move(item));
      }
    }
  }
  return report;
}

}  // namespace tierflow::tier
