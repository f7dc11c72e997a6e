// Which settings the NVMe tier of a `tierflow train` run drives its drive
// with, and why. Per setting, the first that has it wins:
//   1. DeepSpeed's aio keys (aio.block_size, aio.queue_depth,
//      aio.thread_count / intra_op_parallelism) and
//      tierflow.buffer_count, when given;
//   2. the hardware profile's "nvme_store" (`--profile`, written by `bench
//      nvme --tune` or `bench all`);
//   3. without one, a start-up probe at the swap directories: the store
//      writes and reads a bounded number of bytes at each candidate block
//      size (offload/nvme_tune.h, ProbeNvme) and the least write+read time
//      wins; the queue depth goes with the block size (ProbeQueueDepth), one
//      ring.
// A block size that did not come from aio.block_size is capped at the
// largest sub-group's state (a larger block holds no more data per request,
// only wastes space in the swap files). The probe's candidates are
// ProbeCandidates: with only one, nothing is probed. The choice, its sources and the
// probe's figures are one log line and the "nvme_io" object of the run's
// first metrics record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/hardware_profile.h"
#include "tierflow/nvme_io.h"
#include "tierflow/status.h"
#include "train/train_config.h"

namespace tierflow {

struct NvmeIoChoice {
  NvmeIoSettings io;
  uint32_t in_flight = 2;  // sub-group transfers the slots allow beside the one held and one free
  int buffer_count = 4;    // the engine's NVMe I/O (and weight staging) slots
  // Where each came from: "aio.block_size", "profile P", "start-up probe",
  // "default", "capped at the largest sub-group's state", ...
  std::string block_source, queue_depth_source, rings_source, buffer_count_source;
  bool probed = false;
  double probe_seconds = 0;
  nlohmann::json probe_points = nlohmann::json::array();  // {block_size_bytes, write/read GB/s}

  // One line for the log: the settings, then why.
  std::string Describe() const;
  // {"block_size_bytes", "queue_depth", "num_rings", "buffer_count",
  //  "in_flight", "sources": {...}, "probe": [...] (when probed)}.
  nlohmann::json ToJson() const;
};

struct NvmeIoChoiceInput {
  std::vector<std::string> nvme_paths;  // REQUIRES: non-empty, existing directories
  // The largest sub-group's state tensor in bytes (the NVMe tier's largest
  // transfer; its chunk in the probe). REQUIRES: > 0.
  uint64_t largest_tensor_bytes = 0;
  bool buffered = false;  // page-cache I/O: no probe (it would measure RAM)
  // The "nvme_store" of the profile at config.profile (DescribeMachine read
  // it); nullopt when that profile is not tuned or there is none.
  std::optional<NvmeStoreProfile> tuned;
};

// The block sizes the probe tries for sub-groups of up to
// `largest_tensor_bytes`: those of {1, 4, 16, 64} MiB that fit, and the
// largest sub-group's state itself (rounded to 4 KiB) when none fits or it is
// at least twice the largest that does (one request per transfer).
std::vector<uint32_t> ProbeCandidates(uint64_t largest_tensor_bytes);

// Errors: those of the probe (space, O_DIRECT, I/O), with what was being done.
StatusOr<NvmeIoChoice> ChooseNvmeIo(const TrainConfig& config, const NvmeIoChoiceInput& input);

}  // namespace tierflow
