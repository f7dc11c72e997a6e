// The training run of `tierflow train`, in stages: the ranks, the output
// directory, the model and data (run_data.h), the device, the plan
// (resolve_run.h: the same function `tierflow plan --config` calls), the
// model and engine, the resume, and the step loop (train_loop.h).
#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>

#include "checkpoint/swap_set_owner.h"
#include "comm/agree.h"
#include "comm/communicator.h"
#include "comm/self_communicator.h"
#include "common/trace.h"
#include "common/units.h"
#include "engine/offload_engine.h"
#include "io/dir_lock.h"
#include "io/file_system.h"
#include "io/output_path.h"
#include "io/sim_profile_file.h"
#include "io/temp_directory.h"
#include "model/transformer.h"
#include "offload/swap_set.h"
#include "plan/hardware_profile.h"
#include "plan/plan_json.h"
#include "plan/plan_report.h"
#include "plan/planner.h"
#include "train/checkpoint.h"
#include "train/collectives_choice.h"
#include "train/nvme_io_choice.h"
#include "train/resolve_run.h"
#include "train/run_data.h"
#include "train/run_machine.h"
#include "train/run_outputs.h"
#include "train/swap_registry.h"
#include "train/train_loop.h"

namespace tierflow {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// A resume with another world size keeps the global batch (sequences per
// step), so the curve goes on: the ranks re-cut the state on load, and the
// data position is the same whatever the world size (every rank reads the
// whole global step; rank r runs micro-batches r, r + N, ...).
Status CheckSameGlobalBatch(const CheckpointState& state, const TrainConfig& config, int ranks,
                            const std::string& path) {
  const int64_t here = static_cast<int64_t>(config.micro_batch) * config.grad_accum * ranks;
  if (state.sequences_per_step == 0 || state.world_size == ranks ||
      state.sequences_per_step == here) {
    return Status::Ok();
  }
  const int64_t per_accum = static_cast<int64_t>(config.micro_batch) * ranks;
  const std::string fix =
      state.sequences_per_step % per_accum == 0
          ? "resume with --grad-accum " + std::to_string(state.sequences_per_step / per_accum) +
                " to keep it"
          : std::to_string(ranks) + " ranks of micro-batch " + std::to_string(config.micro_batch) +
                " cannot share " + std::to_string(state.sequences_per_step) +
                " sequences per step evenly: use a world size (or micro-batch) that divides it";
  return FailedPreconditionError(
      "checkpoint " + path + " was written by " + std::to_string(state.world_size) +
      " ranks with " + std::to_string(state.sequences_per_step) +
      " sequences per step; this run of " + std::to_string(ranks) + " ranks would take " +
      std::to_string(here) + " (micro-batch " + std::to_string(config.micro_batch) +
      " x accumulation " + std::to_string(config.grad_accum) + " x " + std::to_string(ranks) +
      " ranks): " + fix);
}

// The checkpoint to resume from ("" = start fresh): --resume-from's, or with
// --resume the newest one. When the newest does not verify, --resume does not
// fall back to an older one on its own: the newer state would be lost, and
// retention would later remove it (and its swap set) for good.
// A checkpoint past --steps leaves nothing to train: a run that went on
// would report a result it did not compute and replace OUT/model with a later
// step's weights than the run asks for. (At --steps exactly is the run that
// was stopped between its last checkpoint and its final model: the resume
// trains nothing and writes OUT/model from that checkpoint.) Errors:
// FailedPrecondition naming both and what to do.
Status CheckStepsLeft(const TrainConfig& config, const CheckpointInfo& checkpoint) {
  if (checkpoint.step <= config.steps) return Status::Ok();
  return FailedPreconditionError(
      "nothing to train: checkpoint " + checkpoint.path + " is at step " +
      std::to_string(checkpoint.step) + ", past --steps " + std::to_string(config.steps) +
      " (--steps counts from the start of the run, resumes included). Raise --steps to train "
      "on, or take that checkpoint's model from its model/ directory; OUT/model was left as it "
      "is");
}

StatusOr<std::string> ChooseResumeCheckpoint(const TrainConfig& config, const std::string& out_dir,
                                             TrainReporter& reporter) {
  if (!config.resume_from.empty()) {
    const CheckpointInfo named = VerifyCheckpoint(config.resume_from);
    if (!named.verified) {
      return Status(named.problem_code,
                    "--resume-from " + config.resume_from + " does not verify: " + named.problem);
    }
    TF_RETURN_IF_ERROR(CheckStepsLeft(config, named));
    return config.resume_from;
  }
  if (!config.resume) return std::string();
  const std::vector<CheckpointInfo> all = ListCheckpoints(out_dir);
  if (all.empty()) {
    reporter.OnNote("--resume: no checkpoint under " + out_dir +
                    "/checkpoints; starting from the beginning");
    return std::string();
  }
  const CheckpointInfo& newest = all.front();
  if (newest.verified) {
    TF_RETURN_IF_ERROR(CheckStepsLeft(config, newest));
    return newest.path;
  }
  std::string older;
  for (const CheckpointInfo& c : all) {
    if (c.verified) {
      older = c.path;
      break;
    }
  }
  return FailedPreconditionError(
      "--resume: the newest checkpoint " + newest.path + " does not verify: " + newest.problem +
      (newest.environmental()
           ? " (this may pass once the cause is fixed, e.g. its NVMe directory is mounted again; "
             "the checkpoint is kept)"
           : "") +
      ". tierflow does not fall back past a newer checkpoint on its own: fix it and resume "
      "again, or name an older checkpoint with --resume-from DIR" +
      (older.empty() ? " (none of the others verifies either)"
                     : " (the newest that verifies is " + older + ")"));
}

// Where the optimizer state lives, for the start-up lines.
std::string DescribePlacement(const Placement& p) {
  char ratio[64];
  std::snprintf(ratio, sizeof ratio, "%.2f", p.nvme_ratio);
  std::string out = p.where() == "host"   ? "host RAM"
                    : p.where() == "nvme" ? "NVMe"
                                          : "split host RAM / NVMe (" + std::string(ratio) +
                                                " of the parameters' state on NVMe)";
  out += "; " + std::to_string(p.num_sub_groups) + " sub-groups, " +
         DescribeSubGroupRule(
             SubGroupRule{p.sub_group_cut, static_cast<uint64_t>(p.sub_group_params)});
  out += "; " + std::to_string(p.grad_buckets) + " gradient buckets of " +
         FormatParamCount(p.grad_bucket_params) + " params" +
         (p.vocab_sliced ? " (embedding and LM head streamed in vocabulary slices)" : "");
  const ParamPlacement& w = p.params;
  if (w.where == ParamOffload::kNone) {
    out += "; weights all on the device";
  } else {
    out += "; weights: " + std::to_string(w.streamed_units.size()) + " units (" +
           FormatParamCount(w.streamed_params) + " params) streamed from " +
           (w.where == ParamOffload::kHost ? "host RAM" : "NVMe") + " through " +
           std::to_string(w.device_slots) + " device slots of " + FormatParamCount(w.slot_params) +
           " params, " + std::to_string(w.prefetch_depth) + " fetched ahead; " +
           FormatParamCount(w.resident_params) + " params resident";
  }
  if (p.activations == ActivationOffload::kHost) {
    out += "; activation checkpoints in pinned host memory (" +
           std::to_string(kCheckpointDeviceSlots) + " on the device)";
  }
  if (p.mlp_tile_rows > 0)
    out += "; the MLP in tiles of " + std::to_string(p.mlp_tile_rows) + " rows";
  if (p.gradients == GradOffload::kNvme) {
    out += "; the step's gradients wait on NVMe (" + std::to_string(p.grad_spill_slots) +
           " pinned sub-group slots" + (p.gradients_chosen ? ", chosen by the planner" : "") + ")";
  }
  return out;
}

// This process among the run's ranks. Rank 0 leads (it holds the output
// directory, writes metrics, checkpoints and the model); every rank trains.
// Whatever only some ranks can fail is agreed before the next collective, so
// no rank waits for one that has given up.
class RunRanks {
 public:
  RunRanks(const TrainConfig& config, const TrainWorld& world) {
    // One rank asked for device collectives runs the data-parallel path
    // anyway, over a world of one (its collectives are copies): how one GPU
    // checks NCCL's against the plain run.
    one_rank_on_device_ = config.collectives == TrainCollectives::kDevice &&
                          (world.comm == nullptr || world.comm->world_size() == 1);
    comm_ = one_rank_on_device_                                     ? &self_
            : world.comm != nullptr && world.comm->world_size() > 1 ? world.comm
                                                                    : nullptr;
  }
  RunRanks(const RunRanks&) = delete;
  RunRanks& operator=(const RunRanks&) = delete;

