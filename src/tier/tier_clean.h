// `tierflow tier clean`: removes what crashed runs and interrupted
// migrations left behind — stale swap sets (never a live one: a live run
// holds its lock), swap sets of checkpoints that are gone or no longer use
// them, unlisted optimizer files of nvme-layout checkpoints, and temporary
// checkpoint directories of processes that no longer exist — and keeps the
// swap sets that checkpoints still use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/status.h"

namespace tierflow::tier {

struct CleanEntry {
  std::string path;
  uint64_t num_bytes = 0;
  std::string why;  // "stale swap set", "kept: live run", ...
};

struct CleanReport {
  std::vector<CleanEntry> removed;  // with dry_run: what would be removed
  std::vector<CleanEntry> kept;
  uint64_t freed_bytes = 0;
};

// Cleans what ScanTierPath finds under `path`. With `dry_run` nothing is
// removed. An output directory (or a checkpoint in one) whose lock a live
// run holds (io/dir_lock.h) is skipped whole, reported in `kept`; otherwise
// clean holds that lock while it works. Nothing is followed through a
// symbolic link out of the directories it cleans (swap run directories,
// OUT/checkpoints, checkpoint directories): such links are reported in `kept`
// ("skipped: ...") and left alone. Errors: NotFound for a missing path; the first removal error
// (earlier removals stay done, and are in no report).
StatusOr<CleanReport> CleanTier(const std::string& path, bool dry_run);

}  // namespace tierflow::tier
