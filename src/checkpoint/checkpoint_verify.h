// Verifying checkpoints: one directory (trainer_state.json valid and sealed,
// every listed file's size and CRC32C, the optimizer state whole in either
// layout) and every checkpoint of an output directory, newest first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow {

// "step-00000100": the directory name of step 100's checkpoint.
std::string CheckpointDirName(int64_t step);

struct CheckpointInfo {
  std::string path;
  int64_t step = -1;
  bool verified = false;
  std::string problem;  // why it does not verify ("" when it does)
  // kHost or kNvme; nullopt when trainer_state.json is unreadable.
  std::optional<OffloadPlacement> layout;
  // The kind of `problem`: DataLoss (or InvalidArgument) when the checkpoint
  // itself was shown damaged (format, sizes, checksums); any other code
  // (NotFound for a missing NVMe directory, IoError for EIO,
  // FailedPrecondition for EACCES) means it could not be verified here and
  // now, and may verify later. kOk when verified.
  StatusCode problem_code = StatusCode::kOk;
  // Unverified for an environmental reason: never deleted by retention.
  bool environmental() const {
    return !verified && problem_code != StatusCode::kDataLoss &&
           problem_code != StatusCode::kInvalidArgument;
  }
};

// Every checkpoint directory under OUT/checkpoints, newest first, each
// verified (trainer_state.json parses; every listed file has its size and
// CRC32C), with why not and what kind of problem that is (problem_code).
std::vector<CheckpointInfo> ListCheckpoints(const std::string& out_dir);

// Checks one checkpoint directory (what ListCheckpoints does for each):
// trainer_state.json parses, matches its CRC32C and passes
// ParseTrainerState and ParseCheckpointLayout (the validators resume uses);
// every listed file is inside
// the checkpoint (no "..", no symlink) with its size and CRC32C; every unit
// name is a PathComponent and its num_params fits its state (Open); for the
// host layout every unit's file is listed; for the nvme layout every block of
// the swap set is read and checked. Never throws.
CheckpointInfo VerifyCheckpoint(const std::string& checkpoint_dir);

}  // namespace tierflow