  comm::Communicator* comm() const { return comm_; }
  int ranks() const { return comm_ != nullptr ? comm_->world_size() : 1; }
  int rank() const { return comm_ != nullptr ? comm_->rank() : 0; }
  bool lead() const { return rank() == 0; }
  bool one_rank_on_device() const { return one_rank_on_device_; }
  Status Agree(const Status& s) const {
    return comm_ != nullptr ? comm::AgreeOnStatus(*comm_, s) : s;
  }

 private:
  comm::SelfCommunicator self_;
  comm::Communicator* comm_ = nullptr;
  bool one_rank_on_device_ = false;
};

// One run per output directory, for the whole run: everything that writes
// in it (swap_runs.json, metrics.jsonl, checkpoints and their retention, the
// final model) assumes no other process does. With several ranks the lead
// holds it for all. A --resume that cannot go on fails here, before anything
// is built, and every path the run will write is checked as its write will
// check it: a bad --trace fails now, not at its step.
struct OpenedOutputs {
  std::optional<DirLock> lock;
  std::string resume_path;  // "" = start fresh
};
StatusOr<OpenedOutputs> OpenOutputs(const TrainConfig& config, const std::string& out_dir,
                                    const RunRanks& ranks, TrainReporter& reporter) {
  OpenedOutputs out;
  Status opened = [&]() -> Status {
    if (!ranks.lead()) return Status::Ok();
    TF_RETURN_IF_ERROR(CheckOutDir(config, out_dir));  // before it is made
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) return IoError("create output directory " + out_dir + ": " + ec.message());
    TF_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(out_dir, "tierflow train"));
    out.lock.emplace(std::move(lock));
    TF_ASSIGN_OR_RETURN(out.resume_path, ChooseResumeCheckpoint(config, out_dir, reporter));
    return Status::Ok();
  }();
  TF_RETURN_IF_ERROR(ranks.Agree(opened));
  if (ranks.comm() != nullptr) {
    TF_RETURN_IF_ERROR(comm::BroadcastString(*ranks.comm(), &out.resume_path, 0));
  }
  TF_RETURN_IF_ERROR(ranks.Agree(CheckRunOutputs(config, out_dir, out.resume_path, ranks.rank())));
  return out;
}

