// NvmeTune: finding the store settings that suit a drive, as DeepSpeed's
// ds_nvme_tune does for its aio library.
//
// TuneNvme sweeps in two stages, every point through the store itself (CRC32C,
// block map, rings; offload/store_throughput.h) writing then reading the same
// bytes:
//   1. block size x queue depth, at 1 ring and 2 transfers in flight, each
//      point beside the raw io_uring loop (offload/raw_io_probe.h) at the same
//      block size and queue depth;
//   2. rings x transfers in flight at stage 1's choice.
// It reports the best setting for writes, the best for reads and the chosen
// one: the store has one block size for both (it is the swap files' layout),
// so one setting must serve both, and it is the one with the least time for
// a write plus a read of the same bytes (the optimizer reads and writes every
// byte once per step).
//
// ProbeNvme is the short form `tierflow train` runs at start-up when no
// profile names settings: block sizes only, store only, a bounded number of
// bytes; the same choice rule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "offload/swap_set.h"
#include "tierflow/nvme_io.h"
#include "tierflow/status.h"

namespace tierflow::offload {

struct NvmeTunePoint {
  NvmeIoSettings io;
  uint32_t in_flight = 0;
  double write_gb_per_second = 0, read_gb_per_second = 0;
  // The raw loop at the same block size and queue depth; 0 where not run.
  double raw_write_gb_per_second = 0, raw_read_gb_per_second = 0;
  // Seconds per GB written and then read: what the choice minimises.
  double SecondsPerGbBothWays() const { return 1 / write_gb_per_second + 1 / read_gb_per_second; }
};

struct NvmeTuneOptions {
  std::vector<std::string> directories;  // REQUIRES: non-empty
  IoMode io_mode = IoMode::kDirect;
  uint64_t bytes_per_point = 256ull << 20;  // written and read at each point
  uint64_t chunk_bytes = 48ull << 20;       // bytes per transfer (a sub-group's state)
  std::vector<uint32_t> block_sizes = {1u << 20, 4u << 20, 16u << 20, 64u << 20};
  std::vector<uint32_t> queue_depths = {2, 8, 32};
  std::vector<uint32_t> rings = {1, 2};
  std::vector<uint32_t> in_flights = {1, 2, 4, 8};
  bool raw = true;  // run the raw loop beside each stage-1 point
  // Each stage is measured this many times, round after round (so a drift
  // of the drive's rate shifts every point alike); each point keeps its best.
  uint32_t repeat = 1;
  bool fixed_buffers = true;
  // Called after each measurement of a point (progress); may be empty.
  std::function<void(const NvmeTunePoint&)> on_point;
};

struct NvmeTuneResult {
  std::vector<NvmeTunePoint> points;  // in the order measured
  NvmeTunePoint best_write, best_read, chosen;
  // The raw loop's best over every block size and queue depth tried (0 when
  // the raw loop was not run), and where.
  double raw_best_write_gb_per_second = 0, raw_best_read_gb_per_second = 0;
  uint32_t raw_best_write_block_bytes = 0, raw_best_read_block_bytes = 0;
};

// Errors: InvalidArgument (empty candidate lists, bad values), and those of
// the measurements (space, O_DIRECT, I/O), naming the setting measured.
StatusOr<NvmeTuneResult> TuneNvme(const NvmeTuneOptions& options);

struct NvmeProbeOptions {
  std::vector<std::string> directories;  // REQUIRES: non-empty
  IoMode io_mode = IoMode::kDirect;
  uint64_t bytes_per_point = 128ull << 20;
  uint64_t chunk_bytes = 48ull << 20;
  // Candidates; each is measured at ProbeQueueDepth(block), 1 ring, 2 in flight.
  std::vector<uint32_t> block_sizes = {1u << 20, 4u << 20, 16u << 20, 64u << 20};
};

// The queue depth the probe pairs with a block size: about 64 MiB in flight
// per ring, 2..32 requests.
uint32_t ProbeQueueDepth(uint32_t block_size_bytes);

// Errors: as TuneNvme.
StatusOr<NvmeTuneResult> ProbeNvme(const NvmeProbeOptions& options);

}  // namespace tierflow::offload
