// Plan and train are one function: a run's configuration and its machine
// become the planner's input, the plan, and the engine's options here, and
// nowhere else. `tierflow train` calls PlanTrainingRun with the device it
// created; `tierflow plan --config FILE` calls it with the device that run
// would create (or the GPU its flags describe), so the plan it prints is the
// plan train runs (tests/train/plan_equals_train_test).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_options.h"
#include "io/temp_directory.h"
#include "plan/planner.h"
#include "tierflow/device.h"
#include "tierflow/status.h"
#include "train/nvme_io_choice.h"
#include "train/run_machine.h"
#include "train/train_config.h"

namespace tierflow {

// The ranks a run has and how many share a node (its RAM, NVMe and cores).
struct RunWorldShape {
  int ranks = 1;
  int gpus_per_node = 1;  // clamped to 1..ranks; the last node may hold fewer
};

// What the planner is asked for `config` on a device of `kind`: the batch,
// precision, placements and pipeline as configured, the collectives as
// ResolveDeviceCollectives decides them, the data's host bytes and the NVMe
// tier's block. `config.buffer_count` must be the resolved one (non-zero).
StatusOr<PlanInput> PlanInputFor(const TrainConfig& config, const ModelConfig& model,
                                 DeviceKind kind, RunWorldShape world, uint64_t dataset_bytes,
                                 uint64_t nvme_block_bytes, int nvme_directories);

// Chooses the NVMe tier's I/O for a configuration whose buffer_count is as
// given (train: ChooseNvmeIo, with a start-up probe unless the aio keys or
// a profile settle it).
using NvmeIoChooser = std::function<StatusOr<NvmeIoChoice>(const TrainConfig&)>;

struct PlannedRun {
  PlanInput input;
  Plan plan;
  TrainConfig sized;                    // the configuration with buffer_count resolved
  std::optional<NvmeIoChoice> nvme_io;  // when the state or weights go to NVMe
};

// The plan the run takes. With --offload-optimizer nvme the NVMe I/O is
// chosen first (it may want more slots, and sets the block the state is
// rounded to); with auto, a plan that puts state on NVMe is made again with
// that choice, and the second plan is the one that runs. An infeasible plan
// is returned as such (the caller decides: train refuses, plan reports).
StatusOr<PlannedRun> PlanTrainingRun(const TrainConfig& config, const ModelConfig& model,
                                     const Hardware& hardware, DeviceKind kind, RunWorldShape world,
                                     uint64_t dataset_bytes, int nvme_directories,
                                     const NvmeIoChooser& choose_nvme_io);

// The NVMe directories of a run: those configured, or a temporary one when
// the state or the weights' copy may go to NVMe (the planner needs one to
// count, the I/O choice one to probe). `make_given`: create the configured
// ones (train); else they must exist (plan, which writes nothing of the
// user's). Errors name the directory.
struct NvmeDirs {
  TempDirectory temp;
  std::vector<std::string> paths;
};
StatusOr<NvmeDirs> PrepareNvmeDirs(const TrainConfig& config, bool make_given);

// PlanTrainingRun for a configuration as given: its profile resolved (the
// one `bench all` saved when none is named) and its NVMe I/O chosen by
// ChooseNvmeIo at `dirs` (aio keys > profile > start-up probe), each choice
// said through `note`.
StatusOr<PlannedRun> PlanConfiguredRun(const TrainConfig& config, const ModelConfig& model,
                                       const MachineDescription& machine, RunWorldShape world,
                                       uint64_t dataset_bytes, const NvmeDirs& dirs,
                                       const std::function<void(const std::string&)>& note);

// The engine's options for a planned run: the configuration's optimizer,
// precision and pipeline, and the plan's placements, buckets, speculation
// and streamed weights. The caller adds what only a live run has
// (communicators, trace, run id, backends).
EngineOptions EngineOptionsFor(const PlannedRun& run, const std::vector<std::string>& nvme_paths,
                               int ranks);

// The machine figures the configuration gives (its device, host_memory,
// nvme_capacity, NVMe paths and profile), each named by its setting's origin.
// Errors: a byte size that does not parse, named by its origin
// (ValidateTrainConfig refuses those first).
StatusOr<MachineRequest> MachineRequestFor(const TrainConfig& config);

// The device the run creates (train; `plan --config` too, where it can):
// `cuda_ordinal` picks the GPU.
StatusOr<DeviceOptions> DeviceOptionsFor(const TrainConfig& config, int cuda_ordinal);

// The largest sub-group's state as the NVMe tier stores it: master weights
// and two moments, each array padded to 4 KiB (engine/nvme_state_tier.h).
uint64_t LargestStateTensorBytes(const ModelConfig& model, SubGroupRule rule);

}  // namespace tierflow