// The device this rank trains on: a GPU per rank.
StatusOr<std::unique_ptr<Device>> CreateRunDevice(const TrainConfig& config, const RunRanks& ranks,
                                                  const TrainWorld& world) {
  TF_ASSIGN_OR_RETURN(DeviceOptions options,
                      DeviceOptionsFor(config, ranks.comm() != nullptr ? world.local_rank : 0));
  return CreateDevice(options);
}

// The machine as the planner sees it: this rank's device, its node's host
// memory, NVMe space and cores, the rates of the profile.
StatusOr<MachineRequest> TrainMachineRequest(const TrainConfig& config, const Device& device,
                                             const std::vector<std::string>& nvme_paths,
                                             const RunRanks& ranks, const TrainHooks* hooks) {
  TF_ASSIGN_OR_RETURN(MachineRequest r, MachineRequestFor(config));
  r.live = &device;
  // Several ranks: the launcher bound each to its share of the node's CPUs
  // (tools/train_ranks.cc); the plan is of the node.
  if (ranks.ranks() > 1)
    r.node_cpus = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (hooks != nullptr && hooks->host_memory_bytes != 0) {
    r.host_memory_bytes = hooks->host_memory_bytes;
  }
  r.nvme_paths = nvme_paths;
  return r;
}

// The plan this run takes (the planner places the state when "auto", and
// refuses a run that cannot fit before anything is allocated), agreed by
// the ranks: one whose plan does not fit must not leave the others waiting.
StatusOr<PlannedRun> PlanThisRun(const TrainConfig& config, const RunData& data,
                                 const MachineDescription& machine, const NvmeDirs& dirs,
                                 const RunRanks& ranks, const TrainWorld& world,
                                 TrainReporter& reporter) {
  const RunWorldShape shape{ranks.ranks(), world.local_size};
  TF_ASSIGN_OR_RETURN(
      PlannedRun run,
      PlanConfiguredRun(config, data.model.config, machine, shape, data.loader->MemoryBytes(), dirs,
                        [&](const std::string& n) { reporter.OnNote(n); }));
  TF_RETURN_IF_ERROR(ranks.Agree(
      RequireFeasible(run.plan).WithContext("tierflow plan says this run does not fit")));
  if (run.plan.placement.offload() == OffloadPlacement::kHost && !config.nvme_paths.empty()) {
    reporter.OnNote("the optimizer state fits in host RAM: the NVMe paths are not used");
  }
  return run;
}

