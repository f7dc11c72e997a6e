// `tierflow tier ls`: what offloaded state is under a path — swap sets
// (live or stale, files, bytes, tensors), checkpoints (step, layout,
// complete/verified, bytes, units) and the final model directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/trainer_state.h"
#include "offload/swap_format.h"
#include "offload/swap_set.h"
#include "tier/tier_scan.h"
#include "tierflow/status.h"

namespace tierflow::tier {

struct SwapSetListing {
  std::string directory;  // the directory holding tierflow-swap/
  offload::SwapSetInfo info;
  std::string checkpoint;                         // the checkpoint its marker names ("" when none)
  bool checkpoint_uses_it = false;                // that checkpoint exists and refers to this set
  uint64_t data_bytes = 0;                        // tensor bytes (from the headers)
  std::vector<offload::SwapTensorEntry> tensors;  // from the first readable header
  std::string problem;                            // a header that does not decode ("" when fine)
};

struct CheckpointListing {
  CheckpointInfo info;                     // verified only when asked to verify
  std::optional<OffloadPlacement> layout;  // kHost / kNvme / nullopt (unreadable)
  uint64_t num_bytes = 0;                  // files in the checkpoint directory plus its swap files
  size_t num_units = 0;
  int64_t step = -1;
  CheckpointSwapSet swap_set;
};

struct TierListing {
  PathKind kind = PathKind::kUnknown;
  std::vector<CheckpointListing> checkpoints;
  std::vector<SwapSetListing> swap_sets;
  std::string final_model_dir;
  uint64_t final_model_bytes = 0;
};

// Lists `path` (see ScanTierPath). With `verify`, checkpoints are verified
// (every checksum; slow for big state), else only their trainer_state.json
// is read ("complete" = it parses). Errors: NotFound for a missing path.
StatusOr<TierListing> ListTier(const std::string& path, bool verify);

// Bytes of all regular files under `dir` (0 when absent).
uint64_t DirectoryBytes(const std::string& dir);

}  // namespace tierflow::tier
