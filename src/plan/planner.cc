// ComputePlan: sizes every tier's components by the tierflow convention,
// places the optimizer state (host, NVMe or split), checks each tier against
// its capacity, names the binding constraint with advice, and predicts the
// step time (plan/step_time.h).
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "common/units.h"
#include "plan/step_time.h"

namespace tierflow {
namespace {

uint64_t U(int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); }

std::string Percent(uint64_t used, uint64_t capacity) {
  if (capacity == 0) return used == 0 ? "0%" : "no capacity";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f%%", 100.0 * static_cast<double>(used) / capacity);
  return buf;
}

// Use over capacity; infinity when something is needed where there is nothing.
double Utilization(const TierPlan& tier) {
  uint64_t used = tier.total_bytes();
  if (tier.capacity_bytes == 0) return used == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return static_cast<double>(used) / static_cast<double>(tier.capacity_bytes);
}

// Parameter tensors per group kind, for counting NVMe state files.
struct TensorCounts {
  int64_t embedding = 0, layer = 0, head = 0;
  int64_t Total(int64_t n_layers) const { return embedding + n_layers * layer + head; }
};

TensorCounts CountTensors(const ModelConfig& model) {
  ModelConfig one = model;
  one.n_layers = 1;  // blocks are identical; avoids building L groups of names
  std::vector<ParamGroup> groups = ParameterGroups(one);
  TensorCounts c;
  c.embedding = static_cast<int64_t>(groups.front().tensors.size());
  c.layer = static_cast<int64_t>(groups[1].tensors.size());
  c.head = static_cast<int64_t>(groups.back().tensors.size());
  return c;
}

Status ValidateInput(const PlanInput& in, const Hardware& hw) {
  TF_RETURN_IF_ERROR(ValidateModelConfig(in.model));
  if (in.micro_batch < 1) return InvalidArgumentError("micro-batch must be at least 1");
  if (in.grad_accum < 1) return InvalidArgumentError("gradient accumulation must be at least 1");
  if (in.seq_len < 1 || in.seq_len > in.model.max_seq_len) {
    return InvalidArgumentError("sequence length " + std::to_string(in.seq_len) +
                                " is outside 1.." + std::to_string(in.model.max_seq_len) +
                                " (the positions of model '" + in.model.name + "')");
  }
  if (in.nvme_ratio > 1 || (in.nvme_ratio >= 0 && std::isnan(in.nvme_ratio))) {
    return InvalidArgumentError("the NVMe ratio must be in [0, 1], got " +
                                std::to_string(in.nvme_ratio));
  }
  if (in.offload == OffloadChoice::kHost && in.nvme_ratio > 0) {
    return InvalidArgumentError("a ratio of optimizer state on NVMe (" +
                                std::to_string(in.nvme_ratio) +
                                ") contradicts --offload-optimizer host");
  }
  if (in.sub_group_params < 0) return InvalidArgumentError("sub-group size must be positive");
  if (in.staging_buffers < 1 || in.nvme_io_buffers < 1) {
    return InvalidArgumentError("buffer counts must be at least 1");
  }
  if (hw.cores < 1) return InvalidArgumentError("the hardware must have at least one core");
  return Status::Ok();
}

// Everything about the host except the resident optimizer state.
struct HostFixed {
  uint64_t accumulator = 0, grad_staging = 0, weight_staging = 0, nvme_io = 0, overhead = 0,
           device_share = 0;
  uint64_t Sum(bool with_nvme) const {
    return accumulator + grad_staging + weight_staging + overhead + device_share +
           (with_nvme ? nvme_io : 0);
  }
};

int64_t NvmeParams(double ratio, int64_t params) {
  if (ratio <= 0) return 0;
  return std::min<int64_t>(params, static_cast<int64_t>(std::ceil(ratio * params)));
}

// The placement: the user's ratio, or (kAuto) the smallest ratio, in steps of
// 1%, that lets the host hold the rest within kHostAutoPlacementFraction of
// its capacity.
double ChooseRatio(const PlanInput& in, int64_t params, uint64_t state_bytes,
                   const HostFixed& fixed, uint64_t host_capacity, bool* chosen_by_planner) {
  *chosen_by_planner = false;
  if (in.nvme_ratio >= 0) return in.nvme_ratio;
  if (in.offload == OffloadChoice::kHost) return 0;
  if (in.offload == OffloadChoice::kNvme) return 1;
  *chosen_by_planner = true;
  const double target = static_cast<double>(host_capacity) * kHostAutoPlacementFraction;
  const double all_state = static_cast<double>(U(params) * state_bytes);
  if (static_cast<double>(fixed.Sum(false)) + all_state <= target) return 0;
  const double room = target - static_cast<double>(fixed.Sum(true));
  double ratio = 1.0 - std::max(room, 0.0) / all_state;
  ratio = std::ceil(ratio * 100.0 - 1e-9) / 100.0;
  return std::clamp(ratio, 0.01, 1.0);
}

std::string DeviceAdvice(const PlanInput& in, const Plan& plan) {
  const uint64_t cap = plan.device.capacity_bytes;
  const uint64_t weights = plan.device.bytes_of("weights");
  const uint64_t fixed = weights + plan.device.bytes_of("cuda_context") +
                         plan.device.bytes_of("workspace") +
                         plan.device.bytes_of("gradient_buckets");
  std::string s;
  if (fixed > cap) {
    s = "the " + std::string(DTypeName(in.dtype)) + " working weights alone are " +
        FormatBytes(weights) +
        " and tierflow keeps them on the device: use a device with at least " +
        FormatBytes(plan.device.total_bytes()) + ", or a smaller model";
    return s;
  }
  s = "activations take " + FormatBytes(plan.device.bytes_of("activations")) + " of it: ";
  std::string sep;
  if (!in.checkpointing) {
    s += "turn activation checkpointing on (--checkpointing on: activations " +
         FormatBytes(plan.activations_with_checkpointing_bytes) + ")";
    sep = ", or ";
  }
  if (in.micro_batch > 1) {
    s += sep + "lower --micro-batch (now " + std::to_string(in.micro_batch) +
         ") and raise --grad-accum";
    sep = ", or ";
  }
  s += sep + "shorten --seq-len (now " + std::to_string(in.seq_len) + ")";
  return s;
}

std::string HostAdvice(const PlanInput& in, const Plan& plan) {
  const Placement& p = plan.placement;
  if (p.nvme_ratio < 1.0) {
    std::string how = in.offload == OffloadChoice::kHost
                          ? "move optimizer state to NVMe (--offload-optimizer nvme, or auto "
                            "to let the planner split it)"
                          : "put more of the optimizer state on NVMe (raise --ratio toward 1)";
    return how + "; the optimizer state on host is " +
           FormatBytes(plan.host.bytes_of("master_weights") +
                       plan.host.bytes_of("optimizer_moments"));
  }
  std::string s = "even with all optimizer state on NVMe the host needs the fp32 gradient "
                  "accumulator (" +
                  FormatBytes(plan.host.bytes_of("gradient_accumulator")) +
                  ", 4 B/param), pinned staging and I/O buffers";
  if (plan.host.bytes_of("emulated_device_memory") > 0) {
    s += " and the emulated device's memory (" +
         FormatBytes(plan.host.bytes_of("emulated_device_memory")) + ")";
  }
  return s + ": use a host with more RAM, or a smaller model";
}

std::string NvmeAdvice(const Plan& plan) {
  if (plan.nvme.capacity_bytes == 0) {
    return "no NVMe path has free space: give one with --nvme-path (or --nvme-capacity)";
  }
  return "free space on the NVMe paths or add a larger one with --nvme-path";
}

std::string TierName(const std::string& tier) {
  if (tier == "device") return "device memory";
  if (tier == "host") return "host memory";
  return "NVMe capacity";
}

void Explain(const PlanInput& in, Plan& plan) {
  TierPlan* tiers[] = {&plan.device, &plan.host, &plan.nvme};
  TierPlan* binding = tiers[0];
  for (TierPlan* t : tiers) {
    if (Utilization(*t) > Utilization(*binding)) binding = t;
  }
  plan.binding_constraint = binding->name;
  plan.feasible = true;
  for (TierPlan* t : tiers) plan.feasible = plan.feasible && t->total_bytes() <= t->capacity_bytes;

  const Placement& p = plan.placement;
  std::string state_where =
      p.where() == "host"   ? "optimizer state on host"
      : p.where() == "nvme" ? "optimizer state on NVMe"
                            : "optimizer state split, " +
                                  std::to_string(static_cast<int>(std::lround(p.nvme_ratio * 100))) +
                                  "% on NVMe";
  if (plan.feasible) {
    plan.explanation = "fits: " + state_where + "; the tightest tier is " +
                       TierName(binding->name) + " (" +
                       FormatBytes(binding->total_bytes()) + " of " +
                       FormatBytes(binding->capacity_bytes) + ", " +
                       Percent(binding->total_bytes(), binding->capacity_bytes) + ")";
    return;
  }
  std::string advice = binding->name == "device" ? DeviceAdvice(in, plan)
                       : binding->name == "host" ? HostAdvice(in, plan)
                                                 : NvmeAdvice(plan);
  plan.explanation = "does not fit: the binding constraint is " + TierName(binding->name) +
                     ": needs " + FormatBytes(binding->total_bytes()) + ", has " +
                     FormatBytes(binding->capacity_bytes) + "; " + advice;
  for (TierPlan* t : tiers) {
    if (t != binding && t->total_bytes() > t->capacity_bytes) {
      plan.explanation += ". Also over: " + TierName(t->name) + " (needs " +
                          FormatBytes(t->total_bytes()) + ", has " +
                          FormatBytes(t->capacity_bytes) + ")";
    }
  }
}

}  // namespace

