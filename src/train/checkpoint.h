// Crash-safe training checkpoints: the model in the Hugging Face layout plus
// the full training state (fp32 master weights and Adam moments from
// whichever tier holds them, step counters, loss scaler, data position).
//
// Layout: OUT/checkpoints/step-00000100/
//   model/                       config.json + model.safetensors (HF, loadable by transformers)
//   optimizer/<unit>.safetensors master, exp_avg, exp_avg_sq of one unit (fp32), so
//                                memory holds one unit's state at a time
//   trainer_state.json           counters, data position, and every file's size and CRC32C
// A checkpoint is written into ".step-00000100.tmp-<pid>", every file fsync'd,
// trainer_state.json last, then the directory is renamed into place and its
// parent fsync'd: a crash at any moment leaves the previous checkpoints intact
// and at most a temporary directory, which is ignored (and removed by the next
// save). Resume verifies sizes and checksums and falls back to the newest
// checkpoint that verifies.
//
// The optimizer state may instead be in the "nvme" layout (`tierflow tier
// migrate --to nvme`): a kept swap set whose tensors are "<unit>/master",
// "<unit>/exp_avg", "<unit>/exp_avg_sq"; trainer_state.json then says
//   "optimizer_layout": "nvme", "swap_set": {"run_id": ..., "directories": [...]}
// and its "files" list only the model files. Every block of the set carries
// a CRC32C, which verification checks. For safetensors files "files" also
// records each tensor's byte range and CRC32C, so a corrupt file is reported
// with the tensor and bytes that changed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/path_component.h"
#include "engine/loss_scaler.h"
#include "engine/offload_engine.h"
#include "io/hf_side_files.h"
#include "model/hf_model.h"
#include "model/param_layout.h"
#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow {

struct CheckpointState {
  int64_t step = 0;            // training-loop steps completed
  int64_t optimizer_step = 0;  // Adam's counter (skipped steps do not count)
  LossScaler::State scaler{1.0f, 0, 0};
  nlohmann::json data_state;  // DataLoader::SaveState()
  double loss = 0;            // loss of the last step
  std::string model;          // what is being trained (preset or directory)
  // Data parallelism: the ranks that wrote it, and the global batch in
  // sequences (micro-batch x accumulation x ranks); 0 when not recorded
  // (older checkpoints). A resume with another world size keeps the batch.
  int64_t world_size = 1;
  int64_t sequences_per_step = 0;
};

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

// Where an nvme-layout checkpoint's optimizer state lives.
struct CheckpointSwapSet {
  std::string run_id;
  std::vector<std::string> directories;  // the StateStore directories, in order
};

// trainer_state.json is outside input once on disk (a crafted or damaged
// checkpoint): every field is read typed, without exceptions, and every name
// that becomes a path component goes through PathComponent.

// trainer_state.json of a checkpoint, parsed (depth-limited, duplicate keys
// rejected) and checked for format and version (not verified). A symlinked
// trainer_state.json is refused: tierflow never follows links out of a
// checkpoint. Errors: NotFound / DataLoss naming the file.
StatusOr<nlohmann::json> ReadCheckpointState(const std::string& checkpoint_dir);

// The optimizer layout of a parsed trainer_state.json: "host", or "nvme" and
// its swap set, validated (the run id is a PathComponent; each directory is
// an absolute path with no "." or ".." component). Errors: DataLoss naming
// `state_path` and the field.
struct CheckpointLayout {
  OffloadPlacement layout = OffloadPlacement::kHost;  // kHost or kNvme, never kAuto
  CheckpointSwapSet swap_set;                         // nvme only
};
StatusOr<CheckpointLayout> ParseCheckpointLayout(const nlohmann::json& doc,
                                                 const std::string& state_path);

// The optimizer state of a checkpoint in either layout, read one unit at a
// time (memory holds what the caller asks for). Does not verify the whole
// checkpoint; every read checks what it reads (safetensors structure, swap
// block CRC32Cs). Not thread-safe.
class CheckpointOptimizerState {
 public:
  struct Unit {
    PathComponent name;  // validated: it names the unit's file
    uint64_t num_params = 0;
  };
  // Errors: those of ReadCheckpointState; DataLoss when the layout fields
  // are malformed, the swap set cannot be opened, a unit name is not a
  // PathComponent or appears twice, a unit's state is a symlink or missing, or
  // num_params is more than the unit's file (host) or swap tensors (nvme)
  // hold — so callers may allocate units()[u].num_params floats per array.
  // Memory: nothing per parameter.
  static StatusOr<std::unique_ptr<CheckpointOptimizerState>> Open(
      const std::string& checkpoint_dir);
  virtual ~CheckpointOptimizerState() = default;
  OffloadPlacement layout() const { return layout_; }              // kHost or kNvme
  const CheckpointSwapSet& swap_set() const { return swap_set_; }  // nvme only
  const std::vector<Unit>& units() const { return units_; }
  const nlohmann::json& state() const { return state_; }
  int64_t step() const { return step_; }  // trainer_state.json "step" (0 when absent)
  // Reads unit `u`'s three fp32 arrays (units()[u].num_params floats each).
  // Errors name the file (and for swap files the tensor and byte range).
  Status ReadUnit(size_t u, float* master, float* exp_avg, float* exp_avg_sq) const {
    return ReadUnitRange(u, 0, units_.at(u).num_params, master, exp_avg, exp_avg_sq);
  }
  // The same for parameters [offset, offset + count) of the unit (`count`
  // floats each), so a resume holds one sub-group, not a unit (an 8B
  // model's LM head is 6 GB of state). Errors: InvalidArgument for a range
  // outside the unit; as ReadUnit.
  virtual Status ReadUnitRange(size_t u, uint64_t offset, uint64_t count, float* master,
                               float* exp_avg, float* exp_avg_sq) const = 0;

