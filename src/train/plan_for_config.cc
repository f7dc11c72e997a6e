// The plan of a training configuration, by train's own stages.
#include "train/plan_for_config.h"

#include <memory>

#include "tierflow/device.h"
#include "train/resolve_run.h"
#include "train/run_data.h"
#include "train/run_machine.h"

namespace tierflow {
namespace {

// The device train would create, or none where a GPU that is not here is
// described by its memory.
StatusOr<std::unique_ptr<Device>> DeviceTrainWouldCreate(const TrainConfig& config,
                                                         const ConfigPlanRequest& request) {
  const DeviceChoice choice = config.device.choice;
  const bool gpu_here = BuiltWithCuda() && CudaUnavailableReason().empty();
  if (request.gpu_memory_bytes) {
    if (choice == DeviceChoice::kCpu || choice == DeviceChoice::kSim) {
      return InvalidArgumentError(
          "--gpu-memory describes a GPU, and the configuration's device is " +
          std::string(choice == DeviceChoice::kCpu ? "cpu" : "sim:" + config.device.sim_profile) +
          ": drop --gpu-memory (that device's memory is tierflow.device_memory)");
    }
    if (gpu_here) {
      return InvalidArgumentError(
          "--gpu-memory describes a GPU that is not here, and this machine has one (train "
          "would use it): drop --gpu-memory");
    }
    return std::unique_ptr<Device>();
  }
  if (choice == DeviceChoice::kCuda && !gpu_here) {
    return UnavailableError("the configuration's device is cuda and no GPU answers (" +
                            CudaUnavailableReason() +
                            "): give --gpu-memory SIZE to plan for a GPU that is not here");
  }
  TF_ASSIGN_OR_RETURN(DeviceOptions options, DeviceOptionsFor(config, 0));
  return CreateDevice(options);
}

}  // namespace

StatusOr<ConfigPlan> PlanForConfig(const TrainConfig& config, const ConfigPlanRequest& request) {
  TF_RETURN_IF_ERROR(ValidateTrainConfig(config));
  const RunWorldShape shape{request.gpus_per_node * request.nodes, request.gpus_per_node};
  TF_ASSIGN_OR_RETURN(MachineRequest machine_request, MachineRequestFor(config));
  RunDataBudget budget;
  budget.host_memory_bytes = machine_request.host_memory_bytes.value_or(0);
  budget.local_ranks = shape.gpus_per_node;
  budget.ranks = shape.ranks;
  TF_ASSIGN_OR_RETURN(RunData data, LoadRunData(config, budget));
  ConfigPlan out;
  if (!data.note.empty()) out.notes.push_back(data.note);
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, DeviceTrainWouldCreate(config, request));
  TF_ASSIGN_OR_RETURN(NvmeDirs dirs, PrepareNvmeDirs(config, /*make_given=*/false));
  machine_request.live = device.get();
  machine_request.device_memory_bytes = request.gpu_memory_bytes;
  machine_request.nvme_paths = dirs.paths;
  machine_request.nodes = request.nodes;
  TF_ASSIGN_OR_RETURN(MachineDescription machine, DescribeMachine(machine_request));
  TF_ASSIGN_OR_RETURN(
      PlannedRun run,
      PlanConfiguredRun(config, data.model.config, machine, shape, data.loader->MemoryBytes(), dirs,
                        [&](const std::string& n) { out.notes.push_back(n); }));
  out.input = std::move(run.input);
  out.hardware = machine.hardware;
  out.default_profile = machine.default_profile;
  out.plan = std::move(run.plan);
  out.notes.insert(out.notes.begin(), machine.notes.begin(), machine.notes.end());
  return out;
}

}  // namespace tierflow
