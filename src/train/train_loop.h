// The steps of a `tierflow train` run, once everything is built: each step's
// micro-batches and learning rate, the engine's step, the metrics record,
// evaluation, traces, checkpoints and the stop request; then the final
// checkpoint and model. RunTraining (trainer.cc) builds what it needs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "common/trace.h"
#include "data/data_loader.h"
#include "engine/offload_engine.h"
#include "io/dir_lock.h"
#include "io/file_system.h"
#include "model/param_layout.h"
#include "tierflow/device.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace tierflow {

// What the loop runs with; every reference outlives RunTrainLoop.
struct TrainLoopParts {
  const TrainConfig& config;
  TrainReporter& reporter;
  const std::atomic<bool>* stop = nullptr;
  FileSystem* file_system = nullptr;   // the final model's renames (null: the default)
  comm::Communicator* comm = nullptr;  // null: one process
  Device& device;
  OffloadEngine& engine;
  const ParamLayout& layout;
  DataLoader& loader;
  TraceRecorder& trace;
  const std::string& out_dir;
  const DirLock* out_lock = nullptr;  // the lead's
  const SourceModelFiles& source_files;
  int64_t tokens_per_step = 0;
  // Added to the run's first metrics record: which NVMe settings ran, what
  // the plan counted (plan_device_bytes, plan).
  nlohmann::json first_record;
};

// Runs steps start_step+1 .. config.steps (or to a stop request), appending
// a record a step to `metrics` (the lead's; null on the other ranks).
// Errors: the engine's, the checkpoint's, the final model's, and
// FailedPrecondition when every step of the run was skipped.
StatusOr<TrainResult> RunTrainLoop(TrainLoopParts& parts, int64_t start_step,
                                   WritableFile* metrics);

}  // namespace tierflow
