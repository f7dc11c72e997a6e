// `tierflow plan`: what a fine-tune needs on each memory tier, whether it
// fits this machine (or the one the flags describe), where the optimizer
// state should go, how long a step takes, and the largest model that fits.
// Exit status: 0 when the run fits, 3 when it does not, 2 when a flag is
// refused (tools/flag_checks.h), 1 on other errors.
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/cancel.h"
#include "common/units.h"
#include "io/json_util.h"
#include "io/sim_profile_file.h"
#include "plan/hardware_detect.h"
#include "plan/hardware_profile.h"
#include "plan/plan_json.h"
#include "plan/plan_report.h"
#include "plan/planner.h"
#include "tierflow/device.h"
#include "tierflow/model_config.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "train/collectives_choice.h"
#include "train/plan_for_config.h"
#include "train/resolve_run.h"
#include "train/run_machine.h"

namespace tierflow::cli {
namespace {

constexpr int kExitDoesNotFit = 3;

struct PlanFlags {
  std::string model;
  // Explicit dimensions, used when --model is not given.
  // The flags write the dimensions in place; family, vocabulary and context
  // get their defaults in ModelFromFlags.
  std::string family = "llama";
  ModelDimensions dims;

  int64_t micro_batch = 1;
  int64_t seq_len = 0;
  int64_t grad_accum = 1;
  std::string dtype = "bf16";
  std::string grad_transfer_dtype;  // "" = the default for --dtype
  std::string checkpointing = "on";
  std::string optimizer = "adamw";
  std::string offload = "auto";
  std::string offload_param = "auto";
  std::string offload_activations = "auto";
  std::string offload_gradients = "auto";
  std::string mlp_tile_rows = "auto";
  std::string param_slots = "auto";
  double ratio = -1;
  std::string sub_group;
  int buffer_count = kDefaultBufferCount;
  int grad_buckets = kDefaultGradBuckets;
  std::string grad_bucket = "auto";
  std::string pipeline = "overlapped";
  std::string collectives = "auto";
  std::string speculation = "auto";

  int gpus_per_node = 1, nodes = 1, gpus_per_pcie_link = 1;
  double network_gbps = 0;  // 0: the profile's or the default

