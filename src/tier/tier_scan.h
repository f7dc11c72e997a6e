// What lives under a path tierflow's tier commands are given: the output
// directory of a run, a checkpoint directory, or a swap directory, and the
// swap-set directories each of those implies. Also the markers that tie a
// checkpoint's kept swap set to its checkpoint.
//
// A checkpoint migrated to NVMe keeps its state in a swap set whose store
// directory is NVME_DIR/tierflow-checkpoints/RUN_ID: not NVME_DIR itself, so
// a training run using NVME_DIR does not see it as a stale set of a crashed
// run and refuse to start, and one directory per set, so a second migration
// is not refused for the first one's (lockless, stale-looking) set. Its marker
// STORE_DIR/tierflow-swap/RUN_ID.checkpoint names the checkpoint that owns it
// (checkpoint/swap_set_owner.h, with the rule on who may remove a set).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/swap_set_owner.h"
#include "tierflow/status.h"

namespace tierflow::tier {

inline constexpr char kCheckpointStoreSubdir[] = "tierflow-checkpoints";
inline constexpr char kCheckpointRunIdPrefix[] = "ckpt-";

// NVME_DIR/tierflow-checkpoints/RUN_ID: the store directory of one checkpoint swap set.
std::string CheckpointStoreDirectory(const std::string& nvme_dir, const std::string& run_id);
// The existing store directories under NVME_DIR/tierflow-checkpoints.
std::vector<std::string> CheckpointStoreDirectories(const std::string& nvme_dir);
enum class PathKind { kOutputDir, kCheckpoint, kSwapDir, kUnknown };

struct TierScan {
  PathKind kind = PathKind::kUnknown;
  std::vector<std::string> checkpoints;  // checkpoint directories, newest first
  std::vector<std::string> swap_dirs;    // directories holding tierflow-swap/
  std::string final_model_dir;           // OUT/model when present
};

// Classifies `path` and gathers what it implies: for an output directory its
// checkpoints, the swap directories of its runs (swap_runs.json) and of its
// checkpoints; for a checkpoint, itself and its swap set's directories; for
// any directory, itself and DIR/tierflow-checkpoints when they hold swap sets.
// Errors: NotFound when `path` does not exist.
StatusOr<TierScan> ScanTierPath(const std::string& path);

// The training output directory that owns `checkpoint_dir`
// (OUT/checkpoints/step-N -> OUT), or "" when it is not inside one. Commands
// that change a checkpoint take that directory's DirLock, so they never race
// a run writing there.
std::string CheckpointOutputDir(const std::string& checkpoint_dir);

}  // namespace tierflow::tier