// The model on the device, every weight loaded or initialised.
StatusOr<std::unique_ptr<TransformerModel>> CreateModel(const TrainConfig& config,
                                                        const RunData& data, const Plan& plan,
                                                        Device& device, TrainReporter& reporter) {
  TrainShape shape;
  shape.batch = config.micro_batch;
  shape.seq_len = config.seq_len;
  shape.checkpoint_activations = config.activation_checkpointing;
  // Where the plan put the checkpoints (it chose, under auto).
  shape.offload_checkpoints = plan.placement.activations == ActivationOffload::kHost;
  shape.mlp_tile_rows = plan.placement.mlp_tile_rows;
  shape.dtype = config.dtype;
  TransformerInit init;
  init.seed = config.seed;
  if (data.model_is_dir) init.weights_dir = config.model;
  init.allow_unused_tensors = config.allow_unused_tensors;
  TF_ASSIGN_OR_RETURN(auto model, TransformerModel::Create(device, data.model.config, shape, init));
  if (const std::vector<std::string>& unused = model->unused_checkpoint_tensors();
      !unused.empty()) {
    std::string names;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) names += (i ? ", " : "") + unused[i];
    if (unused.size() > 8) names += ", and " + std::to_string(unused.size() - 8) + " more";
    reporter.OnNote(std::to_string(unused.size()) + " tensors of " + config.model +
                    " are not in its config.json's model and are left out "
                    "(--allow-unused-tensors); the saved model will not have them: " +
                    names);
  }
  return model;
}

// Says where the ranks' collectives run.
void ReportCollectives(const TrainConfig& config, const RunRanks& ranks,
                       const comm::Communicator* device_comm, TrainReporter& reporter) {
  if (ranks.one_rank_on_device()) {
    reporter.OnNote("collectives: " + std::string(device_comm->backend()) +
                    " on the device over a world of one rank: the data-parallel path, checked "
                    "on one device (its collectives are copies)");
  } else if (ranks.comm() != nullptr && ranks.lead()) {
    const std::string host(ranks.comm()->backend());
    reporter.OnNote(
        device_comm != nullptr
            ? "collectives: " + std::string(device_comm->backend()) +
                  " on the devices (each rank's part of the summed gradient crosses PCIe, "
                  "once a step) and " +
                  host + " on the host (norm, losses, streamed weights)"
            : "collectives: " + host +
                  " on the host (every rank lands its whole gradient each micro-batch)" +
                  (config.collectives == TrainCollectives::kAuto
                       ? "; --collectives device sums it on the devices"
                       : ""));
  }
}

