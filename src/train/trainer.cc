// The training loop of `tierflow train`.
#include "train/trainer.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>

#include "checkpoint/swap_set_owner.h"
#include "comm/agree.h"
#include "comm/communicator.h"
#include "comm/self_communicator.h"
#include "common/cancel.h"
#include "common/checked_math.h"
#include "common/trace.h"
#include "common/units.h"
#include "data/data_loader.h"
#include "data/instruction_data.h"
#include "data/text_dataset.h"
#include "data/tokenizer.h"
#include "engine/master_weights.h"
#include "engine/offload_engine.h"
#include "io/dir_lock.h"
#include "io/file_reader.h"
#include "io/file_system.h"
#include "io/hf_side_files.h"
#include "io/json_util.h"
#include "io/output_path.h"
#include "io/sim_profile_file.h"
#include "io/trace_file.h"
#include "model/hf_model.h"
#include "model/transformer.h"
#include "offload/swap_set.h"
#include "plan/bandwidth_profile.h"
#include "plan/default_profile.h"
#include "plan/hardware_detect.h"
#include "plan/memory_model.h"
#include "plan/plan_report.h"
#include "plan/planner.h"
#include "train/checkpoint.h"
#include "train/collectives_choice.h"
#include "train/final_model.h"
#include "train/nvme_io_choice.h"
#include "train/run_outputs.h"
#include "train/swap_registry.h"

#ifndef TIERFLOW_SOURCE_DIR
#define TIERFLOW_SOURCE_DIR "."
#endif

