// Config + machine -> plan input, plan, engine options: one path for plan and train.
#include "train/resolve_run.h"

#include <algorithm>
#include <filesystem>

#include "common/units.h"
#include "io/sim_profile_file.h"
#include "plan/hardware_profile.h"
#include "plan/memory_model.h"
#include "train/collectives_choice.h"

namespace tierflow {

StatusOr<PlanInput> PlanInputFor(const TrainConfig& c, const ModelConfig& model, DeviceKind kind,
                                 RunWorldShape world, uint64_t dataset_bytes,
                                 uint64_t nvme_block_bytes, int nvme_directories) {
  PlanInput in;
  in.model = model;
  TF_ASSIGN_OR_RETURN(
      in.device_collectives,
      ResolveDeviceCollectives(std::string(ChoiceName(c.collectives)), kind, world.ranks));
  in.gpus_per_node = std::clamp(world.gpus_per_node, 1, world.ranks);
  // Nodes of equal size; a last node with fewer ranks is planned as full.
  in.nodes = (world.ranks + in.gpus_per_node - 1) / in.gpus_per_node;
  in.dataset_bytes = dataset_bytes;
  // Bounded by ValidateTrainConfig (at most 2^40); the planner refuses one
  // below the model's largest tensor, naming it.
  if (c.grad_bucket_params.has_value()) {
    in.grad_bucket_params = static_cast<int64_t>(*c.grad_bucket_params);
  }
  in.lock_host_state = c.pin_memory;
  in.micro_batch = c.micro_batch;
  in.seq_len = c.seq_len;
  in.grad_accum = c.grad_accum;
  in.dtype = c.dtype;
  in.grad_transfer_dtype = c.grad_transfer_dtype;
  in.checkpointing = c.activation_checkpointing;
  in.offload_activations = c.offload_activations;
  in.offload_gradients = c.offload_gradients;
  if (c.mlp_tile_rows.has_value()) in.mlp_tile_rows = static_cast<int64_t>(*c.mlp_tile_rows);
  in.optimizer = OptimizerKind::kAdamW;
  in.offload = c.offload;
  if (c.offload == OffloadPlacement::kNvme) in.nvme_ratio = c.nvme_ratio;
  in.param_offload = c.offload_param;
  in.param_slots = c.param_slots;
  // DeepSpeed's rule accepts any size; past the largest unit every unit is
  // one sub-group, so the planner's bound changes nothing.
  in.sub_group_params = static_cast<int64_t>(
      c.sub_group_cut == SubGroupCut::kWholeTensors
          ? std::min<uint64_t>(c.sub_group_size, static_cast<uint64_t>(kMaxPlanParams))
          : c.sub_group_size);
  in.sub_group_cut = c.sub_group_cut;
  in.buffer_count = c.buffer_count;
  in.pipeline =
      c.pipeline == TrainPipeline::kSync ? PipelineKind::kSynchronous : PipelineKind::kOverlapped;
  // Bounded by ValidateTrainConfig (at most 2^40).
  if (c.speculation_params.has_value()) {
    in.speculation_params = static_cast<int64_t>(*c.speculation_params);
  }
  in.nvme_directories = std::max(1, nvme_directories);
  in.nvme_block_bytes = nvme_block_bytes;
  return in;
}

StatusOr<PlannedRun> PlanTrainingRun(const TrainConfig& config, const ModelConfig& model,
                                     const Hardware& hardware, DeviceKind kind, RunWorldShape world,
                                     uint64_t dataset_bytes, int nvme_directories,
                                     const NvmeIoChooser& choose_nvme_io) {
  PlannedRun run;
  run.sized = config;
  auto choose = [&]() -> Status {
    TF_ASSIGN_OR_RETURN(run.nvme_io, choose_nvme_io(run.sized));
    run.sized.buffer_count = run.nvme_io->buffer_count;
    return Status::Ok();
  };
  auto plan = [&]() -> Status {
    TF_ASSIGN_OR_RETURN(
        run.input, PlanInputFor(run.sized, model, kind, world, dataset_bytes,
                                run.nvme_io ? run.nvme_io->io.block_size_bytes : kNvmeBlockBytes,
                                nvme_directories));
    TF_ASSIGN_OR_RETURN(run.plan, ComputePlan(run.input, hardware));
    return Status::Ok();
  };
  if (config.offload == OffloadPlacement::kNvme) {
    TF_RETURN_IF_ERROR(choose());
  } else if (run.sized.buffer_count == 0) {
    run.sized.buffer_count = 4;
  }
  TF_RETURN_IF_ERROR(plan());
  if (config.offload == OffloadPlacement::kAuto && run.plan.feasible &&
      run.plan.placement.offload() == OffloadPlacement::kNvme) {
    // It put state on NVMe: choose how to drive the drive, and plan again.
    run.sized.buffer_count = config.buffer_count;
    TF_RETURN_IF_ERROR(choose());
    TF_RETURN_IF_ERROR(plan());
  }
  return run;
}

StatusOr<NvmeDirs> PrepareNvmeDirs(const TrainConfig& config, bool make_given) {
  NvmeDirs dirs;
  dirs.paths = config.nvme_paths;
  const bool nvme_possible = config.offload != OffloadPlacement::kHost ||
                             config.offload_param == ParamOffload::kNvme ||
                             config.offload_param == ParamOffload::kAuto;
  if (nvme_possible && dirs.paths.empty()) {
    TF_ASSIGN_OR_RETURN(dirs.temp, TempDirectory::Create(DefaultNvmeBase(), "tierflow-nvme",
                                                         "give one with --nvme-path DIR"));
    dirs.paths.push_back(dirs.temp.path());
  }
  for (const std::string& p : config.nvme_paths) {
    std::error_code ec;
    if (make_given) {
      std::filesystem::create_directories(p, ec);
      if (ec) return IoError("create NVMe directory " + p + ": " + ec.message());
    } else if (!std::filesystem::is_directory(p, ec)) {
      return NotFoundError("NVMe directory " + p +
                           " does not exist (train makes it): make it to plan with its free "
                           "space, or give the space with tierflow.nvme_capacity");
    }
  }
  return dirs;
}

StatusOr<PlannedRun> PlanConfiguredRun(const TrainConfig& config, const ModelConfig& model,
                                       const MachineDescription& machine, RunWorldShape world,
                                       uint64_t dataset_bytes, const NvmeDirs& dirs,
                                       const std::function<void(const std::string&)>& note) {
  TrainConfig resolved = config;
  resolved.profile = machine.profile_path;  // the one DescribeMachine read
  NvmeIoChooser choose = [&](const TrainConfig& sized) -> StatusOr<NvmeIoChoice> {
    NvmeIoChoiceInput input;
    input.nvme_paths = dirs.paths;
    input.buffered = sized.nvme_buffered;
    input.tuned = machine.nvme_store;
    input.largest_tensor_bytes =
        LargestStateTensorBytes(model, SubGroupRule{sized.sub_group_cut, sized.sub_group_size});
    TF_ASSIGN_OR_RETURN(NvmeIoChoice choice, ChooseNvmeIo(sized, input));
    note("NVMe I/O: " + choice.Describe());
    return choice;
  };
  return PlanTrainingRun(resolved, model, machine.hardware, machine.device_kind, world,
                         dataset_bytes, static_cast<int>(dirs.paths.size()), choose);
}

EngineOptions EngineOptionsFor(const PlannedRun& run, const std::vector<std::string>& nvme_paths,
                               int ranks) {
  const TrainConfig& c = run.sized;
  const Placement& placement = run.plan.placement;
  EngineOptions o;
  o.weights_dtype = c.dtype;
  o.grad_transfer_dtype = c.grad_transfer_dtype;
  o.adam = AdamOptions{.lr = c.lr,
                       .beta1 = c.beta1,
                       .beta2 = c.beta2,
                       .eps = c.eps,
                       .weight_decay = c.weight_decay,
                       .decoupled = c.optimizer != TrainOptimizer::kAdam,
                       .bias_correction = c.bias_correction};
  o.clip_grad_norm = c.gradient_clipping;
  o.loss_scaler = LossScalerOptions{.static_scale = c.loss_scale,
                                    .initial_scale_power = c.initial_scale_power,
                                    .scale_window = c.loss_scale_window,
                                    .hysteresis = c.hysteresis,
                                    .min_scale = c.min_loss_scale};
  o.offload = placement.offload();
  o.nvme_ratio = placement.nvme_ratio;
  o.nvme_paths = nvme_paths;
  o.nvme_buffered = c.nvme_buffered;
  o.sub_group_params = c.sub_group_size;
  o.sub_group_cut = c.sub_group_cut;
  o.buffer_count = c.buffer_count;
  o.lock_host_state = c.pin_memory;
  o.pipeline = c.pipeline == TrainPipeline::kSync ? Pipeline::kSynchronous : Pipeline::kOverlapped;
  // The speculation budget and the bucket size the plan counted.
  o.speculation_params = static_cast<uint64_t>(placement.speculation_params);
  o.grad_bucket_params = static_cast<uint64_t>(placement.grad_bucket_params);
  // Every step has grad_accum micro-batches per rank: the gradient buffers
  // the plan counted. Each Step gets the global step's list (every rank's).
  o.micro_batches_per_step = c.grad_accum * ranks;
  // The weights' placement the plan counted: which units stream, from where.
  const ParamPlacement& pp = placement.params;
  o.params.where = pp.where;
  o.params.streamed_units = pp.streamed_units;
  if (pp.where != ParamOffload::kNone) {
    o.params.device_slots = pp.device_slots;
    o.params.prefetch_depth = pp.prefetch_depth;
    o.params.nvme_staging = pp.nvme_staging;
  }
  // Where the plan put the gradients (it chose, under auto), and its slots.
  o.grad_offload = placement.gradients;
  if (placement.gradients == GradOffload::kNvme) o.grad_spill_slots = placement.grad_spill_slots;
  if (run.nvme_io) o.nvme_io = run.nvme_io->io;
  return o;
}

StatusOr<MachineRequest> MachineRequestFor(const TrainConfig& c) {
  MachineRequest r;
  r.device = c.device;
  // A given size replaces the machine's figure; its origin names it in the notes.
  auto given = [&c](const std::string& setting, const std::string& text,
                    std::optional<uint64_t>* bytes, std::string* origin) -> Status {
    if (text.empty()) return Status::Ok();
    auto it = c.origins.find(setting);
    *origin = it != c.origins.end() ? it->second : setting;
    StatusOr<uint64_t> parsed = ParseByteSize(text);
    if (!parsed.ok()) return parsed.status().WithContext(*origin);
    *bytes = *parsed;
    return Status::Ok();
  };
  TF_RETURN_IF_ERROR(
      given("host_memory", c.host_memory, &r.host_memory_bytes, &r.host_memory_origin));
  TF_RETURN_IF_ERROR(
      given("nvme_capacity", c.nvme_capacity, &r.nvme_capacity_bytes, &r.nvme_capacity_origin));
  r.nvme_paths = c.nvme_paths;
  r.profile = c.profile;
  return r;
}

StatusOr<DeviceOptions> DeviceOptionsFor(const TrainConfig& config, int cuda_ordinal) {
  DeviceOptions options;
  options.kind = config.device.choice;
  options.cuda_ordinal = cuda_ordinal;
  if (config.device.choice == DeviceChoice::kSim) {
    TF_ASSIGN_OR_RETURN(options.sim, ResolveSimProfile(config.device.sim_profile));
  }
  if (!config.device_memory.empty()) {
    TF_ASSIGN_OR_RETURN(options.memory_capacity_bytes, ParseByteSize(config.device_memory));
  }
  return options;
}

uint64_t LargestStateTensorBytes(const ModelConfig& model, SubGroupRule rule) {
  const SubGroupSummary s = SummarizeSubGroups(model, rule, 0.0, 12);
  const uint64_t array = (static_cast<uint64_t>(s.max_group_params) * 4 + 4095) / 4096 * 4096;
  return 3 * array;
}

}  // namespace tierflow
