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
#include "plan/bandwidth_profile.h"
#include "plan/default_profile.h"
#include "plan/hardware_detect.h"
#include "plan/plan_json.h"
#include "plan/plan_report.h"
#include "plan/planner.h"
#include "tierflow/device.h"
#include "tierflow/model_config.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "train/collectives_choice.h"

namespace tierflow::cli {
namespace {

constexpr int kExitDoesNotFit = 3;

struct PlanFlags {
  std::string model;
  // Explicit dimensions, used when --model is not given.
  std::string family = "llama";
  int64_t layers = 0, d_model = 0, heads = 0, kv_heads = 0, d_ff = 0, vocab = 0;

  int64_t micro_batch = 1;
  int64_t seq_len = 0;
  int64_t grad_accum = 1;
  std::string dtype = "bf16";
  std::string grad_transfer_dtype;  // "" = the default for --dtype
  std::string checkpointing = "on";
  std::string optimizer = "adamw";
  std::string offload = "auto";
  std::string offload_param = "auto";
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
};

StatusOr<ModelConfig> ModelFromFlags(const PlanFlags& f) {
  if (!f.model.empty()) {
    if (f.layers || f.d_model || f.heads) {
      return InvalidArgumentError(
          "give either --model or the dimensions (--layers, --d-model, "
          "--heads, ...), not both");
    }
    return ResolveModel(f.model);
  }
  if (!f.layers || !f.d_model || !f.heads) {
    return InvalidArgumentError("say which model: --model PRESET|DIR|config.json (presets: " + [] {
      std::string s;
      for (const auto& n : PresetNames()) s += (s.empty() ? "" : ", ") + n;
      return s;
    }() + "), or --layers, --d-model and --heads (with --family)");
  }
  TF_ASSIGN_OR_RETURN(ModelFamily family, ParseModelFamily(f.family));
  ModelDimensions d;
  d.family = family;
  d.n_layers = f.layers;
  d.d_model = f.d_model;
  d.n_heads = f.heads;
  d.n_kv_heads = f.kv_heads;
  d.d_ff = f.d_ff;
  d.vocab_size = f.vocab > 0 ? f.vocab : (family == ModelFamily::kGpt2 ? 50257 : 32000);
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
StatusOr<Hardware> HardwareFromFlags(const PlanFlags& f, std::vector<std::string>* notes) {
  Hardware hw;
  TF_ASSIGN_OR_RETURN(const DeviceSpec spec, ParseDeviceSpec("--device", f.device));
  const DeviceChoice device = spec.choice;
  std::optional<SimProfile> sim;
  if (device == DeviceChoice::kSim) {
    TF_ASSIGN_OR_RETURN(sim, ResolveSimProfile(spec.sim_profile));
  }

  // Host memory first: the emulated device shares it.
  if (!f.host_memory.empty()) {
    TF_ASSIGN_OR_RETURN(hw.host_memory_bytes, ByteFlag("--host-memory", f.host_memory));
    notes->push_back("host:   " + FormatBytes(hw.host_memory_bytes) + " (--host-memory)");
  } else {
    auto mem = DetectHostMemory("/");
    if (!mem.ok()) return mem.status();
    hw.host_memory_bytes = mem->usable_bytes;
    std::string limit = mem->cgroup_limit_bytes > 0
                            ? "cgroup limit " + FormatBytes(mem->cgroup_limit_bytes) + " (" +
                                  mem->cgroup_limit_file + ")"
                            : "no cgroup limit";
    notes->push_back("host:   " + FormatBytes(hw.host_memory_bytes) + " usable, detected (" +
                     "MemAvailable " + FormatBytes(mem->mem_available_bytes) + " of " +
                     FormatBytes(mem->mem_total_bytes) + ", " + limit + ")");
  }

  std::string gpu_note;
  if (sim) {
    hw.device_is_gpu = true;
    hw.device_memory_bytes = static_cast<uint64_t>(sim->memory_gib * double(1ull << 30));
    if (!f.gpu_memory.empty()) {
      TF_ASSIGN_OR_RETURN(hw.device_memory_bytes, ByteFlag("--gpu-memory", f.gpu_memory));
    }
    hw.device_description = "sim:" + sim->name + " (simulated GPU)";
    gpu_note = "device: " + hw.device_description + ", " + FormatBytes(hw.device_memory_bytes) +
               " (its published figures; --device sim:" + spec.sim_profile + ")";
  } else if (!f.gpu_memory.empty() && device != DeviceChoice::kCpu) {
    TF_ASSIGN_OR_RETURN(hw.device_memory_bytes, ByteFlag("--gpu-memory", f.gpu_memory));
    hw.device_is_gpu = true;
    hw.device_reserved_bytes = kCudaContextBytes;
    hw.device_description = "GPU with " + FormatBytes(hw.device_memory_bytes);
    gpu_note = "device: GPU, " + FormatBytes(hw.device_memory_bytes) + " (--gpu-memory; " +
               FormatBytes(kCudaContextBytes) + " of it reserved for the CUDA context)";
  } else if (device != DeviceChoice::kCpu && BuiltWithCuda() && CudaUnavailableReason().empty()) {
    DeviceOptions options;
    options.kind = DeviceChoice::kCuda;
    auto device = CreateDevice(options);
    if (!device.ok()) return device.status().WithContext("detecting the GPU");
    hw.device_is_gpu = true;
    hw.device_memory_bytes = (*device)->DeviceMemory().capacity_bytes;
    hw.device_description = (*device)->description();
    gpu_note = "device: " + hw.device_description + ", " + FormatBytes(hw.device_memory_bytes) +
               " free, detected";
  } else if (device == DeviceChoice::kCuda) {
    return UnavailableError("--device cuda: no usable GPU (" + CudaUnavailableReason() +
                            "); give --gpu-memory to plan for one");
  } else {
    hw.device_is_gpu = false;
    hw.device_memory_is_host_memory = true;
    if (!f.gpu_memory.empty()) {
      TF_ASSIGN_OR_RETURN(hw.device_memory_bytes, ByteFlag("--gpu-memory", f.gpu_memory));
    } else {
      hw.device_memory_bytes = hw.host_memory_bytes;
    }
    hw.device_description = "emulated CPU device";
    std::string why =
        device == DeviceChoice::kCpu ? "--device cpu" : "no GPU: " + CudaUnavailableReason();
    gpu_note = "device: emulated CPU device (" + why + "), " + FormatBytes(hw.device_memory_bytes) +
               ", its memory is host RAM; give --gpu-memory 24GiB to plan for a GPU";
  }
  notes->insert(notes->begin(), gpu_note);

  if (!f.nvme_capacity.empty()) {
    TF_ASSIGN_OR_RETURN(hw.nvme_capacity_bytes, ByteFlag("--nvme-capacity", f.nvme_capacity));
    notes->push_back("nvme:   " + FormatBytes(hw.nvme_capacity_bytes) + " (--nvme-capacity)");
  } else {
    std::vector<std::string> paths = f.nvme_paths;
    if (paths.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      paths.push_back(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
    }
    std::set<dev_t> filesystems;  // two paths on one filesystem share its free space
    std::string where;
    for (const std::string& path : paths) {
      struct stat st;
      if (stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "--nvme-path " + path);
      TF_ASSIGN_OR_RETURN(uint64_t free_bytes, FreeBytesAt(path));
      where += (where.empty() ? "" : ", ") + path + " " + FormatBytes(free_bytes) + " free";
      if (filesystems.insert(st.st_dev).second) hw.nvme_capacity_bytes += free_bytes;
    }
    notes->push_back("nvme:   " + FormatBytes(hw.nvme_capacity_bytes) + ", detected (" + where +
                     (f.nvme_paths.empty() ? "; the default path, give --nvme-path" : "") + ")");
  }

  if (f.cores > 0) {
    hw.cores = f.cores;
    notes->push_back("cores:  " + std::to_string(hw.cores) + " (--cores)");
  } else {
    TF_ASSIGN_OR_RETURN(CpuInfo cpus, DetectCpus("/", OnlineCpus()));
    hw.cores = cpus.usable_cores;
    notes->push_back(
        "cores:  " + std::to_string(hw.cores) + ", detected" +
        (cpus.cgroup_cpu_limit > 0 ? " (cgroup quota in " + cpus.cgroup_limit_file + ")" : ""));
  }

  hw.bandwidths = DefaultBandwidths(hw.device_is_gpu, hw.cores);
  std::string default_profile;
  TF_ASSIGN_OR_RETURN(std::optional<std::string> profile,
                      ResolveProfilePath(f.profile, &default_profile));
  if (profile) {
    TF_ASSIGN_OR_RETURN(hw.bandwidths, LoadBandwidthProfile(*profile, hw.bandwidths));
  }
  if (sim) {
    // The simulated GPU's own figures: what its streams will take.
    hw.bandwidths.device_tflops = sim->tensor_tflops;
    hw.bandwidths.device_efficiency = sim->tensor_efficiency;
    hw.bandwidths.h2d_gb_per_second = sim->link_gb_per_s * sim->link_efficiency;
    hw.bandwidths.d2h_gb_per_second = sim->link_gb_per_s * sim->link_efficiency;
    hw.bandwidths.source += ", device and link from sim:" + sim->name;
  }
  if (f.device_tflops > 0) {
    hw.bandwidths.device_tflops = f.device_tflops;
    hw.bandwidths.source += ", device TFLOP/s from --device-tflops";
  }
  if (f.network_gbps > 0) {
    if (f.nodes < 2) {
      return InvalidArgumentError(
          "--network-gbps describes the network between nodes, and this plan has one node: "
          "give --nodes 2 or more, or drop it");
    }
    hw.bandwidths.inter_node_busbw_gb_per_second = f.network_gbps / 8;
    hw.bandwidths.source += ", network from --network-gbps";
  }
  char rates[512];
  const Bandwidths& b = hw.bandwidths;
  std::snprintf(rates, sizeof(rates),
                "rates:  H2D %.1f / D2H %.1f GB/s, host memory %.1f GB/s, optimizer %.2g "
                "params/s, NVMe %.1f read / %.1f write GB/s, device %.3g TFLOP/s x %.0f%%",
                b.h2d_gb_per_second, b.d2h_gb_per_second, b.host_memory_gb_per_second,
                b.adam_params_per_second, b.nvme_read_gb_per_second, b.nvme_write_gb_per_second,
                b.device_tflops, b.device_efficiency * 100);
  notes->push_back(rates);
  if (f.gpus_per_node > 1 || f.nodes > 1) {
    char comm[256];
    std::snprintf(comm, sizeof comm,
                  "        collectives: %.2f GB/s bus bandwidth within a node, %.2f between nodes",
                  b.intra_node_busbw_gb_per_second, b.inter_node_busbw_gb_per_second);
    notes->push_back(comm);
  }
  notes->push_back("        (" +
                   DescribeRates(b, static_cast<int64_t>(std::time(nullptr)), default_profile) +
                   ")");
  return hw;
}

StatusOr<int> RunPlan(const PlanFlags& f) {
  TF_ASSIGN_OR_RETURN(PlanInput input, InputFromFlags(f));
  std::vector<std::string> notes;
  TF_ASSIGN_OR_RETURN(Hardware hw, HardwareFromFlags(f, &notes));
  // As `train --collectives` resolves it for the device planned for.
  TF_ASSIGN_OR_RETURN(const DeviceSpec spec, ParseDeviceSpec("--device", f.device));
  const DeviceKind kind = !hw.device_is_gpu                   ? DeviceKind::kCpu
                          : spec.choice == DeviceChoice::kSim ? DeviceKind::kSim
                                                              : DeviceKind::kCuda;
  TF_ASSIGN_OR_RETURN(input.device_collectives,
                      ResolveDeviceCollectives(f.collectives, kind, input.ranks()));
  TF_ASSIGN_OR_RETURN(Plan plan, ComputePlan(input, hw));
  TF_ASSIGN_OR_RETURN(LargestModel largest, LargestFittingModel(input, hw));
  if (f.json) {
    nlohmann::json j = PlanToJson(input, hw, plan, &largest);
    j["hardware"]["notes"] = notes;
    // The model name is a path, which need not be UTF-8: JsonOutput escapes it.
    std::printf("%s\n", JsonOutput(j).c_str());
  } else {
    std::printf("%s", FormatPlanReport(input, hw, plan, &largest, notes).c_str());
  }
  return plan.feasible ? 0 : kExitDoesNotFit;
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
  cmd->add_option("--model", f->model,
                  "Preset name, a directory with config.json, or a config.json");
  cmd->add_option("--family", f->family, "With explicit dimensions: gpt2 | llama")
      ->capture_default_str();
  cmd->add_option("--layers", f->layers, "Explicit dimensions: number of blocks")
      ->check(AtLeast(1));
  cmd->add_option("--d-model", f->d_model, "Explicit dimensions: hidden size")->check(AtLeast(1));
  cmd->add_option("--heads", f->heads, "Explicit dimensions: attention heads")->check(AtLeast(1));
  cmd->add_option("--kv-heads", f->kv_heads,
                  "Explicit dimensions: key/value heads (default: heads)")
      ->check(AtLeast(1));
  cmd->add_option("--d-ff", f->d_ff, "Explicit dimensions: MLP width (default: family's)")
      ->check(AtLeast(1));
  cmd->add_option("--vocab", f->vocab,
                  "Explicit dimensions: vocabulary (default: 50257 gpt2, 32000 llama)")
      ->check(AtLeast(1));
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
  cmd->callback([f, exit_code] {
    // SIGINT/SIGTERM cancel the plan: the planner's searches call CheckCancel,
    // so the command ends with "interrupted by SIGTERM while planning ..." and
    // exit status 1 instead of running on or dying mid-print.
    InstallCancelSignalHandlers();
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