namespace tierflow {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// A temporary directory for NVMe swap files, removed when the run ends.
class TempDirectory {
 public:
  static StatusOr<TempDirectory> Create() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base ? base : "/var/tmp") + "/tierflow-nvme-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return ErrnoStatus(
          errno, "create a temporary NVMe directory " + tmpl + " (give one with --nvme-path DIR)");
    }
    TempDirectory d;
    d.path_ = tmpl;
    return d;
  }
  TempDirectory() = default;
  TempDirectory(TempDirectory&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempDirectory& operator=(TempDirectory&& o) noexcept {
    std::swap(path_, o.path_);
    return *this;
  }
  ~TempDirectory() {
    if (!path_.empty()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string BundledCorpus() { return std::string(TIERFLOW_SOURCE_DIR) + "/data/tiny_corpus.txt"; }

EngineOptions MakeEngineOptions(const TrainConfig& c, DType dtype,
                                const std::vector<std::string>& nvme_paths) {
  EngineOptions o;
  o.weights_dtype = dtype;
  o.grad_transfer_dtype = c.grad_transfer_dtype;
  o.adam.lr = c.lr;
  o.adam.beta1 = c.beta1;
  o.adam.beta2 = c.beta2;
  o.adam.eps = c.eps;
  o.adam.weight_decay = c.weight_decay;
  o.adam.bias_correction = c.bias_correction;
  o.adam.decoupled = c.optimizer != TrainOptimizer::kAdam;
  o.clip_grad_norm = c.gradient_clipping;
  o.loss_scaler.static_scale = c.loss_scale;
  o.loss_scaler.initial_scale_power = c.initial_scale_power;
  o.loss_scaler.scale_window = c.loss_scale_window;
  o.loss_scaler.hysteresis = c.hysteresis;
  o.loss_scaler.min_scale = c.min_loss_scale;
  o.offload = c.offload;
  o.nvme_ratio = c.nvme_ratio;
  o.nvme_paths = nvme_paths;
  o.nvme_buffered = c.nvme_buffered;
  o.sub_group_params = c.sub_group_size;
  o.sub_group_cut = c.sub_group_cut;
  o.buffer_count = c.buffer_count;
  o.lock_host_state = c.pin_memory;
  o.pipeline = c.pipeline == TrainPipeline::kSync ? Pipeline::kSynchronous : Pipeline::kOverlapped;
  return o;
}

std::string DescribeInstructionData(const InstructionOptions& o, const InstructionStats& s) {
  std::string out =
      "instruction data " + o.path + " (" + std::string(InstructionFormatName(o.format)) + ", " +
      (s.chat_template.empty() ? std::string("plain prompt + response")
                               : s.chat_template + " chat template") +
      "): " + std::to_string(s.samples) + " samples, " + std::to_string(s.kept) + " kept";
  if (s.truncated > 0) out += " (" + std::to_string(s.truncated) + " truncated at seq_len)";
  if (s.dropped_long > 0) {
    out += ", " + std::to_string(s.dropped_long) + " dropped as longer than seq_len";
  }
  if (s.dropped_untrained > 0) {
    out += ", " + std::to_string(s.dropped_untrained) + " dropped with no response within seq_len";
  }
  if (s.dropped_system_messages > 0) {
    out += ", " + std::to_string(s.dropped_system_messages) +
           " system messages not shown by the mistral template";
  }
  out += "; " + std::to_string(s.trained_tokens) + " of " + std::to_string(s.tokens) +
         " tokens trained on, in " + std::to_string(s.rows) + (o.packing ? " packed" : "") +
         " rows of " + std::to_string(o.seq_len);
  return out;
}

MicroBatch ToMicroBatch(const TokenBatch& b) {
  MicroBatch mb;
  mb.inputs = b.inputs.data();
  mb.targets = b.targets.data();
  mb.batch = b.batch;
  mb.seq_len = b.seq_len;
  mb.positions = b.positions.empty() ? nullptr : b.positions.data();
  // The step's loss is then the mean over every trained target of its
  // micro-batches (instruction data masks prompts, so counts differ).
  mb.loss_tokens = std::count_if(b.targets.begin(), b.targets.end(),
                                 [](int32_t t) { return t != kIgnoreTarget; });
  return mb;
}

// What the final model's save did with what was in OUT/model.
void ReportFinalModel(const FinalModelReport& r, const std::string& model_dir,
                      TrainReporter& reporter) {
  auto names = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& n : v) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (!r.restored_from.empty()) {
    reporter.OnNote("put the previous model back in " + model_dir + " from " + r.restored_from +
                    ", where an interrupted save had left it");
  }
  if (!r.kept.empty()) {
    reporter.OnNote("kept in " + model_dir +
                    " what tierflow does not write there: " + names(r.kept));
  }
  if (!r.dropped.empty()) {
    reporter.OnNote("dropped from " + model_dir + " the previous model's " + names(r.dropped) +
                    " (this model has none)");
  }
}

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

// The largest sub-group's state as the NVMe tier stores it: master weights
// and two moments, each array padded to 4 KiB (engine/nvme_state_tier.h).
uint64_t LargestStateTensorBytes(const ModelConfig& model, SubGroupRule rule) {
  const SubGroupSummary s = SummarizeSubGroups(model, rule, 0.0, 12);
  const uint64_t array = (static_cast<uint64_t>(s.max_group_params) * 4 + 4095) / 4096 * 4096;
  return 3 * array;
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
  return out;
}

// The planner's view of this run and this machine. `c.buffer_count` is the
// resolved one; `nvme_block_bytes` the NVMe tier's block size. With several
// ranks, the machine is this rank's node, shared by its `gpus_per_node`
// ranks (the launcher's local size) of `ranks`.
StatusOr<Plan> PlanRun(const TrainConfig& c, const ModelConfig& model, DType dtype, Device& device,
                       const std::vector<std::string>& nvme_paths, uint64_t nvme_block_bytes,
                       uint64_t host_memory_override, uint64_t dataset_bytes, int ranks,
                       int gpus_per_node, bool device_collectives, Bandwidths* rates_used) {
  PlanInput in;
  in.model = model;
  in.device_collectives = device_collectives;
  in.gpus_per_node = std::clamp(gpus_per_node, 1, ranks);
  // Nodes of equal size; a last node with fewer ranks is planned as full.
  in.nodes = (ranks + in.gpus_per_node - 1) / in.gpus_per_node;
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
  in.dtype = dtype;
  in.grad_transfer_dtype = c.grad_transfer_dtype;
  in.checkpointing = c.activation_checkpointing;
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
  in.nvme_directories = std::max<int>(1, static_cast<int>(nvme_paths.size()));
  in.nvme_block_bytes = nvme_block_bytes;
  Hardware hw;
  hw.device_is_gpu = device.kind() != DeviceKind::kCpu;  // sim: a GPU's memory, simulated
  hw.device_description = device.description();
  hw.device_memory_bytes = device.DeviceMemory().capacity_bytes;
  hw.device_memory_is_host_memory = device.kind() == DeviceKind::kCpu;
  TF_ASSIGN_OR_RETURN(HostMemoryInfo mem, DetectHostMemory("/"));
  hw.host_memory_bytes = host_memory_override != 0 ? host_memory_override : mem.usable_bytes;
  for (const std::string& p : nvme_paths) {
    TF_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytesAt(p));
    hw.nvme_capacity_bytes += free_bytes;
  }
  hw.cores = OnlineCpus();
  hw.bandwidths = DefaultBandwidths(hw.device_is_gpu, hw.cores);
  if (!c.profile.empty()) {
    TF_ASSIGN_OR_RETURN(hw.bandwidths, LoadBandwidthProfile(c.profile, hw.bandwidths));
  }
  *rates_used = hw.bandwidths;
  return ComputePlan(in, hw);
}

// What a rank's instruction data may take while it is read: the node's
// usable host memory (as the planner will count it) shared by the node's
// ranks, each with its process overhead. The plan, made once the data is
// read, then counts its exact bytes beside everything else the run holds.
struct DatasetBudget {
  uint64_t bytes = 0;
  std::string source;  // how it was reckoned, for the refusal
};
StatusOr<DatasetBudget> DatasetBudgetOf(uint64_t host_memory_override, int local_ranks, int ranks) {
  uint64_t host = host_memory_override;
  if (host == 0) {
    TF_ASSIGN_OR_RETURN(HostMemoryInfo mem, DetectHostMemory("/"));
    host = mem.usable_bytes;
  }
  const uint64_t sharing = static_cast<uint64_t>(std::clamp(local_ranks, 1, ranks));
  const uint64_t share = host / sharing;
  DatasetBudget b;
  b.bytes = share > kHostProcessOverheadBytes ? share - kHostProcessOverheadBytes : 0;
  b.source = FormatBytes(host) + " of usable host memory" +
             (sharing > 1 ? " shared by " + std::to_string(sharing) + " ranks" : "") + ", less " +
             FormatBytes(kHostProcessOverheadBytes) + " for the process";
  return b;
}

// Why a run whose every step was skipped ends with an error, and what to try.
std::string AllStepsSkipped(const TrainConfig& config, int64_t start_step, int64_t step,
                            double last_loss, const std::string& out_dir) {
  const int64_t n = step - start_step;
  std::string msg = "every step of this run was skipped (" + std::to_string(n) + " of " +
                    std::to_string(n) + ", steps " + std::to_string(start_step + 1) + ".." +
                    std::to_string(step) +
                    "): the gradients were not finite (NaN or infinite) at each, so no weight "
                    "changed; the last loss was " +
                    std::to_string(last_loss) + ". ";
  if (config.dtype == DType::kF16 && config.loss_scale == 0.0f) {
    msg +=
        "With fp16's dynamic loss scale the first steps are skipped while the scale comes down "
        "from 2^initial_scale_power: run more steps or lower initial_scale_power; if the loss "
        "itself is NaN, ";
  } else {
    msg += "If the loss is NaN, ";
  }
  msg +=
      "check the model's weights (a damaged checkpoint holds NaN or Inf) and the data; else lower "
      "the learning rate or use bf16/fp32. Nothing was saved as the final model (" +
      (fs::path(out_dir) / "model").string() + " is left as it was)";
  return msg;
}

}  // namespace