 protected:
  std::string dir_;
  OffloadPlacement layout_ = OffloadPlacement::kHost;
  CheckpointSwapSet swap_set_;
  std::vector<Unit> units_;
  nlohmann::json state_;
  int64_t step_ = 0;
};

// The relative path of unit `unit`'s host-layout file ("optimizer/<unit>.safetensors").
std::string OptimizerUnitFileName(const PathComponent& unit);
// The swap-set tensor name of `array` ("master", ...) of `unit`: "<unit>/<array>".
std::string OptimizerSwapTensorName(const std::string& unit, const std::string& array);
// The "files" entry of trainer_state.json for `rel` under `dir`: size,
// CRC32C, and for safetensors files each tensor's range and CRC32C.
StatusOr<nlohmann::json> DescribeCheckpointFile(const std::string& dir, const std::string& rel);
// Checks one "files" entry; "" when it matches, else what is wrong (for a
// changed safetensors file: which tensor and which bytes; for a path that
// is not inside `dir`, passes through a symlink or is mistyped: the field).
// `code` (optional) receives the kind of problem (CheckpointInfo::problem_code).
std::string CheckCheckpointFile(const std::string& dir, const nlohmann::json& entry,
                                StatusCode* code = nullptr);

// What retention did after a save.
struct RetentionReport {
  std::vector<std::string> removed;             // superseded checkpoint directories
  std::vector<CheckpointInfo> kept_unverified;  // could not be verified here and now: kept
};

// Writes the checkpoint of `state.step`, then retention: removes what is
// positively superseded among the checkpoints older than it — verified ones
// beyond the newest `keep` verified, damaged ones (CheckpointInfo::problem_code
// DataLoss) older than the newest verified — and stale temporary directories.
// A checkpoint unverified for an environmental reason (a missing NVMe
// directory, EIO, EACCES) is never removed; `retention` (optional) lists it.
// REQUIRES: the engine is idle (after OffloadEngine::Finish); the caller
// holds OUT's DirLock (io/dir_lock.h), so no other process saves there.
// Errors: I/O errors naming the file; earlier checkpoints are never touched
// before the new one is complete.
// What a saved model keeps from the Hugging Face directory it was trained
// from (read when the run starts): the source's config.json text (only
// torch_dtype is replaced) and its tokenizer, generation and chat-template
// files. Empty for a preset.
struct SourceModelFiles {
  std::string config_json;
  HfSideFiles side;
  // How the source stores its weights (dtype, shards, names); unset for a
  // source without weights (a config.json alone).
  std::optional<HfSourceLayout> weights;
};

// How a model trained from `source` (may be null) is saved: the source's
// dtype, shard size and tensor names where it has weights, else
// `training_dtype` and transformers' 5 GB shards; config.json from the source.
HfModelSaveOptions SavedModelOptions(const SourceModelFiles* source, DType training_dtype);

// `source` (optional) makes the checkpoint's model/ the source's config.json
// and side files beside the weights (each listed and checksummed).
Status SaveTrainingCheckpoint(const std::string& out_dir, OffloadEngine& engine,
                              const ParamLayout& layout, const CheckpointState& state, int keep = 2,
                              RetentionReport* retention = nullptr,
                              const SourceModelFiles* source = nullptr);

// Every checkpoint directory under OUT/checkpoints, newest first, each
// verified (trainer_state.json parses; every listed file has its size and
// CRC32C), with why not and what kind of problem that is (problem_code).
std::vector<CheckpointInfo> ListCheckpoints(const std::string& out_dir);

// Checks one checkpoint directory (what ListCheckpoints does for each):
// trainer_state.json parses and is well typed; every listed file is inside
// the checkpoint (no "..", no symlink) with its size and CRC32C; every unit
// name is a PathComponent and its num_params fits its state (Open); for the
// host layout every unit's file is listed; for the nvme layout every block of
// the swap set is read and checked. Never throws.
CheckpointInfo VerifyCheckpoint(const std::string& checkpoint_dir);

// Loads a verified checkpoint into the engine (master weights, moments, the
// device weights, the step counter and loss scaler) and returns its state.
// With `upload` false the device weights are left to the caller
// (UploadAllWeights): data-parallel ranks agree that every rank loaded
// before that all-gather.
// Errors: DataLoss naming the file when it does not verify; FailedPrecondition
// when it was written for another model (unit names or sizes differ).
StatusOr<CheckpointState> LoadTrainingCheckpoint(const std::string& checkpoint_dir,
                                                 OffloadEngine& engine, const ParamLayout& layout,
                                                 bool upload = true);

}  // namespace tierflow