std::string_view OffloadChoiceName(OffloadChoice choice) {
  switch (choice) {
    case OffloadChoice::kAuto: return "auto";
    case OffloadChoice::kHost: return "host";
    case OffloadChoice::kNvme: return "nvme";
  }
  return "?";
}

StatusOr<OffloadChoice> ParseOffloadChoice(std::string_view name) {
  if (name == "auto") return OffloadChoice::kAuto;
  if (name == "host" || name == "cpu") return OffloadChoice::kHost;
  if (name == "nvme") return OffloadChoice::kNvme;
  return InvalidArgumentError("unknown optimizer placement '" + std::string(name) +
                              "': use auto, host or nvme");
}

uint64_t TierPlan::total_bytes() const {
  uint64_t sum = 0;
  for (const PlanComponent& c : components) sum += c.bytes;
  return sum;
}

uint64_t TierPlan::bytes_of(std::string_view component) const {
  for (const PlanComponent& c : components) {
    if (c.name == component) return c.bytes;
  }
  return 0;
}

std::string Placement::where() const {
  if (nvme_state_params == 0) return "host";
  if (host_state_params == 0) return "nvme";
  return "split";
}

StatusOr<Plan> ComputePlan(const PlanInput& in, const Hardware& hw) {
  TF_RETURN_IF_ERROR(ValidateInput(in, hw));
  const ModelConfig& m = in.model;
  Plan plan;
  plan.model_name = m.name;
  plan.family = m.family;
  plan.params = ParameterCount(m);
  plan.tokens_per_step = in.micro_batch * in.seq_len * in.grad_accum;
  plan.state_bytes_per_param = OptimizerStateBytesPerParam(OptimizerMomentCount(in.optimizer));
  const uint64_t P = U(plan.params);
  const uint64_t a = DTypeSize(in.dtype);
  const uint64_t s = plan.state_bytes_per_param;
  const uint64_t largest_group = U(LargestGroupParameterCount(m));

  // ---- device ----
  ActivationOptions act;
  act.micro_batch = in.micro_batch;
  act.seq_len = in.seq_len;
  act.dtype = in.dtype;
  act.attention_saves_probabilities = in.attention_saves_probabilities;
  act.checkpointing = true;
  plan.activations_with_checkpointing_bytes = ComputeActivationBytes(m, act).peak();
  act.checkpointing = false;
  plan.activations_without_checkpointing_bytes = ComputeActivationBytes(m, act).peak();
  act.checkpointing = in.checkpointing;
  plan.activations = ComputeActivationBytes(m, act);

  plan.device.name = "device";
  plan.device.capacity_bytes = hw.device_memory_bytes;
  plan.device.components = {
      {"weights", P * a, std::to_string(a) + " B/param, all layers resident"},
      {"gradient_buckets", largest_group * a * U(in.staging_buffers),
       "largest layer group x " + std::to_string(a) + " B x " +
           std::to_string(in.staging_buffers) + " buffers (D2H staging)"},
      {"activations", plan.activations.peak(),
       std::string(in.checkpointing ? "checkpointing on" : "checkpointing off") +
           " (on: " + FormatBytes(plan.activations_with_checkpointing_bytes) +
           ", off: " + FormatBytes(plan.activations_without_checkpointing_bytes) +
           "), incl. logits " + FormatBytes(plan.activations.logits)},
  };
  if (hw.device_is_gpu) {
    plan.device.components.push_back(
        {"workspace", kGemmWorkspaceBytesPerStream * kGemmStreams,
         "cuBLAS workspace, " + std::to_string(kGemmStreams) + " streams"});
  }
  if (hw.device_reserved_bytes > 0) {
    plan.device.components.push_back(
        {"cuda_context", hw.device_reserved_bytes, "CUDA context and allocator reserve"});
  }
  const uint64_t device_tensors = plan.device.total_bytes() - hw.device_reserved_bytes;

  // ---- placement ----
  plan.placement.sub_group_params =
      in.sub_group_params > 0 ? std::min(in.sub_group_params, plan.params)
                              : DefaultSubGroupParams(plan.params);
  const uint64_t sub_group = U(plan.placement.sub_group_params);
  HostFixed fixed;
  fixed.accumulator = P * kGradAccumulatorBytesPerParam;
  fixed.grad_staging = largest_group * a * U(in.staging_buffers);
  fixed.weight_staging = sub_group * a * U(in.staging_buffers);
  fixed.nvme_io = sub_group * s * U(in.nvme_io_buffers);
  fixed.overhead = kHostProcessOverheadBytes;
  fixed.device_share = hw.device_memory_is_host_memory ? device_tensors : 0;
  bool chosen = false;
  const double ratio = ChooseRatio(in, plan.params, s, fixed, hw.host_memory_bytes, &chosen);
  Placement& p = plan.placement;
  p.nvme_state_params = NvmeParams(ratio, plan.params);
  p.host_state_params = plan.params - p.nvme_state_params;
  p.nvme_ratio = plan.params > 0 ? static_cast<double>(p.nvme_state_params) / plan.params : 0;
  p.num_sub_groups = (plan.params + p.sub_group_params - 1) / p.sub_group_params;
  p.staging_buffers = in.staging_buffers;
  p.nvme_io_buffers = p.nvme_state_params > 0 ? in.nvme_io_buffers : 0;
  p.chosen_by_planner = chosen;
  const uint64_t host_params = U(p.host_state_params);
  const uint64_t nvme_params = U(p.nvme_state_params);
  const int moments = OptimizerMomentCount(in.optimizer);

  // ---- host ----
  plan.host.name = "host";
  plan.host.capacity_bytes = hw.host_memory_bytes;
  plan.host.components = {
      {"master_weights", host_params * kMasterBytesPerParam, "fp32, 4 B/param on host"},
      {"optimizer_moments", host_params * kMomentBytesPerParam * U(moments),
       std::to_string(moments) + " fp32 moment(s), " + std::to_string(4 * moments) +
           " B/param on host"},
      {"gradient_accumulator", fixed.accumulator, "fp32, 4 B/param, pinned"},
      {"pinned_gradient_staging", fixed.grad_staging,
       "D2H landing: largest layer group x " + std::to_string(in.staging_buffers) + " buffers"},
      {"pinned_weight_staging", fixed.weight_staging,
       "H2D source: sub-group x " + std::to_string(a) + " B x " +
           std::to_string(in.staging_buffers) + " buffers"},
      {"nvme_io_buffers", nvme_params > 0 ? fixed.nvme_io : 0,
       "pinned, sub-group x " + std::to_string(s) + " B x " +
           std::to_string(in.nvme_io_buffers) + " buffers"},
      {"process_overhead", fixed.overhead, "code, threads, dataset, allocator slack"},
  };
  if (fixed.device_share > 0) {
    plan.host.components.push_back(
        {"emulated_device_memory", fixed.device_share, "the CPU device's memory is host RAM"});
  }
  plan.pinned_bytes = fixed.accumulator + fixed.grad_staging + fixed.weight_staging +
                      plan.host.bytes_of("nvme_io_buffers");

  // ---- NVMe ----
  plan.nvme.name = "nvme";
  plan.nvme.capacity_bytes = hw.nvme_capacity_bytes;
  const uint64_t state_file_bytes = nvme_params * s;
  uint64_t metadata = 0;
  if (nvme_params > 0) {
    const TensorCounts counts = CountTensors(m);
    const double share = static_cast<double>(nvme_params) / static_cast<double>(P);
    const uint64_t files = static_cast<uint64_t>(
        std::ceil(share * static_cast<double>(counts.Total(m.n_layers)))) * U(1 + moments);
    const uint64_t blocks = (state_file_bytes + kNvmeBlockBytes - 1) / kNvmeBlockBytes + files;
    metadata = blocks * kNvmeChecksumBytesPerBlock +
               files * (kNvmeFileHeaderBytes + kNvmeAlignmentBytes);
  }
  plan.nvme.components = {
      {"state_files", state_file_bytes,
       std::to_string(s) + " B/param (master + moments) for the NVMe share"},
      {"checksums_and_headers", metadata, "a checksum per 1 MiB block, header and padding per file"},
  };

  Explain(in, plan);
  PredictStepTime(in, hw, plan);
  return plan;
}

Status RequireFeasible(const Plan& plan) {
  if (plan.feasible) return Status::Ok();
  if (plan.binding_constraint == "nvme") return ResourceExhaustedError(plan.explanation);
  return OutOfMemoryError(plan.explanation);
}

}  // namespace tierflow
