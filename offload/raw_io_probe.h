// RawIoProbe: the drive's speed as the engine sees it. A plain io_uring
// loop writes one file sequentially at a given block size and queue depth,
// writes it again, then reads it, with O_DIRECT (so reads come from the
// drive, not the page cache). The NVMe benches report the store's throughput
// as a ratio of it.
//
// Two write figures: the first write into freshly reserved space is slower
// on ext4 and XFS (every extent is converted from "unwritten" as it lands, a
// journaled metadata update), the second overwrites written blocks. The
// second is the store's steady state: its swap files are reserved once, and
// from the second optimizer step on every write lands on written blocks.
#pragma once

#include <cstdint>
#include <string>

#include "offload/swap_set.h"
#include "tierflow/status.h"

namespace tierflow::offload {

struct RawIoProbeOptions {
  std::string directory;                 // where the probe file goes (removed afterwards)
  uint64_t num_bytes = 1ull << 30;       // Default: 1 GiB
  uint32_t block_size_bytes = 1u << 20;  // Default: 1 MiB; a multiple of 4096
  uint32_t queue_depth = 32;             // Default: 32
  IoMode io_mode = IoMode::kDirect;      // Default: O_DIRECT
};

struct RawIoProbeResult {
  uint64_t num_bytes = 0;          // moved each way (num_bytes rounded up to a block)
  double first_write_seconds = 0;  // into freshly reserved space
  double write_seconds = 0;        // overwriting it: the steady state
  double read_seconds = 0;
  double first_write_gb_per_second = 0;
  double write_gb_per_second = 0;
  double read_gb_per_second = 0;
};

// Writes, writes again, then reads DIR/tierflow-raw-probe-PID-N.tmp
// (preallocated like swap files are) and removes it. Errors: those of open (Unavailable without
// O_DIRECT), fallocate (ResourceExhausted when the drive is full) and I/O,
// naming the path.
StatusOr<RawIoProbeResult> RunRawIoProbe(const RawIoProbeOptions& options);

}  // namespace tierflow::offload