  std::string device = "auto";
  std::string gpu_memory, host_memory, nvme_capacity;
  std::vector<std::string> nvme_paths;
  int cores = 0;
  std::string profile;
  double device_tflops = 0;
  bool json = false;
  std::string config;  // --config FILE: the run `tierflow train --config FILE` starts
};

// With --config, the run is the configuration's: plan's flags that set what a
// train configuration sets, or what train cannot be told, are refused.
constexpr const char* kRunFlags[] = {"--model",
                                     "--family",
                                     "--layers",
                                     "--d-model",
                                     "--heads",
                                     "--kv-heads",
                                     "--d-ff",
                                     "--vocab",
                                     "--micro-batch",
                                     "--seq-len",
                                     "--grad-accum",
                                     "--dtype",
                                     "--checkpointing",
                                     "--optimizer",
                                     "--offload-optimizer",
                                     "--offload-param",
                                     "--offload-activations",
                                     "--offload-gradients",
                                     "--mlp-tile-rows",
                                     "--param-slots",
                                     "--ratio",
                                     "--sub-group",
                                     "--buffer-count",
                                     "--grad-buckets",
                                     "--grad-bucket",
                                     "--collectives",
                                     "--pipeline",
                                     "--grad-transfer-dtype",
                                     "--speculation",
                                     "--device",
                                     "--host-memory",
                                     "--nvme-capacity",
                                     "--nvme-path",
                                     "--cores",
                                     "--profile",
                                     "--device-tflops",
                                     "--gpus-per-pcie-link",
                                     "--network-gbps"};

StatusOr<ModelConfig> ModelFromFlags(const PlanFlags& f) {
  if (!f.model.empty()) {
    if (f.dims.n_layers || f.dims.d_model || f.dims.n_heads) {
      return InvalidArgumentError(
          "give either --model or the dimensions (--layers, --d-model, "
          "--heads, ...), not both");
    }
    return ResolveModel(f.model);
  }
  if (!f.dims.n_layers || !f.dims.d_model || !f.dims.n_heads) {
    return InvalidArgumentError("say which model: --model PRESET|DIR|config.json (presets: " + [] {
      std::string s;
      for (const auto& n : PresetNames()) s += (s.empty() ? "" : ", ") + n;
      return s;
    }() + "), or --layers, --d-model and --heads (with --family)");
  }
  TF_ASSIGN_OR_RETURN(ModelFamily family, ParseModelFamily(f.family));
  ModelDimensions d = f.dims;
  d.family = family;
  if (d.vocab_size == 0) d.vocab_size = family == ModelFamily::kGpt2 ? 50257 : 32000;
  d.max_seq_len = std::max<int64_t>(f.seq_len, family == ModelFamily::kGpt2 ? 1024 : 4096);
  return MakeModelConfig(d);
}

// A count flag (ParseCount), its error naming the flag.
StatusOr<uint64_t> CountFlag(const std::string& name, const std::string& text) {
  auto n = ParseCount(text);
  if (!n.ok()) return n.status().WithContext(name);
  return n;
}

StatusOr<PlanInput> InputFromFlags(const PlanFlags& f) {
  PlanInput in;
  TF_ASSIGN_OR_RETURN(in.model, ModelFromFlags(f));
  in.micro_batch = f.micro_batch;
  in.seq_len = f.seq_len > 0 ? f.seq_len : std::min<int64_t>(2048, in.model.max_seq_len);
  in.grad_accum = f.grad_accum;
  TF_ASSIGN_OR_RETURN(in.dtype, ParseDType(f.dtype));
  if (!f.grad_transfer_dtype.empty()) {
    auto t = ParseDType(f.grad_transfer_dtype);
    if (!t.ok()) return t.status().WithContext("--grad-transfer-dtype");
    in.grad_transfer_dtype = *t;
  }
  in.checkpointing = f.checkpointing == "on";
  TF_ASSIGN_OR_RETURN(in.optimizer, ParseOptimizerKind(f.optimizer));
  TF_ASSIGN_OR_RETURN(in.offload, ParseOffloadPlacement("--offload-optimizer", f.offload));
  in.nvme_ratio = f.ratio;
  TF_ASSIGN_OR_RETURN(in.param_offload, ParseParamOffload("--offload-param", f.offload_param));
  auto activations = ParseChoice<ActivationOffload>(f.offload_activations);
  if (!activations.ok()) return activations.status().WithContext("--offload-activations");
  in.offload_activations = *activations;
  auto gradients = ParseChoice<GradOffload>(f.offload_gradients);
  if (!gradients.ok()) return gradients.status().WithContext("--offload-gradients");
  in.offload_gradients = *gradients;
  if (f.mlp_tile_rows != "auto") {
    TF_ASSIGN_OR_RETURN(const uint64_t tile, CountFlag("--mlp-tile-rows", f.mlp_tile_rows));
    in.mlp_tile_rows = static_cast<int64_t>(std::min<uint64_t>(tile, uint64_t{1} << 40));
  }
  if (f.param_slots != "auto") {
    // A plain integer; the planner checks its range (at least 2) and names the flag.
    char* end = nullptr;
    errno = 0;
    const long slots = std::strtol(f.param_slots.c_str(), &end, 10);
    if (f.param_slots.empty() || *end != '\0' || errno != 0 || slots < INT32_MIN ||
        slots > INT32_MAX) {
      return InvalidArgumentError("--param-slots: '" + f.param_slots +
                                  "' is not a number of device slots: give an integer of at "
                                  "least 2, or auto");
    }
    in.param_slots = static_cast<int>(slots);
  }
  if (!f.sub_group.empty()) {
    TF_ASSIGN_OR_RETURN(uint64_t n, CountFlag("--sub-group", f.sub_group));
    if (n == 0) return InvalidArgumentError("--sub-group must be positive");
    in.sub_group_params = static_cast<int64_t>(n);
  }
  in.buffer_count = f.buffer_count;
  in.grad_buckets = f.grad_buckets;
  if (f.grad_bucket != "auto") {
    TF_ASSIGN_OR_RETURN(uint64_t n, CountFlag("--grad-bucket", f.grad_bucket));
    // Beyond int64 is beyond the planner's bound, which then names it.
    in.grad_bucket_params = static_cast<int64_t>(std::min<uint64_t>(n, INT64_MAX));
  }
  in.pipeline = f.pipeline == "sync" ? PipelineKind::kSynchronous : PipelineKind::kOverlapped;
  if (f.speculation != "auto") {
    TF_ASSIGN_OR_RETURN(uint64_t speculation, CountFlag("--speculation", f.speculation));
    in.speculation_params = static_cast<int64_t>(speculation);
  }
  in.nvme_directories = std::max<int>(1, static_cast<int>(f.nvme_paths.size()));
  in.gpus_per_node = f.gpus_per_node;
  in.nodes = f.nodes;
  in.gpus_per_pcie_link = f.gpus_per_pcie_link;
  return in;
}

StatusOr<uint64_t> ByteFlag(const std::string& name, const std::string& text) {
  auto bytes = ParseByteSize(text);
  if (!bytes.ok()) return bytes.status().WithContext(name);
  return bytes;
}

// Fills the hardware from flags, detecting what they leave out; `notes`
// says where each figure came from.
StatusOr<MachineDescription> MachineFromFlags(const PlanFlags& f) {
  MachineRequest r;
  TF_ASSIGN_OR_RETURN(r.device, ParseDeviceSpec("--device", f.device));
  if (!f.gpu_memory.empty()) {
    TF_ASSIGN_OR_RETURN(r.device_memory_bytes, ByteFlag("--gpu-memory", f.gpu_memory));
  }
  if (!f.host_memory.empty()) {
    TF_ASSIGN_OR_RETURN(r.host_memory_bytes, ByteFlag("--host-memory", f.host_memory));
  }
  if (!f.nvme_capacity.empty()) {
    TF_ASSIGN_OR_RETURN(r.nvme_capacity_bytes, ByteFlag("--nvme-capacity", f.nvme_capacity));
  }
  if (f.cores > 0) r.cores = f.cores;
  r.nvme_paths = f.nvme_paths;
  r.profile = f.profile;
  r.device_tflops = f.device_tflops;
  r.network_gbps = f.network_gbps;
  r.nodes = f.nodes;
  return DescribeMachine(r);
}

// The notes' last lines: the collectives' rates with several ranks, and
// where the rates came from.
void AddRateNotes(const MachineDescription& m, int gpus_per_node, int nodes,
                  std::vector<std::string>* notes) {
  const Bandwidths& b = m.hardware.bandwidths;
  if (gpus_per_node > 1 || nodes > 1) {
    char comm[256];
    std::snprintf(comm, sizeof comm,
                  "        collectives: %.2f GB/s bus bandwidth within a node, %.2f between nodes",
                  b.intra_node_busbw_gb_per_second, b.inter_node_busbw_gb_per_second);
    notes->push_back(comm);
  }
  notes->push_back("        (" +
                   DescribeRates(b, static_cast<int64_t>(std::time(nullptr)), m.default_profile) +
                   ")");
}

// Prints the plan as tables or JSON; the exit status says whether it fits.
StatusOr<int> PrintPlan(const PlanFlags& f, const PlanInput& input, const Hardware& hw,
                        const Plan& plan, const std::vector<std::string>& notes) {
  TF_ASSIGN_OR_RETURN(LargestModel largest, LargestFittingModel(input, hw));
  TF_ASSIGN_OR_RETURN(LongestContext longest, LongestFittingContext(input, hw));
  if (f.json) {
    nlohmann::json j = PlanToJson(input, hw, plan, &largest, &longest);
    j["hardware"]["notes"] = notes;
    // The model name is a path, which need not be UTF-8: JsonOutput escapes it.
    std::printf("%s\n", JsonOutput(j).c_str());
  } else {
    std::printf("%s", FormatPlanReport(input, hw, plan, &largest, notes, &longest).c_str());
  }
  return plan.feasible ? 0 : kExitDoesNotFit;
}

// `plan --config FILE`: the plan train would run, by train's own stages.
StatusOr<int> RunConfigPlan(const PlanFlags& f) {
  const int ranks = f.gpus_per_node * f.nodes;
  TF_ASSIGN_OR_RETURN(TrainConfig config, LoadTrainConfig(f.config, TrainConfig{}, ranks));
  for (const std::string& w : config.warnings) {
    std::fprintf(stderr, "tierflow plan: warning: %s\n", w.c_str());
  }
  ConfigPlanRequest request;
  request.gpus_per_node = f.gpus_per_node;
  request.nodes = f.nodes;
  if (!f.gpu_memory.empty()) {
    TF_ASSIGN_OR_RETURN(request.gpu_memory_bytes, ByteFlag("--gpu-memory", f.gpu_memory));
  }
  TF_ASSIGN_OR_RETURN(ConfigPlan p, PlanForConfig(config, request));
  MachineDescription rates;
  rates.hardware = p.hardware;
  rates.default_profile = p.default_profile;
  AddRateNotes(rates, f.gpus_per_node, f.nodes, &p.notes);
  return PrintPlan(f, p.input, p.hardware, p.plan, p.notes);
}

StatusOr<int> RunPlan(const PlanFlags& f) {
  if (!f.config.empty()) return RunConfigPlan(f);
  TF_ASSIGN_OR_RETURN(PlanInput input, InputFromFlags(f));
  TF_ASSIGN_OR_RETURN(MachineDescription machine, MachineFromFlags(f));
  std::vector<std::string> notes = machine.notes;
  AddRateNotes(machine, f.gpus_per_node, f.nodes, &notes);
  // As `train --collectives` resolves it for the device planned for.
  TF_ASSIGN_OR_RETURN(input.device_collectives,
                      ResolveDeviceCollectives(f.collectives, machine.device_kind, input.ranks()));
  TF_ASSIGN_OR_RETURN(Plan plan, ComputePlan(input, machine.hardware));
  return PrintPlan(f, input, machine.hardware, plan, notes);
}

// The model: a preset, a directory or config.json, or explicit dimensions.
void AddModelFlags(CLI::App* cmd, PlanFlags* f) {
  cmd->add_option("--model", f->model,
                  "Preset name, a directory with config.json, or a config.json");
  cmd->add_option("--family", f->family, "With explicit dimensions: gpt2 | llama")
      ->capture_default_str();
  cmd->add_option("--layers", f->dims.n_layers, "Explicit dimensions: number of blocks")
      ->check(AtLeast(1));
  cmd->add_option("--d-model", f->dims.d_model, "Explicit dimensions: hidden size")
      ->check(AtLeast(1));
  cmd->add_option("--heads", f->dims.n_heads, "Explicit dimensions: attention heads")
      ->check(AtLeast(1));
  cmd->add_option("--kv-heads", f->dims.n_kv_heads,
                  "Explicit dimensions: key/value heads (default: heads)")
      ->check(AtLeast(1));
  cmd->add_option("--d-ff", f->dims.d_ff, "Explicit dimensions: MLP width (default: family's)")
      ->check(AtLeast(1));
  cmd->add_option("--vocab", f->dims.vocab_size,
                  "Explicit dimensions: vocabulary (default: 50257 gpt2, 32000 llama)")
      ->check(AtLeast(1));
}

// The run: batch, precision, placements, pipeline and collectives.
void AddRunFlags(CLI::App* cmd, PlanFlags* f) {
  cmd->add_option("--micro-batch", f->micro_batch, "Sequences per micro-batch")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--seq-len", f->seq_len,
                  "Tokens per sequence (default: 2048 or the model's maximum)")
      ->check(AtLeast(2));
  cmd->add_option("--grad-accum", f->grad_accum, "Micro-batches per optimizer step")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--dtype", f->dtype, "Device weights/activations: bf16 | fp16 | fp32")
      ->capture_default_str();
  cmd->add_option("--checkpointing", f->checkpointing, "Activation checkpointing: on | off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--optimizer", f->optimizer, "adamw | lion | sgd")->capture_default_str();
  cmd->add_option("--offload-optimizer", f->offload,
                  "Optimizer state: auto (host while it fits, rest on NVMe) | host | nvme")
      ->capture_default_str();
  cmd->add_option("--offload-param", f->offload_param,
                  "Working weights: auto (resident while they fit the device, else stream the "
                  "fewest units from host, or NVMe when the host cannot hold them) | none (all "
                  "resident) | host (or cpu) | nvme")
      ->capture_default_str();
  cmd->add_option("--offload-activations", f->offload_activations,
                  "Activation checkpoints: auto (on the device while the run fits there, else in "
                  "pinned host memory when that fits or steps faster than streaming weights) | "
                  "none | host (needs --checkpointing on)")
      ->capture_default_str();
  cmd->add_option("--offload-gradients", f->offload_gradients,
                  "Where the step's gradients wait for its decision: auto (host memory while the "
                  "host holds them, else the drives) | host | nvme (a few pinned sub-group slots, "
                  "the rest on NVMe beside the optimizer state, which goes wholly there; one "
                  "process)")
      ->capture_default_str();
  cmd->add_option("--mlp-tile-rows", f->mlp_tile_rows,
                  "The MLP in row tiles of this many rows (a multiple of 256; 0 untiled), or auto "
                  "(untiled while the run fits so, else 4096, with checkpointing)")
      ->capture_default_str();
  cmd->add_option("--param-slots", f->param_slots,
                  "Device slots of the streamed weights' ring, each the largest streamed unit "
                  "(at least 2), or auto (3)")
      ->check(CountAtLeast(2, "auto"))
      ->capture_default_str();
  cmd->add_option("--ratio", f->ratio,
                  "Fraction of optimizer state on NVMe, 0..1 (default: planner's)")
      ->check(InRange(0, 1));
  cmd->add_option("--sub-group", f->sub_group,
                  std::string("Parameters per optimizer sub-group, e.g. 16Mi (default: the "
                              "engine's 4Mi; ") +
                      kCountSuffixHelp + ")")
      ->check(CountAtLeast(1));
  cmd->add_option("--buffer-count", f->buffer_count,
                  "Weight staging slots = NVMe I/O slots (the engine's buffer_count)")
      ->check(AtLeast(2))
      ->capture_default_str();
  cmd->add_option("--grad-buckets", f->grad_buckets, "Device gradient buckets")
      ->check(AtLeast(2))
      ->capture_default_str();
  cmd->add_option("--grad-bucket", f->grad_bucket,
                  std::string("Parameters per gradient bucket, or auto: the largest unit, a "
                              "block or the largest tensor, the first that keeps the device "
                              "within 85% (") +
                      kCountSuffixHelp + ")")
      ->check(CountAtLeast(1, "auto"))
      ->capture_default_str();
  cmd->add_option("--collectives", f->collectives,
                  "Data parallelism: where the ranks sum the gradient and gather the weights: host "
                  "(MPI; every rank lands the whole gradient), device (NCCL; only each rank's "
                  "part crosses PCIe) or auto (device on a GPU in a build with NCCL), as "
                  "`tierflow train --collectives`")
      ->check(CLI::IsMember({"auto", "host", "device"}))
      ->capture_default_str();
  cmd->add_option("--pipeline", f->pipeline, "The engine's step pipeline: overlapped | sync")
      ->check(CLI::IsMember({"overlapped", "sync"}))
      ->capture_default_str();
  cmd->add_option("--grad-transfer-dtype", f->grad_transfer_dtype,
                  "Gradients across PCIe: bf16 | fp16 | fp32 (default: the --dtype when 16-bit, "
                  "else fp32; fp16 needs fp16 weights)");
  cmd->add_option("--speculation", f->speculation,
                  std::string("Overlapped pipeline: parameters updated speculatively per step, or "
                              "auto: as many as free host memory allows (") +
                      kCountSuffixHelp + ")")
      ->check(CountAtLeast(0, "auto"))
      ->capture_default_str();
}

// The machine (detected unless given), the ranks, the output, and --config.
void AddMachineFlags(CLI::App* cmd, PlanFlags* f) {
  cmd->add_option("--device", f->device,
                  "auto (the GPU if one answers, else the emulated CPU device) | cpu | cuda")
      ->capture_default_str();
  cmd->add_option("--gpu-memory", f->gpu_memory, "GPU memory, e.g. 24GiB (overrides detection)")
      ->check(ByteSizeAtLeast(1));
  cmd->add_option("--host-memory", f->host_memory,
                  "Usable host RAM, e.g. 64GiB (overrides detection)")
      ->check(ByteSizeAtLeast(1));
  cmd->add_option("--nvme-capacity", f->nvme_capacity,
                  "Free NVMe space, e.g. 1TiB (overrides statvfs; 0: no NVMe)")
      ->check(ByteSizeAtLeast(0));
  cmd->add_option("--nvme-path", f->nvme_paths,
                  "Directory on an NVMe drive (repeatable; default $TMPDIR or /tmp)");
  cmd->add_option("--cores", f->cores, "CPU cores for the optimizer (overrides detection)")
      ->check(AtLeast(1));
  cmd->add_option("--profile", f->profile,
                  "Bandwidth profile JSON saved by `tierflow bench` (default: the one `tierflow "
                  "bench all` saved in ~/.cache/tierflow, when there is one)");
  cmd->add_option("--device-tflops", f->device_tflops, "Dense 16-bit TFLOP/s of the device")
      ->check(Positive());
  cmd->add_option("--gpus-per-node", f->gpus_per_node,
                  "Data parallelism: ranks (one GPU each) per node; host memory, NVMe and cores "
                  "are the node's, shared by them")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--nodes", f->nodes, "Data parallelism: nodes, each with --gpus-per-node GPUs")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--gpus-per-pcie-link", f->gpus_per_pcie_link,
                  "GPUs that share one PCIe link to the host (behind one switch); 1: a link each")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--network-gbps", f->network_gbps,
                  "Network between nodes, Gb/s per node (default: the profile's measured figure, "
                  "else 100)")
      ->check(Positive());
  cmd->add_flag("--json", f->json, "Print one JSON object instead of tables");
  cmd->add_option("--config", f->config,
                  "A `tierflow train` configuration (tierflow and DeepSpeed keys): plan the run "
                  "`tierflow train --config FILE` starts, by train's own stages (it reads the "
                  "model and data as train does, and creates the same device). With it, only "
                  "--gpus-per-node, --nodes (the ranks train is launched with), --gpu-memory (a "
                  "GPU that is not here) and --json apply");
}

}  // namespace

