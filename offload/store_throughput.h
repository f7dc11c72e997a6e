// StoreThroughput: how fast the StateStore itself (block map, CRC32C on
// every block, rings and all) writes, rewrites and then reads a given number
// of bytes at given settings, the way the optimizer uses it: tensors of
// `chunk_bytes` (one sub-group's state), `in_flight` transfers outstanding
// (writes behind, then reads ahead). The swap set lives in a private directory,
// DIR/tierflow-probe-PID-N, removed afterwards; one left by a process that was
// killed is removed by the next measurement there, and none ever sits in
// DIR/tierflow-swap, where it would block the next run as a stale set. Used by
// `tierflow bench nvme`, its --tune sweep and `tierflow train`'s start-up probe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "offload/swap_set.h"
#include "tierflow/nvme_io.h"
#include "tierflow/status.h"

namespace tierflow::offload {

struct StoreThroughputOptions {
  std::vector<std::string> directories;  // one per drive. REQUIRES: non-empty
  IoMode io_mode = IoMode::kDirect;
  NvmeIoSettings io;
  // Bytes written, then read (rounded up to whole chunks' blocks as the store lays them out).
  uint64_t num_bytes = 256ull << 20;
  // Bytes per transfer: a multiple of 4096. Default: 48 MiB, the state of a
  // default sub-group (4Mi parameters x 12 B).
  uint64_t chunk_bytes = 48ull << 20;
  // Transfers outstanding. Default: 2.
  uint32_t in_flight = 2;
  // Register the transfer buffers with the rings (a memlock refusal is
  // reported, not fatal). Default: true.
  bool fixed_buffers = true;
};

struct StoreThroughputResult {
  uint64_t num_bytes = 0;  // moved each way
  // The first write lands on freshly reserved blocks (slower on ext4 and XFS,
  // see raw_io_probe.h); "write" is a rewrite of every tensor onto written
  // blocks, the steady state of a run; then "read" reads them all.
  double first_write_seconds = 0, write_seconds = 0, read_seconds = 0;
  double first_write_gb_per_second = 0, write_gb_per_second = 0, read_gb_per_second = 0;
  double cpu_seconds = 0;  // process CPU time (all threads) of the timed rewrite and read
  bool fixed_buffers = false;
  std::string fixed_buffers_reason;  // why not, when not
  bool files_registered = false;
};

// Errors: InvalidArgument (settings, sizes), those of StateStore::Create
// (stale sets, no O_DIRECT, space) and of the I/O; Internal when the bytes
// read back differ from those written. Nothing is left on disk.
StatusOr<StoreThroughputResult> MeasureStoreThroughput(const StoreThroughputOptions& options);

}  // namespace tierflow::offload