// The engine and what it holds: the device communicator and this run's swap
// sets (the state's and the streamed weights'; each rank its own, in the same
// directories), after the stale ones earlier runs of OUT left are cleaned.
struct RunEngine {
  std::unique_ptr<comm::Communicator> device_comm;
  std::unique_ptr<OffloadEngine> engine;
};
StatusOr<RunEngine> CreateRunEngine(const TrainConfig& config, const PlannedRun& run,
                                    const NvmeDirs& dirs, const RunRanks& ranks,
                                    const TrainWorld& world, const TrainHooks* hooks,
                                    const std::string& out_dir, Device& device,
                                    TransformerModel& model, TraceRecorder& trace,
                                    TrainReporter& reporter) {
  RunEngine e;
  EngineOptions options = EngineOptionsFor(run, dirs.paths, ranks.ranks());
  options.comm = ranks.comm();
  if (ranks.comm() != nullptr && run.input.device_collectives) {
    TF_ASSIGN_OR_RETURN(e.device_comm,
                        MakeDeviceComm(*ranks.comm(), device, world.local_rank, world.peer_watch));
    options.device_comm = e.device_comm.get();
  }
  ReportCollectives(config, ranks, e.device_comm.get(), reporter);
  options.trace = &trace;
  if (hooks != nullptr) options.nvme_backend_factory = hooks->nvme_backend_factory;
  const bool on_nvme = options.offload == OffloadPlacement::kNvme ||
                       run.plan.placement.params.where == ParamOffload::kNvme;
  if (on_nvme) {
    options.run_id = offload::MakeRunId() +
                     (ranks.comm() != nullptr ? "-rank" + std::to_string(ranks.rank()) : "");
    options.swap_owner = OwnerRecordForOutputDir(out_dir);
  }
  if (on_nvme || ranks.comm() != nullptr) {
    TF_RETURN_IF_ERROR(
        CleanStaleSwapSets(ranks.comm(), out_dir, dirs.paths, options.run_id, reporter));
  }
  // (Create agrees among the ranks before its first collective.)
  TF_ASSIGN_OR_RETURN(e.engine, OffloadEngine::Create(device, model, options));
  return e;
}

RunInfo DescribeRun(const TrainConfig& config, const RunData& data, const PlannedRun& run,
                    const MachineDescription& machine, const NvmeDirs& dirs, const RunRanks& ranks,
                    const Device& device, const ParamLayout& layout, const std::string& out_dir) {
  const Plan& plan = run.plan;
  RunInfo info;
  info.rank = ranks.rank();
  info.world_size = ranks.ranks();
  info.device = device.description();
  info.params = layout.total_params;
  info.model = config.model + " (" + std::string(ModelFamilyName(data.model.config.family)) + ", " +
               std::to_string(layout.total_params) + " parameters)";
  info.train_tokens = data.loader->num_train_tokens();
  info.eval_tokens = data.loader->num_eval_tokens();
  info.offload = DescribePlacement(plan.placement);
  info.rates = DescribeRates(machine.hardware.bandwidths, static_cast<int64_t>(std::time(nullptr)),
                             machine.default_profile);
  info.offload_from = plan.placement.chosen_by_planner
                          ? "chosen by the planner; --offload-optimizer host|nvme overrides"
                          : "as configured";
  info.nvme_dir = plan.placement.offload() == OffloadPlacement::kNvme ? dirs.paths[0] : "";
  info.predicted_step_seconds = plan.predicted_step_seconds;
  info.speculation_params = plan.placement.speculation_params;
  info.speculation_from = plan.placement.speculation_from;
  info.grad_transfer_dtype = plan.grad_transfer_dtype;
  info.out_dir = out_dir;
  info.tokens_per_step =
      static_cast<int64_t>(config.micro_batch) * config.seq_len * config.grad_accum * ranks.ranks();
  return info;
}

// Each rank reads its parts; the ranks agree before the weights' all-gather.
// Returns the step the checkpoint was at.
StatusOr<int64_t> Resume(const TrainConfig& config, const std::string& path, const RunRanks& ranks,
                         OffloadEngine& engine, const ParamLayout& layout, DataLoader& loader) {
  StatusOr<CheckpointState> state =
      LoadTrainingCheckpoint(path, engine, layout, /*upload=*/ranks.comm() == nullptr);
  Status loaded = state.ok() ? loader.RestoreState(state->data_state)
                                   .WithContext("checkpoint " + path + " data position")
                             : state.status();
  if (loaded.ok()) loaded = CheckSameGlobalBatch(*state, config, ranks.ranks(), path);
  TF_RETURN_IF_ERROR(ranks.Agree(loaded));
  if (ranks.comm() != nullptr) TF_RETURN_IF_ERROR(engine.UploadAllWeights());
  return state->step;
}

}  // namespace