StatusOr<TrainResult> RunTraining(const TrainConfig& config, TrainReporter& reporter,
                                  const std::atomic<bool>* stop, const TrainHooks* hooks,
                                  const TrainWorld& world) {
  TF_RETURN_IF_ERROR(ValidateTrainConfig(config));
  const auto run_start = Clock::now();
  // Data parallelism: rank 0 leads (it holds the output directory, writes
  // metrics, checkpoints and the model); every rank trains. Whatever only
  // some ranks can fail is agreed before the next collective, so no rank
  // waits for one that has given up.
  // One rank asked for device collectives runs the data-parallel path
  // anyway, over a world of one (its collectives are copies): how one GPU
  // checks NCCL's against the plain run.
  const bool one_rank_on_device = config.collectives == TrainCollectives::kDevice &&
                                  (world.comm == nullptr || world.comm->world_size() == 1);
  comm::SelfCommunicator self;
  comm::Communicator* comm = one_rank_on_device                                      ? &self
                             : world.comm != nullptr && world.comm->world_size() > 1 ? world.comm
                                                                                     : nullptr;
  const int ranks = comm != nullptr ? comm->world_size() : 1;
  const bool lead = comm == nullptr || comm->rank() == 0;
  auto agree = [&](const Status& s) { return comm != nullptr ? comm::AgreeOnStatus(*comm, s) : s; };
  const std::string out_dir = config.out_dir.empty() ? "tierflow-out" : config.out_dir;
  // One run per output directory, for the whole run: everything below that
  // writes in it (swap_runs.json, metrics.jsonl, checkpoints and their
  // retention, the final model) assumes no other process does. With
  // several ranks the lead holds it for all.
  std::optional<DirLock> out_lock;
  std::string resume_path;
  {
    Status opened = [&]() -> Status {
      if (!lead) return Status::Ok();
      TF_RETURN_IF_ERROR(CheckOutDir(config, out_dir));  // before it is made
      std::error_code ec;
      fs::create_directories(out_dir, ec);
      if (ec) return IoError("create output directory " + out_dir + ": " + ec.message());
      TF_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(out_dir, "tierflow train"));
      out_lock.emplace(std::move(lock));
      // Before anything is built: a --resume that cannot go on fails at once.
      TF_ASSIGN_OR_RETURN(resume_path, ChooseResumeCheckpoint(config, out_dir, reporter));
      return Status::Ok();
    }();
    TF_RETURN_IF_ERROR(agree(opened));
    if (comm != nullptr) TF_RETURN_IF_ERROR(comm::BroadcastString(*comm, &resume_path, 0));
    // Every path the run will write, checked as its write will check it,
    // before anything is loaded: a bad --trace fails now, not at its step.
    TF_RETURN_IF_ERROR(
        agree(CheckRunOutputs(config, out_dir, resume_path, comm != nullptr ? comm->rank() : 0)));
  }

  // Model, tokenizer, data.
  TF_ASSIGN_OR_RETURN(ResolvedModel resolved, ResolveTrainableModel(config.model));
  const ModelConfig model_config = resolved.config;
  const bool model_is_dir = fs::is_directory(config.model);
  if (config.allow_unused_tensors && resolved.weights_dir.empty()) {
    return InvalidArgumentError(
        "allow_unused_tensors (--allow-unused-tensors) applies to a Hugging Face model directory "
        "with weights, and --model " +
        config.model + " has none (its weights are initialised); drop it");
  }
  // What every saved model keeps from a Hugging Face source directory, read
  // now: its config.json and its tokenizer/generation/chat-template files.
  SourceModelFiles source_files;
  // (A config.json path names only a config: its directory may hold another model.)
  if (model_is_dir) {
    source_files.config_json = resolved.config_json;
    TF_ASSIGN_OR_RETURN(source_files.side, ReadHfSideFiles(config.model));
    if (!resolved.weights_dir.empty()) {
      TF_ASSIGN_OR_RETURN(source_files.weights,
                          ReadHfSourceLayout(resolved.weights_dir, model_config));
    }
  }
  std::string tokenizer_spec = config.tokenizer;
  if (tokenizer_spec.empty()) tokenizer_spec = model_is_dir ? config.model : "byte";
  const std::string data_path = config.data.empty() ? BundledCorpus() : config.data;
  std::unique_ptr<Tokenizer> tokenizer;
  if (config.token_dtype == TrainTokenDtype::kNone) {
    TF_ASSIGN_OR_RETURN(tokenizer, LoadTokenizer(tokenizer_spec));
    if (tokenizer->vocab_size() > model_config.vocab_size) {
      return InvalidArgumentError("tokenizer '" + tokenizer_spec + "' has " +
                                  std::to_string(tokenizer->vocab_size()) + " tokens but model '" +
                                  config.model + "' only " +
                                  std::to_string(model_config.vocab_size) +
                                  "; use the model's own tokenizer (--tokenizer)");
    }
  }
  TF_ASSIGN_OR_RETURN(const int32_t model_vocab,
                      CheckedNarrow<int32_t>(model_config.vocab_size, "the model's vocab_size"));
  DataLoaderOptions loader_options;
  loader_options.batch = config.micro_batch;
  loader_options.seq_len = config.seq_len;
  loader_options.shuffle = config.shuffle;
  loader_options.seed = config.seed;
  loader_options.eval_fraction = config.eval_fraction;
  TF_ASSIGN_OR_RETURN(DataLoader loader, [&]() -> StatusOr<DataLoader> {
    if (auto instruction = ParseInstructionFormat(ChoiceName(config.data_format));
        instruction.ok()) {
      if (config.data.empty()) {
        return InvalidArgumentError("--format " + std::string(ChoiceName(config.data_format)) +
                                    " needs --data: a JSONL file of instruction samples");
      }
      InstructionOptions options;
      options.path = data_path;
      options.format = *instruction;
      if (config.chat_template != TrainChatTemplate::kTokenizers) {
        TF_ASSIGN_OR_RETURN(options.chat_template,
                            ParseChatTemplateKind(ChoiceName(config.chat_template)));
      }
      options.seq_len = config.seq_len;
      options.drop_long = config.truncation == Truncation::kDrop;
      options.packing = config.packing;
      options.vocab_size = model_vocab;
      options.max_sample_bytes = config.max_sample_bytes;
      TF_ASSIGN_OR_RETURN(const DatasetBudget budget,
                          DatasetBudgetOf(hooks != nullptr ? hooks->host_memory_bytes : 0,
                                          world.local_size, ranks));
      options.memory_budget_bytes = budget.bytes;
      options.memory_budget_source = budget.source;
      TF_ASSIGN_OR_RETURN(InstructionData data, LoadInstructionData(options, *tokenizer));
      reporter.OnNote(DescribeInstructionData(options, data.stats));
      return DataLoader::CreateFromRows(std::move(data.rows), loader_options);
    }
    DatasetOptions dataset;
    dataset.path = data_path;
    dataset.text_field = config.text_field;
    dataset.vocab_size = model_vocab;
    if (config.data_format != TrainDataFormat::kByFileName) {
      TF_ASSIGN_OR_RETURN(dataset.format, ParseDataFormat(ChoiceName(config.data_format)));
    }
    if (config.token_dtype != TrainTokenDtype::kNone) {
      TF_ASSIGN_OR_RETURN(TokenDtype td, ParseTokenDtype(ChoiceName(config.token_dtype)));
      dataset.token_dtype = td;
      dataset.format = DataFormat::kTokens;
    }
    TF_ASSIGN_OR_RETURN(TokenSource tokens, LoadTokens(dataset, tokenizer.get()));
    return DataLoader::Create(std::move(tokens), loader_options);
  }());

  // Device, model, engine. Every allocation happens here, before any step.
  DeviceOptions device_options;
  device_options.kind = config.device.choice;
  device_options.cuda_ordinal = comm != nullptr ? world.local_rank : 0;  // a GPU per rank
  if (config.device.choice == DeviceChoice::kSim) {
    TF_ASSIGN_OR_RETURN(device_options.sim, ResolveSimProfile(config.device.sim_profile));
  }
  if (!config.device_memory.empty()) {
    TF_ASSIGN_OR_RETURN(device_options.memory_capacity_bytes, ParseByteSize(config.device_memory));
  }
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, CreateDevice(device_options));
  const DType dtype = config.dtype;
  TrainShape shape;
  shape.batch = config.micro_batch;
  shape.seq_len = config.seq_len;
  shape.checkpoint_activations = config.activation_checkpointing;
  shape.dtype = dtype;
  TempDirectory temp_nvme;
  std::vector<std::string> nvme_paths = config.nvme_paths;
  // The weights' copy may go to NVMe too (offload_param nvme, or auto when
  // host memory is short): the planner needs a directory to count.
  const bool nvme_possible = config.offload != OffloadPlacement::kHost ||
                             config.offload_param == ParamOffload::kNvme ||
                             config.offload_param == ParamOffload::kAuto;
  if (nvme_possible && nvme_paths.empty()) {
    TF_ASSIGN_OR_RETURN(temp_nvme, TempDirectory::Create());
    nvme_paths.push_back(temp_nvme.path());
  }
  for (const std::string& p : nvme_paths) {
    std::error_code ec;
    fs::create_directories(p, ec);
    if (ec) return IoError("create NVMe directory " + p + ": " + ec.message());
  }
  // How the NVMe tier drives its drive (aio keys > profile > start-up
  // probe), and the slots that asks for; said in the log and in metrics.
  TrainConfig sized = config;
  // The machine's profile: --profile, else the one `bench all` saved.
  std::string default_profile;
  TF_ASSIGN_OR_RETURN(std::optional<std::string> profile,
                      ResolveProfilePath(config.profile, &default_profile));
  sized.profile = profile.value_or("");
  std::optional<NvmeIoChoice> nvme_io;
  auto choose_nvme_io = [&]() -> Status {
    NvmeIoChoiceInput choice_input;
    choice_input.nvme_paths = nvme_paths;
    choice_input.buffered = config.nvme_buffered;
    choice_input.largest_tensor_bytes = LargestStateTensorBytes(
        model_config, SubGroupRule{config.sub_group_cut, config.sub_group_size});
    TF_ASSIGN_OR_RETURN(nvme_io, ChooseNvmeIo(sized, choice_input));
    sized.buffer_count = nvme_io->buffer_count;
    reporter.OnNote("NVMe I/O: " + nvme_io->Describe());
    return Status::Ok();
  };
  if (config.offload == OffloadPlacement::kNvme) {
    TF_RETURN_IF_ERROR(choose_nvme_io());
  } else if (sized.buffer_count == 0) {
    sized.buffer_count = 4;
  }
  // The planner places the state ("auto") and refuses a run that cannot
  // fit, before anything is allocated.
  const uint64_t host_memory_override = hooks != nullptr ? hooks->host_memory_bytes : 0;
  Bandwidths rates;
  // Several ranks: where they sum the gradient and gather the weights.
  TF_ASSIGN_OR_RETURN(
      const bool device_collectives,
      ResolveDeviceCollectives(std::string(ChoiceName(config.collectives)), device->kind(), ranks));
  const bool on_device = comm != nullptr && device_collectives;
  TF_ASSIGN_OR_RETURN(Plan plan, PlanRun(sized, model_config, dtype, *device, nvme_paths,
                                         nvme_io ? nvme_io->io.block_size_bytes : kNvmeBlockBytes,
                                         host_memory_override, loader.MemoryBytes(), ranks,
                                         world.local_size, on_device, &rates));
  if (config.offload == OffloadPlacement::kAuto && plan.feasible &&
      plan.placement.offload() == OffloadPlacement::kNvme) {
    // It put state on NVMe: choose how to drive the drive (which may want
    // more slots, and sets the block the state is rounded to), and plan again
    // with that. The second plan is the one that runs.
    sized.buffer_count = config.buffer_count;
    TF_RETURN_IF_ERROR(choose_nvme_io());
    TF_ASSIGN_OR_RETURN(
        plan, PlanRun(sized, model_config, dtype, *device, nvme_paths, nvme_io->io.block_size_bytes,
                      host_memory_override, loader.MemoryBytes(), ranks, world.local_size,
                      on_device, &rates));
  }
  // Agreed: a rank whose plan does not fit must not leave the others
  // waiting in the swap-set record's collective below.
  TF_RETURN_IF_ERROR(
      agree(RequireFeasible(plan).WithContext("tierflow plan says this run does not fit")));
  TrainConfig placed = sized;
  placed.offload = plan.placement.offload();
  placed.nvme_ratio = plan.placement.nvme_ratio;
  if (plan.placement.offload() == OffloadPlacement::kHost && !config.nvme_paths.empty()) {
    reporter.OnNote("the optimizer state fits in host RAM: the NVMe paths are not used");
  }

  TransformerInit init;
  init.seed = config.seed;
  if (model_is_dir) init.weights_dir = config.model;
  init.allow_unused_tensors = config.allow_unused_tensors;
  TF_ASSIGN_OR_RETURN(auto model, TransformerModel::Create(*device, model_config, shape, init));
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
  TraceRecorder trace;
  EngineOptions engine_options = MakeEngineOptions(placed, dtype, nvme_paths);
  // The speculation budget the plan counted: given, or this rank's share of
  // the free host memory (which this node's ranks share).
  engine_options.speculation_params = static_cast<uint64_t>(plan.placement.speculation_params);
  // The bucket size the plan counted (vocabulary slices when it is below the largest unit).
  engine_options.grad_bucket_params = static_cast<uint64_t>(plan.placement.grad_bucket_params);
  // Every step has grad_accum micro-batches per rank: the gradient buffers
  // the plan counted. Each Step gets the global step's list (every rank's).
  engine_options.micro_batches_per_step = config.grad_accum * ranks;
  engine_options.comm = comm;
  std::unique_ptr<comm::Communicator> device_comm;
  if (on_device) {
    TF_ASSIGN_OR_RETURN(device_comm,
                        MakeDeviceComm(*comm, *device, world.local_rank, world.peer_watch));
    engine_options.device_comm = device_comm.get();
  }
  if (one_rank_on_device) {
    reporter.OnNote("collectives: " + std::string(device_comm->backend()) +
                    " on the device over a world of one rank: the data-parallel path, checked "
                    "on one device (its collectives are copies)");
  } else if (comm != nullptr && lead) {
    reporter.OnNote(
        on_device
            ? "collectives: " + std::string(device_comm->backend()) +
                  " on the devices (each rank's part of the summed gradient crosses PCIe, "
                  "once a step) and " +
                  std::string(comm->backend()) + " on the host (norm, losses, streamed weights)"
            : "collectives: " + std::string(comm->backend()) +
                  " on the host (every rank lands its whole gradient each micro-batch)" +
                  (config.collectives == TrainCollectives::kAuto
                       ? "; --collectives device sums it on the devices"
                       : ""));
  }
  // The weights' placement the plan counted: which units stream, from where.
  const ParamPlacement& pp = plan.placement.params;
  engine_options.params.where = pp.where;
  engine_options.params.streamed_units = pp.streamed_units;
  if (pp.where != ParamOffload::kNone) {
    engine_options.params.device_slots = pp.device_slots;
    engine_options.params.prefetch_depth = pp.prefetch_depth;
    engine_options.params.nvme_staging = pp.nvme_staging;
  }
  engine_options.trace = &trace;
  if (nvme_io) engine_options.nvme_io = nvme_io->io;
  if (hooks != nullptr) engine_options.nvme_backend_factory = hooks->nvme_backend_factory;
  // This run's swap sets (the state's and the streamed weights'; each rank
  // its own, in the same directories), and the stale ones earlier runs of
  // OUT left (rank 0 keeps the record).
  const bool on_nvme = placed.offload == OffloadPlacement::kNvme || pp.where == ParamOffload::kNvme;
  if (on_nvme) {
    engine_options.run_id =
        offload::MakeRunId() + (comm != nullptr ? "-rank" + std::to_string(comm->rank()) : "");
    engine_options.swap_owner = OwnerRecordForOutputDir(out_dir);
  }
  if (on_nvme || comm != nullptr) {
    TF_RETURN_IF_ERROR(
        CleanStaleSwapSets(comm, out_dir, nvme_paths, engine_options.run_id, reporter));
  }
  // (Create agrees among the ranks before its first collective.)
  TF_ASSIGN_OR_RETURN(auto engine, OffloadEngine::Create(*device, *model, engine_options));
  const ParamLayout& layout = model->layout();

  RunInfo info;
  info.rank = comm != nullptr ? comm->rank() : 0;
  info.world_size = ranks;
  info.device = device->description();
  info.params = layout.total_params;
  info.model = config.model + " (" + std::string(ModelFamilyName(model_config.family)) + ", " +
               std::to_string(layout.total_params) + " parameters)";
  info.train_tokens = loader.num_train_tokens();
  info.eval_tokens = loader.num_eval_tokens();
  info.offload = DescribePlacement(plan.placement);
  info.rates = DescribeRates(rates, static_cast<int64_t>(std::time(nullptr)), default_profile);
  info.offload_from = plan.placement.chosen_by_planner
                          ? "chosen by the planner; --offload-optimizer host|nvme overrides"
                          : "as configured";
  info.nvme_dir = placed.offload == OffloadPlacement::kNvme ? nvme_paths[0] : "";
  info.predicted_step_seconds = plan.predicted_step_seconds;
  info.speculation_params = plan.placement.speculation_params;
  info.speculation_from = plan.placement.speculation_from;
  info.grad_transfer_dtype = plan.grad_transfer_dtype;
  info.out_dir = out_dir;
  info.tokens_per_step =
      static_cast<int64_t>(config.micro_batch) * config.seq_len * config.grad_accum * ranks;

  // Resume.
  int64_t step = 0;
  if (!resume_path.empty()) {
    // Each rank reads its parts; the ranks agree before the weights' all-gather.
    StatusOr<CheckpointState> state =
        LoadTrainingCheckpoint(resume_path, *engine, layout, /*upload=*/comm == nullptr);
    Status loaded = state.ok() ? loader.RestoreState(state->data_state)
                                     .WithContext("checkpoint " + resume_path + " data position")
                               : state.status();
    if (loaded.ok()) loaded = CheckSameGlobalBatch(*state, config, ranks, resume_path);
    TF_RETURN_IF_ERROR(agree(loaded));
    if (comm != nullptr) TF_RETURN_IF_ERROR(engine->UploadAllWeights());
    step = state->step;
    info.resumed_from = resume_path;
  }
  info.start_step = step;
  reporter.OnStart(info);

  // Metrics: appended on resume (steps after the checkpoint), fresh otherwise.
  // Never through a link or into a hard-linked file (io/file_system.h).
  const std::string metrics_path = MetricsPathOf(config, out_dir);
  std::unique_ptr<WritableFile> metrics;
  if (lead) {
    TF_ASSIGN_OR_RETURN(
        metrics, OpenFileToAppendInPlace(metrics_path, /*truncate=*/step == 0, "metrics file"));
  }

  TrainResult result;
  const int64_t start_step = step;
  auto loop_start = Clock::now();
  auto last = loop_start;
  // The global step's micro-batches, every rank's (the engine runs its own).
  std::vector<TokenBatch> batches(static_cast<size_t>(config.grad_accum) * ranks);
  int64_t last_checkpoint = step;
  // What rank 0 writes from the whole state (a checkpoint, the model): the
  // ranks first agree that every engine has finished (none serves from a
  // failed one), then the others serve their parts while the lead writes,
  // and all agree on how it went.
  auto lead_writes = [&](const std::function<Status()>& write) -> Status {
    TF_RETURN_IF_ERROR(agree(engine->Finish().status()));
    if (comm == nullptr) return write();
    Status written;
    if (lead) {
      written = write();
      const Status ended = StateRangeReader::EndServing(*engine);
      if (written.ok()) written = ended;
    } else {
      written = StateRangeReader(*engine).Serve();
    }
    return agree(written);
  };
  auto checkpoint = [&](double loss) -> Status {
    TF_RETURN_IF_ERROR(engine->Finish().status());
    CheckpointState state;
    state.step = step;
    state.optimizer_step = engine->optimizer_step();
    state.scaler = engine->loss_scaler_state();
    state.data_state = loader.SaveState();
    state.loss = loss;
    state.model = config.model;
    state.world_size = ranks;
    state.sequences_per_step = static_cast<int64_t>(config.micro_batch) * config.grad_accum * ranks;
    RetentionReport retention;
    TF_RETURN_IF_ERROR(lead_writes([&]() -> Status {
      // Checked at start-up, and again here: a link made since is refused too.
      TF_RETURN_IF_ERROR(CheckNoLinksUnder(out_dir, (fs::path(out_dir) / "checkpoints").string())
                             .WithContext("the checkpoints' directory"));
      return SaveTrainingCheckpoint(out_dir, *engine, layout, state, 2, &retention, &source_files);
    }));
    for (const std::string& note : retention.notes) reporter.OnNote(note);
    for (const CheckpointInfo& c : retention.kept_unverified) {
      reporter.OnNote("kept checkpoint " + c.path + ", which cannot be verified now (" + c.problem +
                      "); fix that and it verifies again, or remove it yourself");
    }
    last_checkpoint = step;
    reporter.OnCheckpoint(step, (fs::path(out_dir) / "checkpoints").string());
    return Status::Ok();
  };
  auto evaluate = [&]() -> StatusOr<double> {
    TF_RETURN_IF_ERROR(engine->Finish().status());
    const int64_t n = std::min<int64_t>(config.eval_batches, loader.num_eval_batches());
    if (n <= 0) return -1.0;
    // The mean over every evaluated target (batches weighted by their
    // counted targets, as a step's micro-batches are).
    double sum = 0;
    int64_t counted = 0;
    TokenBatch b;
    for (int64_t i = 0; i < n; ++i) {
      loader.EvalBatch(i, &b);
      const MicroBatch mb = ToMicroBatch(b);
      TF_ASSIGN_OR_RETURN(float loss, engine->EvaluateLoss(mb));
      sum += static_cast<double>(loss) * static_cast<double>(mb.loss_tokens);
      counted += mb.loss_tokens;
    }
    return counted > 0 ? sum / static_cast<double>(counted) : 0.0;
  };

  double last_loss = 0;
  int64_t steps_skipped = 0;  // this run's steps whose non-finite gradients changed nothing
  // --trace without --trace-steps traces step 2 (step 1 includes warm-up effects).
  std::vector<int64_t> trace_steps = config.trace_steps;
  if (!config.trace_path.empty() && trace_steps.empty())
    trace_steps.push_back(std::min<int64_t>(2, config.steps));
  while (step < config.steps) {
    const int64_t next = step + 1;
    const bool traced =
        std::find(trace_steps.begin(), trace_steps.end(), next) != trace_steps.end();
    trace.SetEnabled(traced && !config.trace_path.empty());
    const float lr = ScheduledLr(config, next);
    engine->SetLearningRate(lr);
    std::vector<MicroBatch> micro(batches.size());
    for (size_t k = 0; k < batches.size(); ++k) {
      loader.Next(&batches[k]);
      micro[k] = ToMicroBatch(batches[k]);
    }
    // A stop asked for here travels with the step's own collectives, so
    // every rank stops after the same step.
    engine->SetStopRequested((stop != nullptr && stop->load()) || CancelRequested());
    TF_ASSIGN_OR_RETURN(StepStats stats, engine->Step(micro));
    step = next;
    last_loss = stats.loss;
    if (stats.skipped) ++steps_skipped;
    if (step == start_step + 1) result.first_loss = stats.loss;
    const auto now = Clock::now();
    const double step_seconds = std::chrono::duration<double>(now - last).count();
    last = now;
    StepReport report;
    report.step = step;
    report.total_steps = config.steps;
    report.stats = stats;
    report.lr = lr;
    report.tokens_per_second =
        static_cast<double>(info.tokens_per_step) / std::max(step_seconds, 1e-9);
    report.elapsed_seconds = std::chrono::duration<double>(now - loop_start).count();
    report.eta_seconds = report.elapsed_seconds / static_cast<double>(step - start_step) *
                         static_cast<double>(config.steps - step);
    report.device_bytes = device->DeviceMemory().in_use_bytes;
    report.pinned_bytes = device->PinnedMemory().in_use_bytes;
    report.host_state_bytes = engine->HostStateBytes();
    report.nvme_bytes = engine->NvmeFileBytes();
    reporter.OnStep(report);

    nlohmann::json line = {
        {"step", step},
        {"loss", stats.loss},
        {"lr", lr},
        {"grad_norm", std::isfinite(stats.grad_norm) ? nlohmann::json(stats.grad_norm)
                                                     : nlohmann::json(nullptr)},
        {"clip_coef", stats.clip_coef},
        {"loss_scale", stats.loss_scale},
        {"skipped", stats.skipped},
        {"rolled_back", stats.rolled_back},
        {"speculation_paused", stats.speculation_paused},
        {"tokens", info.tokens_per_step},
        {"tokens_per_second", report.tokens_per_second},
        {"elapsed_seconds", report.elapsed_seconds},
        {"device_bytes", report.device_bytes},
        {"device_peak_bytes", device->DeviceMemory().peak_bytes},
        {"pinned_bytes", report.pinned_bytes}};
    // The first record of each run says which NVMe settings ran and why,
    // and what the plan counted on the device (against device_peak_bytes).
    if (step == start_step + 1 && nvme_io) line["nvme_io"] = nvme_io->ToJson();
    if (step == start_step + 1) line["plan_device_bytes"] = plan.device.total_bytes();
    if (traced && !config.trace_path.empty()) {
      // The trace holds the step alone (not the evaluation below).
      TF_RETURN_IF_ERROR(engine->Finish().status());
      trace.SetEnabled(false);
    }
    if (config.eval_every > 0 && step % config.eval_every == 0) {
      TF_ASSIGN_OR_RETURN(double eval_loss, evaluate());
      if (eval_loss >= 0) {
        line["eval_loss"] = eval_loss;
        result.eval_loss = eval_loss;
        reporter.OnEval(step, eval_loss);
      }
    }
    if (lead) {
      const std::string text = line.dump() + "\n";
      TF_RETURN_IF_ERROR(metrics->Append(text.data(), text.size()).WithContext("metrics file"));
    }
    // After the step's metrics line: a trace that cannot be written (its
    // path was checked at start-up) does not lose the step's record.
    if (traced && !config.trace_path.empty()) {
      // Every rank's own trace; rank r > 0 writes PATH.rank<r>.
      TF_RETURN_IF_ERROR(WriteTraceFile(
          trace, TracePathOfRank(config.trace_path, comm != nullptr ? comm->rank() : 0)));
    }

    // Several ranks: the step's collectives carried each rank's wish.
    const bool stop_now = comm != nullptr ? stats.stop_requested
                                          : (stop != nullptr && stop->load()) || CancelRequested();
    if ((config.checkpoint_every > 0 && step % config.checkpoint_every == 0) || stop_now) {
      // A stop request during a save lets it finish (the save is what the
      // stop asks for); only a second request interrupts it.
      CancelShield shield;
      TF_RETURN_IF_ERROR(checkpoint(stats.loss));
    }
    if (stop_now) {
      result.stopped = true;
      break;
    }
  }

  TF_RETURN_IF_ERROR(engine->Finish().status());
  result.steps_skipped = steps_skipped;
  // Every step skipped: no weight moved, so the model is the one the run
  // started from. That is a failure, not a result: no final checkpoint (it
  // would only push older ones out of retention) and no OUT/model (an earlier
  // run's good one is kept), and the run ends with an error saying why.
  if (!result.stopped && step > start_step && steps_skipped == step - start_step) {
    return FailedPreconditionError(AllStepsSkipped(config, start_step, step, last_loss, out_dir));
  }
  if (!result.stopped) {
    CancelShield shield;  // the final checkpoint and model are saved whole, or not at all
    if (last_checkpoint != step && config.final_save == FinalSave::kAll) {
      TF_RETURN_IF_ERROR(checkpoint(last_loss));
    }
    if (config.eval_every > 0 && step % config.eval_every != 0) {
      TF_ASSIGN_OR_RETURN(double eval_loss, evaluate());
      if (eval_loss >= 0) {
        result.eval_loss = eval_loss;
        reporter.OnEval(step, eval_loss);
      }
    }
    if (config.final_save != FinalSave::kNone) {
      FinalModelReport saved;
      TF_RETURN_IF_ERROR(lead_writes([&] {
        return SaveFinalModel(*out_lock, *engine, layout, dtype, source_files,
                              hooks != nullptr ? hooks->file_system : nullptr, &saved);
      }));
      ReportFinalModel(saved, (fs::path(out_dir) / "model").string(), reporter);
      result.final_model_dir = (fs::path(out_dir) / "model").string();
    }
  }
  if (nvme_io) result.nvme_io = nvme_io->ToJson();
  result.steps_done = step;
  result.last_loss = last_loss;
  result.seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  return result;
}

}  // namespace tierflow
