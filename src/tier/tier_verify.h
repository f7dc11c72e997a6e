// `tierflow tier verify`: every checksum of the offloaded state under a path
// — checkpoints (file sizes and CRC32Cs, per-tensor ranges, swap-set blocks)
// and swap sets (headers, block tables, every block of a set no live run is
// writing). A corruption is reported with the file, the tensor and the byte
// range.
#pragma once

#include <string>
#include <vector>

#include "tierflow/status.h"

namespace tierflow::tier {

struct VerifyItem {
  std::string kind;  // "checkpoint", "swap file", or "swap set" (a skipped symbolic link)
  std::string path;
  bool ok = false;
  std::string detail;                 // e.g. "step 8, host, verified", "live: header only"
  std::vector<std::string> problems;  // each names file, tensor and byte range
};

struct VerifyReport {
  std::vector<VerifyItem> items;
  bool ok() const;
};

// Verifies everything ScanTierPath finds under `path`. Swap sets referenced
// by a checkpoint are checked as part of it. Live sets: header and block
// tables only (their blocks change under us). Errors: NotFound for a
// missing path; a path with nothing to verify is InvalidArgument.
StatusOr<VerifyReport> VerifyTierPath(const std::string& path);

}  // namespace tierflow::tier
