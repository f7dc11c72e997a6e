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

#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/optimizer_state.h"
#include "checkpoint/trainer_state.h"
#include "engine/loss_scaler.h"
#include "engine/offload_engine.h"
#include "io/hf_side_files.h"
#include "model/hf_model.h"
#include "model/param_layout.h"
#include "tierflow/placement.h"
#include "tierflow/status.h"

namespace tierflow {

// The format, the validators, verification and the optimizer state's
// readers live in the checkpoint layer (src/checkpoint/), below train and
// tier; this file writes checkpoints from a running engine and loads them
// back into one.

// What retention did after a save.
struct RetentionReport {
  std::vector<std::string> removed;             // superseded checkpoint directories
  std::vector<CheckpointInfo> kept_unverified;  // could not be verified here and now: kept
  std::vector<std::string> notes;               // swap sets a retired checkpoint did not own, kept
};

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

// Writes the checkpoint of `state.step`, then retention: removes what is
// positively superseded among the checkpoints older than it — verified ones
// beyond the newest `keep` verified, damaged ones (CheckpointInfo::problem_code
// DataLoss) older than the newest verified — and stale temporary directories.
// A checkpoint unverified for an environmental reason (a missing NVMe
// directory, EIO, EACCES) is never removed; `retention` (optional) lists it.
// REQUIRES: the engine is idle (after OffloadEngine::Finish); the caller
// holds OUT's DirLock (io/dir_lock.h), so no other process saves there.
// A retired nvme-layout checkpoint's swap set goes with it only when the
// checkpoint owns it (checkpoint/swap_set_owner.h): a copy of another run's
// checkpoint leaves that run's set alone (`retention` notes it).
// Errors: I/O errors naming the file; earlier checkpoints are never touched
// before the new one is complete.
// `source` (optional) makes the checkpoint's model/ the source's config.json
// and side files beside the weights (each listed and checksummed).
Status SaveTrainingCheckpoint(const std::string& out_dir, OffloadEngine& engine,
                              const ParamLayout& layout, const CheckpointState& state, int keep = 2,
                              RetentionReport* retention = nullptr,
                              const SourceModelFiles* source = nullptr);

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
