// `tierflow tier migrate`: moves a checkpoint's optimizer state between the
// host layout (optimizer/<unit>.safetensors) and the nvme layout (a kept
// swap set in one or more directories), crash-safely:
//   1. write the new copy (and, for nvme, a marker naming the checkpoint),
//   2. read it back and compare it with the source, byte for byte,
//   3. switch trainer_state.json atomically (temp, fsync, rename),
//   4. only then remove the old copy.
// An interruption at any point leaves a checkpoint that verifies and loads;
// the leftovers (an unreferenced swap set, unlisted optimizer files) are
// removed by the next migrate of that checkpoint or by `tierflow tier clean`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow::tier {

struct MigrateOptions {
  OffloadPlacement to = OffloadPlacement::kHost;  // kHost or kNvme
  std::vector<std::string> nvme_paths;            // for kNvme: one directory per drive
  bool nvme_buffered = false;                     // page-cache I/O (file systems without O_DIRECT)
  uint32_t block_size_bytes = 1u << 20;           // swap-set block (unit of I/O and checksums)
  // Test hook, called before each step ("write", "verify", "switch",
  // "remove_source"); a non-OK return stops the migration there, as a crash would.
  std::function<Status(std::string_view step)> before_step;
};

struct MigrateResult {
  OffloadPlacement from = OffloadPlacement::kHost;  // layouts
  OffloadPlacement to = OffloadPlacement::kHost;
  uint64_t state_bytes = 0;        // optimizer bytes moved
  std::string run_id;              // the swap set (nvme side)
  std::vector<std::string> notes;  // leftovers removed, nothing to do, ...
};

// Migrates `checkpoint_dir`. Already in the target layout: removes the
// leftovers and returns with a note. Errors: InvalidArgument (bad options;
// an --nvme-path that is the checkpoint or inside it, naming both); DataLoss
// when the checkpoint does not verify before, or the copy does not match
// after (the source is then kept, and the copy removed); I/O errors.
StatusOr<MigrateResult> MigrateCheckpoint(const std::string& checkpoint_dir,
                                          const MigrateOptions& options);

// Removes leftovers of interrupted migrations of `checkpoint_dir`:
// optimizer files an nvme-layout checkpoint does not list, and swap sets in
// `store_dirs` whose marker names this checkpoint but which it does not use.
// Returns what was removed (paths).
std::vector<std::string> RemoveMigrationLeftovers(const std::string& checkpoint_dir,
                                                  const std::vector<std::string>& store_dirs);

}  // namespace tierflow::tier