StatusOr<TrainResult> RunTraining(const TrainConfig& config, TrainReporter& reporter,
                                  const std::atomic<bool>* stop, const TrainHooks* hooks,
                                  const TrainWorld& world) {
  TF_RETURN_IF_ERROR(ValidateTrainConfig(config));
  const auto run_start = Clock::now();
  const RunRanks ranks(config, world);
  const std::string out_dir = config.out_dir.empty() ? "tierflow-out" : config.out_dir;
  TF_ASSIGN_OR_RETURN(OpenedOutputs outputs, OpenOutputs(config, out_dir, ranks, reporter));

  TF_ASSIGN_OR_RETURN(const MachineRequest given, MachineRequestFor(config));
  RunDataBudget budget;
  budget.host_memory_bytes = hooks != nullptr && hooks->host_memory_bytes != 0
                                 ? hooks->host_memory_bytes
                                 : given.host_memory_bytes.value_or(0);
  budget.local_ranks = world.local_size;
  budget.ranks = ranks.ranks();
  TF_ASSIGN_OR_RETURN(RunData data, LoadRunData(config, budget));
  if (!data.note.empty()) reporter.OnNote(data.note);

  // Device, plan, model, engine: every allocation happens here, before any step.
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateRunDevice(config, ranks, world));
  TF_ASSIGN_OR_RETURN(NvmeDirs dirs, PrepareNvmeDirs(config, /*make_given=*/true));
  TF_ASSIGN_OR_RETURN(MachineRequest request,
                      TrainMachineRequest(config, *device, dirs.paths, ranks, hooks));
  TF_ASSIGN_OR_RETURN(MachineDescription machine, DescribeMachine(request));
  TF_ASSIGN_OR_RETURN(PlannedRun run,
                      PlanThisRun(config, data, machine, dirs, ranks, world, reporter));
  TF_ASSIGN_OR_RETURN(auto model, CreateModel(config, data, run.plan, *device, reporter));
  TraceRecorder trace;
  TF_ASSIGN_OR_RETURN(RunEngine engine, CreateRunEngine(config, run, dirs, ranks, world, hooks,
                                                        out_dir, *device, *model, trace, reporter));
  const ParamLayout& layout = model->layout();
  RunInfo info = DescribeRun(config, data, run, machine, dirs, ranks, *device, layout, out_dir);

  int64_t step = 0;
  if (!outputs.resume_path.empty()) {
    TF_ASSIGN_OR_RETURN(
        step, Resume(config, outputs.resume_path, ranks, *engine.engine, layout, *data.loader));
    info.resumed_from = outputs.resume_path;
  }
  info.start_step = step;
  reporter.OnStart(info);

  // Metrics: appended on resume (steps after the checkpoint), fresh otherwise.
  // Never through a link or into a hard-linked file (io/file_system.h).
  std::unique_ptr<WritableFile> metrics;
  if (ranks.lead()) {
    TF_ASSIGN_OR_RETURN(metrics, OpenFileToAppendInPlace(MetricsPathOf(config, out_dir),
                                                         /*truncate=*/step == 0, "metrics file"));
  }
  TrainLoopParts parts{config,
                       reporter,
                       stop,
                       hooks != nullptr ? hooks->file_system : nullptr,
                       ranks.comm(),
                       *device,
                       *engine.engine,
                       layout,
                       *data.loader,
                       trace,
                       out_dir,
                       outputs.lock ? &*outputs.lock : nullptr,
                       data.source_files,
                       info.tokens_per_step,
                       nlohmann::json::object()};
  if (run.nvme_io) parts.first_record["nvme_io"] = run.nvme_io->ToJson();
  parts.first_record["plan_device_bytes"] = run.plan.device.total_bytes();
  parts.first_record["plan"] = PlanToJson(run.input, machine.hardware, run.plan, nullptr);
  TF_ASSIGN_OR_RETURN(TrainResult result, RunTrainLoop(parts, step, metrics.get()));
  if (run.nvme_io) result.nvme_io = run.nvme_io->ToJson();
  result.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  return result;
}

}  // namespace tierflow
