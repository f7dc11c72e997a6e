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
#include "train/train_reporter.h"

namespace tierflow {

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
