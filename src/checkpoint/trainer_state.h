// trainer_state.json: a checkpoint's counters, data position, optimizer
// layout and file list, and the one validator that tier verify, resume and
// every tier command read it through.
//
// Once on disk the file is outside input (a crafted or damaged checkpoint):
// it is read bounded and without following a link, parsed depth-limited with
// duplicate keys refused, checked against its own CRC32C, and every field is
// read typed and range-checked here, so `tier verify` and `train --resume`
// accept and refuse exactly the same files.
//
// Format (version 2): {"format": "tierflow.checkpoint", "version": 2,
// "crc32c": N, "step", "optimizer_step", "loss_scaler", "data", "loss",
// "model", "world_size", "sequences_per_step", "units", "files", and for the
// nvme layout "optimizer_layout": "nvme", "swap_set": {...}}. "crc32c" is the
// CRC32C of the compact serialization of the document without that key
// (nlohmann's dump(): keys sorted, numbers in their shortest round-trip form),
// so any change of any value is caught, whitespace aside. Version 1 files
// (tierflow before the checksum) are still read, and validated the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/loss_scaler.h"
#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow {

// Bounds of the validator: beyond them a value is not one tierflow wrote.
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 40;
inline constexpr int64_t kMaxCheckpointEpoch = int64_t{1} << 31;
inline constexpr int64_t kMaxCheckpointWorldSize = 65536;
inline constexpr int64_t kMaxCheckpointSequencesPerStep = int64_t{1} << 40;
inline constexpr size_t kMaxCheckpointModelNameBytes = 4096;

struct CheckpointState {
  int64_t step = 0;            // training-loop steps completed
  int64_t optimizer_step = 0;  // Adam's counter (skipped steps do not count): <= step
  LossScaler::State scaler{1.0f, 0, 0};
  nlohmann::json data_state;  // DataLoader::SaveState()
  double loss = 0;            // loss of the last step (NaN when it was not finite)
  std::string model;          // what is being trained (preset or directory)
  // Data parallelism: the ranks that wrote it, and the global batch in
  // sequences (micro-batch x accumulation x ranks); 0 when not recorded
  // (older checkpoints). A resume with another world size keeps the batch.
  int64_t world_size = 1;
  int64_t sequences_per_step = 0;
};

// Where an nvme-layout checkpoint's optimizer state lives.
struct CheckpointSwapSet {
  std::string run_id;
  std::vector<std::string> directories;  // the StateStore directories, in order
};

struct CheckpointLayout {
  OffloadPlacement layout = OffloadPlacement::kHost;  // kHost or kNvme, never kAuto
  CheckpointSwapSet swap_set;                         // nvme only
};

// trainer_state.json of a checkpoint, parsed (depth-limited, duplicate keys
// rejected), checked for format and version and against its CRC32C (version
// 2), not otherwise validated. A symlinked trainer_state.json is refused:
// tierflow never follows links out of a checkpoint. Errors: NotFound when it
// is missing; DataLoss naming the file (malformed, wrong checksum); errno
// errors of reading it.
StatusOr<nlohmann::json> ReadCheckpointState(const std::string& checkpoint_dir);

// The counters of a parsed trainer_state.json, every one typed and in range:
// 0 <= step <= 2^40, 0 <= optimizer_step <= step, a finite loss scale in
// (0, 3e38], good_steps and hysteresis_left in [0, 2^31), a data position
// whose epoch is in [0, 2^31) and whose counters are non-negative, a loss
// that is a number or null (not finite), a model name under 4 KiB,
// world_size in [1, 65536], sequences_per_step in [0, 2^40]. Errors:
// DataLoss naming `state_path`, the field and the value.
StatusOr<CheckpointState> ParseTrainerState(const nlohmann::json& doc,
                                            const std::string& state_path);

// The optimizer layout of a parsed trainer_state.json: "host", or "nvme" and
// its swap set, validated (the run id is a PathComponent; each directory an
// absolute path without "." or ".." components: CheckAbsolutePath). Errors:
// DataLoss naming `state_path` and the field.
StatusOr<CheckpointLayout> ParseCheckpointLayout(const nlohmann::json& doc,
                                                 const std::string& state_path);

// A new trainer_state.json document for `state` (format, version, counters);
// the caller adds "units", "files" and the layout, then seals it.
nlohmann::json NewTrainerStateDocument(const CheckpointState& state);

// The text to write for `doc`: its "version" set to the current one and its
// "crc32c" set to the checksum of the rest (any old one replaced).
std::string SealTrainerState(nlohmann::json doc);

// The CRC32C a version-2 trainer_state.json carries for `doc`: of its compact
// serialization without "crc32c".
uint32_t TrainerStateChecksum(nlohmann::json doc);

}  // namespace tierflow