void AddPlan(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "What a fine-tune needs per memory tier, whether it fits, where the optimizer "
      "state goes, and the predicted step time");
  cmd->footer(
      "Exit status: 0 when the run fits, 3 when it does not, 2 when a flag is refused, 1 on "
      "other errors.\n"
      "The accounting (bytes per parameter per component) is in docs/PLANNER.md.");
  AddModelFlags(cmd, f.get());
  AddRunFlags(cmd, f.get());
  AddMachineFlags(cmd, f.get());
  cmd->callback([f, cmd, exit_code] {
    // SIGINT/SIGTERM cancel the plan: the planner's searches call CheckCancel,
    // so the command ends with "interrupted by SIGTERM while planning ..." and
    // exit status 1 instead of running on or dying mid-print.
    InstallCancelSignalHandlers();
    if (!f->config.empty()) {
      for (const char* flag : kRunFlags) {
        if (cmd->count(flag) > 0) {
          std::fprintf(stderr,
                       "tierflow plan: %s with --config: the run is the configuration's; set it "
                       "there (as train reads it), or plan without --config\n",
                       flag);
          *exit_code = 2;
          return;
        }
      }
    }
    StatusOr<int> result = RunPlan(*f);
    if (!result.ok()) {
      std::fprintf(stderr, "tierflow plan: %s\n", result.status().ToString().c_str());
      *exit_code = 1;
      return;
    }
    *exit_code = *result;
  });
}

}  // namespace tierflow::cli
