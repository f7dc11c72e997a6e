// `tierflow tier export`: a checkpoint's optimizer state (either layout) as
// one safetensors file — "<unit>/master", "<unit>/exp_avg",
// "<unit>/exp_avg_sq", fp32 — for inspection in other tools.
#pragma once

#include <cstdint>
#include <string>

#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow::tier {

struct ExportResult {
  uint64_t num_tensors = 0;
  uint64_t num_bytes = 0;                             // tensor data written
  OffloadPlacement layout = OffloadPlacement::kHost;  // the checkpoint's
};

// Writes `out_file` (crash-safely: the old file stays on failure). Memory:
// the whole optimizer state (12 bytes per parameter) is held at once, as
// the safetensors writer takes every tensor together. Before reading the
// state, refuses an `out_file` that is the checkpoint or inside it or its
// swap directories (InvalidArgument naming both), and one the write would
// refuse (a link, a directory, a missing or unwritable directory:
// io/output_path.h). Errors: DataLoss when the checkpoint's state does not
// read back clean; I/O errors naming paths.
StatusOr<ExportResult> ExportCheckpoint(const std::string& checkpoint_dir,
                                        const std::string& out_file);

}  // namespace tierflow::tier
