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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/loss_scaler.h"
#include "engine/offload_engine.h"
#include "model/param_layout.h"
#include "tierflow/status.h"

namespace tierflow {

struct CheckpointState {
  int64_t step = 0;             // training-loop steps completed
  int64_t optimizer_step = 0;   // Adam's counter (skipped steps do not count)
  LossScaler::State scaler{1.0f, 0, 0};
  nlohmann::json data_state;    // DataLoader::SaveState()
  double loss = 0;              // loss of the last step
  std::string model;            // what is being trained (preset or directory)
};

struct CheckpointInfo {
  std::string path;
  int64_t step = -1;
  bool verified = false;
  std::string problem;  // why it does not verify ("" when it does)
};

// Writes the checkpoint of `state.step`, then removes all but the newest
// `keep` complete checkpoints (and stale temporary directories). REQUIRES:
// the engine is idle (after OffloadEngine::Finish).
// Errors: I/O errors naming the file; earlier checkpoints are never touched
// before the new one is complete.
Status SaveTrainingCheckpoint(const std::string& out_dir, OffloadEngine& engine,
                              const ParamLayout& layout, const CheckpointState& state,
                              int keep = 2);

// Every checkpoint directory under OUT/checkpoints, newest first, each
// verified (trainer_state.json parses; every listed file has its size and CRC32C).
std::vector<CheckpointInfo> ListCheckpoints(const std::string& out_dir);

// Checks one checkpoint directory (what ListCheckpoints does for each).
CheckpointInfo VerifyCheckpoint(const std::string& checkpoint_dir);

// Loads a verified checkpoint into the engine (master weights, moments, the
// device weights, the step counter and loss scaler) and returns its state.
// Errors: DataLoss naming the file when it does not verify; FailedPrecondition
// when it was written for another model (unit names or sizes differ).
StatusOr<CheckpointState> LoadTrainingCheckpoint(const std::string& checkpoint_dir,
                                                 OffloadEngine& engine, const ParamLayout& layout);

}  // namespace tierflow
