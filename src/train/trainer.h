// The training loop of `tierflow train`: model, data, engine, schedule,
// evaluation, metrics, traces, checkpoints and resume.
//
// Library code: it reports through a TrainReporter (the command prints
// progress), never prints or exits itself. A stop request (SIGINT/SIGTERM in
// the command) ends the run after the current step with a checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/peer_watch.h"
#include "engine/engine_options.h"
#include "io/file_system.h"
#include "offload/io_backend.h"
#include "train/train_config.h"

namespace tierflow {

struct RunInfo {
  int rank = 0, world_size = 1;  // data parallelism: this process among the ranks
  std::string device;            // description
  std::string model;             // name and parameter count
  int64_t params = 0;
  int64_t train_tokens = 0, eval_tokens = 0;
  std::string offload;       // where the optimizer state lives
  std::string offload_from;  // who chose that: the planner, or the configuration
  // The rates the plan (placement, speculation budget, predicted step) used:
  // a profile and how old it is, or the defaults and where a profile was looked for.
  std::string rates;
  std::string nvme_dir;  // "" when on host
  std::string out_dir;
  int64_t start_step = 0;    // > 0 when resumed
  std::string resumed_from;  // checkpoint path, "" when starting fresh
  int64_t tokens_per_step = 0;
  double predicted_step_seconds = 0;  // the planner's prediction
  // Parameters updated speculatively per step, and where that figure came
  // from (Placement::speculation_from: "free host memory", "input", ...).
  int64_t speculation_params = 0;
  std::string speculation_from;
  DType grad_transfer_dtype = DType::kBF16;  // what gradients cross PCIe in
};

struct StepReport {
  int64_t step = 0, total_steps = 0;
  StepStats stats;
  float lr = 0;
  double tokens_per_second = 0;
  double elapsed_seconds = 0;
  double eta_seconds = 0;
  uint64_t device_bytes = 0, pinned_bytes = 0, host_state_bytes = 0, nvme_bytes = 0;
};

class TrainReporter {
 public:
  virtual ~TrainReporter() = default;
  virtual void OnStart(const RunInfo& info) {}
  virtual void OnNote(const std::string& message) {}  // e.g. "no checkpoint: starting fresh"
  virtual void OnStep(const StepReport& report) {}
  virtual void OnEval(int64_t step, double eval_loss) {}
  virtual void OnCheckpoint(int64_t step, const std::string& path) {}
};

struct TrainResult {
  int64_t steps_done = 0;  // the loop's step counter at the end
  // This run's steps skipped for non-finite gradients (nothing updated).
  // Some may be (fp16's loss scale finding its level); when every step of
  // the run is, RunTraining returns FailedPrecondition instead of a result
  // and saves neither a final checkpoint nor the final model.
  int64_t steps_skipped = 0;
  double first_loss = 0, last_loss = 0;
  double eval_loss = -1;        // last eval loss (-1: none)
  std::string final_model_dir;  // OUT/model; "" when final_save is "none"
  bool stopped = false;         // ended early by a stop request
  double seconds = 0;
  // The NVMe settings the run used and why (NvmeIoChoice::ToJson); null
  // without an NVMe tier.
  nlohmann::json nvme_io;
};

// Test seams: what a test may swap in below the configuration.
struct TrainHooks {
  offload::IoBackendFactory nvme_backend_factory;  // e.g. a fault-injecting backend
  // The renames and directory fsync that put the final model in place
  // (null: DefaultFileSystem()).
  FileSystem* file_system = nullptr;
  // The host RAM the planner may place into (and instruction data's budget
  // is taken from), instead of what the machine reports (0: detect), to
  // test its placement on any machine.
  uint64_t host_memory_bytes = 0;
};

// Data parallelism: this process is one of comm->world_size() ranks, of
// which `local_size` share this node (its cores, RAM and NVMe). Null comm
// or a world of 1: one process.
struct TrainWorld {
  comm::Communicator* comm = nullptr;
  // How a wait on a dead peer ends the job (the MPI side's liveness check):
  // given to the NCCL communicator too.
  comm::PeerWatch peer_watch;
  int local_rank = 0;  // among this node's ranks: picks the GPU
  int local_size = 1;
};

// Runs `config` to completion, or until *stop becomes true or a cancellation
// is requested (common/cancel.h): then it checkpoints at the step boundary and
// returns with `stopped`. A request before the first step cancels the setup
// (Aborted); a second request also interrupts a checkpoint in progress.
StatusOr<TrainResult> RunTraining(const TrainConfig& config, TrainReporter& reporter,
                                  const std::atomic<bool>* stop = nullptr,
                                  const TrainHooks* hooks = nullptr, const TrainWorld& world = {});

}  // namespace tierflow
