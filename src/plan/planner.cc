// ComputePlan: sizes every tier's components as the engine allocates them
// (plan/memory_model.h; the device's in plan/device_tier.h), places the
// optimizer state (host, NVMe or split), checks each tier against its
// capacity, names the binding constraint with advice, and predicts the step
// time (plan/step_time.h).
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "common/cancel.h"
#include "common/checked_math.h"
#include "common/units.h"
#include "io/file_reader.h"
#include "io/safetensors_writer.h"
#include "plan/device_tier.h"
#include "plan/param_placement.h"
#include "plan/speculation_budget.h"
#include "plan/step_time.h"
#include "tierflow/grad_transfer.h"

namespace tierflow {
namespace {

uint64_t U(int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); }

// Byte counts saturate (common/checked_math.h): a total clamped at 2^64 - 1
// never fits, whereas a wrapped one could look small enough to.
uint64_t Mul(auto... v) { return SaturatingProduct(v...); }
uint64_t Sum(auto... v) { return SaturatingSum(v...); }

uint64_t RoundUp(uint64_t v, uint64_t to) { return SaturatingAdd(v, to - 1) / to * to; }

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

}  // namespace

std::string GradSpillBlocker(const PlanInput& in, const Hardware& hw) {
  if (in.device_collectives) {
    return "device collectives (--collectives device) sum each rank's part on the device, and "
           "the engine spills the host collectives' running sums only (use --collectives host)";
  }
  if (in.offload == OffloadPlacement::kHost) {
    return "the gradients wait beside the optimizer state, which must be wholly on NVMe, and "
           "--offload-optimizer host keeps it in host memory (use nvme or auto)";
  }
  if (in.nvme_ratio >= 0 && in.nvme_ratio < 1) {
    return "the gradients wait beside the optimizer state, which must be wholly on NVMe, and "
           "--ratio puts " +
           std::to_string(static_cast<int>(std::lround((1 - in.nvme_ratio) * 100))) +
           "% of it in host memory (use --ratio 1, or leave it out)";
  }
  if (hw.nvme_capacity_bytes == 0) {
    return "the gradients go to the drives, and no NVMe path has free space (give one with "
           "--nvme-path, or --nvme-capacity)";
  }
  return "";
}

namespace {

Status ValidateInput(const PlanInput& in, const Hardware& hw) {
  TF_RETURN_IF_ERROR(ValidateModelConfig(in.model));
  if (in.micro_batch < 1) return InvalidArgumentError("micro-batch must be at least 1");
  if (in.grad_accum < 1) return InvalidArgumentError("gradient accumulation must be at least 1");
  if (in.mlp_tile_rows.has_value() &&
      (*in.mlp_tile_rows < 0 || *in.mlp_tile_rows % kMlpTileQuantum != 0)) {
    return InvalidArgumentError("the MLP's row tile (--mlp-tile-rows) is " +
                                std::to_string(*in.mlp_tile_rows) +
                                ": give 0 (untiled), a positive multiple of " +
                                std::to_string(kMlpTileQuantum) + ", or auto");
  }
  if (in.mlp_tile_rows.value_or(0) > 0 && in.grad_bucket_params.has_value() &&
      *in.grad_bucket_params < GradBucketSizesOf(in.model).mlp) {
    return InvalidArgumentError(
        "a tiled MLP adds every tile to all of a block's MLP weights, so a gradient bucket "
        "must hold them (" +
        std::to_string(GradBucketSizesOf(in.model).mlp) + " parameters; --grad-bucket is " +
        std::to_string(*in.grad_bucket_params) + "): raise --grad-bucket or untile the MLP");
  }
  if (in.offload_activations == ActivationOffload::kHost && !in.checkpointing) {
    return InvalidArgumentError(
        "--offload-activations host moves the activation checkpoints, and checkpointing is off: "
        "turn on --activation-checkpointing, or use --offload-activations none");
  }
  if (in.offload_gradients == GradOffload::kNvme) {
    if (const std::string why = GradSpillBlocker(in, hw); !why.empty()) {
      return InvalidArgumentError("--offload-gradients nvme cannot run here: " + why +
                                  "; use --offload-gradients host (or auto)");
    }
  }
  if (in.grad_spill_slots < 2) {
    return InvalidArgumentError("the gradients' spill slots are " +
                                std::to_string(in.grad_spill_slots) +
                                ": the engine needs at least 2 (one filling while one is written)");
  }
  struct Bound {
    const char* name;
    int64_t value;
    int64_t max;
  };
  for (const Bound& b :
       {Bound{"micro-batch", in.micro_batch, kMaxPlanMicroBatch},
        Bound{"gradient accumulation", in.grad_accum, kMaxPlanGradAccum},
        Bound{"sub-group size", in.sub_group_params, kMaxPlanParams},
        Bound{"speculation size", in.speculation_params.value_or(0), kMaxPlanParams},
        Bound{"buffer count", in.buffer_count, kMaxPlanSlots},
        Bound{"gradient buckets", in.grad_buckets, kMaxPlanSlots},
        Bound{"gradient bucket size", in.grad_bucket_params.value_or(0), kMaxPlanParams},
        Bound{"NVMe directories", in.nvme_directories, kMaxPlanSlots},
        Bound{"device slots for streamed weights (--param-slots)", in.param_slots.value_or(0),
              kMaxPlanSlots}}) {
    if (b.value > b.max) {
      return InvalidArgumentError(std::string(b.name) + " is " + std::to_string(b.value) +
                                  ", more than the planner's limit of " + std::to_string(b.max));
    }
  }
  // Beyond the model's positions is a plan (what fits); the verdict says
  // that training it needs a config that extends them.
  if (in.seq_len < 1 || in.seq_len > kMaxPlanSeqLen) {
    return InvalidArgumentError("sequence length " + std::to_string(in.seq_len) +
                                " is outside 1.." + std::to_string(kMaxPlanSeqLen) +
                                ", the planner's limit");
  }
  if (in.nvme_ratio > 1 || std::isnan(in.nvme_ratio)) {
    return InvalidArgumentError("the NVMe ratio must be in [0, 1], got " +
                                std::to_string(in.nvme_ratio));
  }
  if (in.offload == OffloadPlacement::kHost && in.nvme_ratio > 0) {
    return InvalidArgumentError("a ratio of optimizer state on NVMe (" +
                                std::to_string(in.nvme_ratio) +
                                ") contradicts --offload-optimizer host");
  }
  if (in.sub_group_params < (in.sub_group_cut == SubGroupCut::kSlices ? 1 : 0)) {
    return InvalidArgumentError(in.sub_group_cut == SubGroupCut::kSlices
                                    ? "sub-group size must be positive"
                                    : "sub-group size must not be negative");
  }
  if (in.buffer_count < 2) return InvalidArgumentError("buffer count must be at least 2");
  if (in.grad_buckets < 2) return InvalidArgumentError("gradient buckets must be at least 2");
  if (in.grad_bucket_params.has_value()) {
    const int64_t least = GradBucketSizesOf(in.model).tensors;
    if (*in.grad_bucket_params < least) {
      return InvalidArgumentError(
          "a gradient bucket of " + std::to_string(*in.grad_bucket_params) +
          " parameters is smaller than the largest gradient one kernel of '" + in.model.name +
          "' writes (" + std::to_string(least) + "): use at least that");
    }
  }
  if (in.speculation_params.value_or(0) < 0) {
    return InvalidArgumentError("speculation size must be >= 0");
  }
  if (in.speculation_params.has_value() && in.pipeline == PipelineKind::kSynchronous) {
    return InvalidArgumentError(
        "a speculation size applies to the overlapped pipeline only; the synchronous pipeline "
        "does not speculate: drop it or use the overlapped pipeline");
  }
  TF_RETURN_IF_ERROR(ValidateGradTransferDType(
      "gradient transfer dtype", in.dtype, GradTransferDType(in.dtype, in.grad_transfer_dtype)));
  if (in.param_slots.has_value() && *in.param_slots < 2) {
    return InvalidArgumentError(
        "--param-slots is " + std::to_string(*in.param_slots) +
        ": the streamed weights' ring needs at least 2 device slots (one unit in use while the "
        "next uploads): use 2 or more, or leave it out (the planner takes " +
        std::to_string(kDefaultParamSlots) + ")");
  }
  if (in.param_slots.has_value() && in.param_offload == ParamOffload::kNone) {
    return InvalidArgumentError(
        "--param-slots sizes the ring of streamed weights, but --offload-param none streams "
        "nothing: drop --param-slots, or use --offload-param auto, host or nvme");
  }
  if (in.nvme_directories < 1) return InvalidArgumentError("need at least one NVMe directory");
  if (in.nvme_block_bytes < 4096 || in.nvme_block_bytes % 4096 != 0 ||
      in.nvme_block_bytes > (256u << 20)) {
    return InvalidArgumentError("NVMe block size " + std::to_string(in.nvme_block_bytes) +
                                " bytes is not a multiple of 4096 from 4 KiB to 256 MiB");
  }
  if (hw.cores < 1) return InvalidArgumentError("the hardware must have at least one core");
  if (in.gpus_per_node < 1 || in.gpus_per_node > kMaxPlanGpusPerNode) {
    return InvalidArgumentError("--gpus-per-node is " + std::to_string(in.gpus_per_node) +
                                ": give 1 to " + std::to_string(kMaxPlanGpusPerNode));
  }
  if (in.nodes < 1 || in.nodes > kMaxPlanNodes) {
    return InvalidArgumentError("--nodes is " + std::to_string(in.nodes) + ": give 1 to " +
                                std::to_string(kMaxPlanNodes));
  }
  if (in.gpus_per_pcie_link < 1 || in.gpus_per_pcie_link > in.gpus_per_node) {
    return InvalidArgumentError("--gpus-per-pcie-link is " + std::to_string(in.gpus_per_pcie_link) +
                                ": give 1 (each GPU on a "
                                "link of its own) to --gpus-per-node (" +
                                std::to_string(in.gpus_per_node) + ", all behind one switch)");
  }
  return Status::Ok();
}

// What a checkpoint, the final save or a resume holds on the host (all
// stream the state sub-group by sub-group; train/checkpoint.cc): one
// sub-group's three fp32 arrays (StateRangeReader), and then either the
// safetensors writer's buffer (a chunk, at most the largest tensor it
// streams: a unit's fp32 master array) with the fp32 scratch converting
// master weights to the model file's dtype, or the buffer that checksums
// each file once written (at most the largest file: the model's).
// The pinned host store of the activation checkpoints (0 unless offloaded).
uint64_t ActivationHostBytes(const PlanInput& in) {
  if (in.offload_activations != ActivationOffload::kHost) return 0;
  return ComputeActivationBytes(in.model, ActivationOptionsOf(in)).host_checkpoints;
}

uint64_t CheckpointBufferBytes(const SubGroupSummary& sg, uint64_t params, uint64_t weight_bytes) {
  const uint64_t reader = Mul(3 * kMasterBytesPerParam, U(sg.max_group_params));
  const uint64_t writer = std::min<uint64_t>(kSafetensorsFillChunkBytes,
                                             Mul(kMasterBytesPerParam, U(sg.max_unit_params)));
  const uint64_t convert = Mul(
      kMasterBytesPerParam, std::min<uint64_t>(kSafetensorsConvertElements, U(sg.max_unit_params)));
  const uint64_t largest_file =
      std::max(Mul(params, weight_bytes), Mul(3 * kMasterBytesPerParam, U(sg.max_unit_params)));
  const uint64_t checksum = std::min<uint64_t>(kFileChecksumBufferBytes, largest_file);
  return Sum(reader, std::max(Sum(writer, convert), checksum));
}

// Host and NVMe tiers for one NVMe ratio (the device tier does not depend on it).
struct StateTiers {
  TierPlan host, nvme;
  uint64_t pinned_bytes = 0;
  SubGroupSummary sub_groups;
};

SubGroupRule SubGroupRuleOf(const PlanInput& in) {
  return SubGroupRule{in.sub_group_cut, static_cast<uint64_t>(in.sub_group_params)};
}

// The streamed weights' copy: pinned on the host (kHost), or on NVMe behind
// pinned staging buffers of one slot each (kNvme).
struct StreamedCopy {
  uint64_t host_pinned = 0;  // kHost: the streamed units' weights
  uint64_t staging = 0;      // kNvme: nvme_staging x one slot
  uint64_t write_back = 0;   // kNvme: kStreamedWriteBackBuffers x one slot
  uint64_t nvme = 0;         // kNvme: each unit rounded up to the NVMe block
  uint64_t nvme_spare = 0;   // kNvme: per directory, spare blocks for rewrites
};

StreamedCopy StreamedCopyOf(const PlanInput& in, const ParamPlacement& pp,
                            const ModelUnits& units) {
  StreamedCopy c;
  const uint64_t a = DTypeSize(in.dtype);
  if (pp.where == ParamOffload::kHost) c.host_pinned = Mul(U(pp.streamed_params), a);
  if (pp.where == ParamOffload::kNvme) {
    c.staging = Mul(U(pp.nvme_staging), U(pp.slot_params), a);
    c.write_back = Mul(U(kStreamedWriteBackBuffers), U(pp.slot_params), a);
    c.nvme = StreamedNvmeBytes(units, pp, a, in.nvme_block_bytes);
    c.nvme_spare = Mul(U(in.nvme_directories),
                       RoundUp(Mul(U(kStreamedSpareSlotsPerDirectory), U(pp.slot_params), a),
                               in.nvme_block_bytes));
  }
  return c;
}

// One rank's layout of the state, which the host and NVMe tiers are sized
// from. With several ranks, the largest part's.
struct RankLayout {
  const PlanInput& in;
  const SubGroupSummary& sg;
  uint64_t P = 0;            // the whole model: its gradient, its weights
  uint64_t R = 0;            // the parameters whose state this rank owns
  uint64_t a = 0;            // bytes of a weight
  uint64_t state_bytes = 0;  // state bytes per parameter
  uint64_t host_params = 0;
  uint64_t wire = 0;  // bytes of a gradient crossing PCIe
  uint64_t buffers = 0;
  int moments = 0;
  bool overlapped = false;
  int64_t spec_params = 0;
  // The engine's data-parallel path: several ranks, or one with device
  // collectives (how one GPU checks them).
  bool dp = false;
  bool on_device = false;  // device collectives
  bool landed = false;     // one micro-batch lands as it is
  // The gradients wait on NVMe (GradOffload::kNvme): bytes of a parameter's
  // spilled gradient (fp32 when accumulating, else the transfer dtype), the
  // sub-groups' gradient tensors in whole blocks, and the largest one.
  bool spill = false;
  uint64_t spill_bytes = 0;
  uint64_t grad_files = 0;
  uint64_t grad_tensor = 0;
  uint64_t largest_unit = 0;  // whole, as data parallelism gathers it for the ranks' sum
  std::string bc{};           // the buffer count, for the notes
  StreamedCopy copy{};
  std::string streamed_units{};  // the streamed copy, for the notes
};

RankLayout RankLayoutOf(const PlanInput& in, const SubGroupSummary& sg, int64_t params,
                        uint64_t state_bytes, int64_t speculation_params, const ParamPlacement& pp,
                        const ModelUnits& units) {
  RankLayout r{in, sg};
  r.P = U(params);
  r.R = U(sg.params);
  r.a = DTypeSize(in.dtype);
  r.state_bytes = state_bytes;
  r.host_params = r.R - U(sg.nvme_params);
  r.moments = OptimizerMomentCount(in.optimizer);
  r.overlapped = in.pipeline == PipelineKind::kOverlapped;
  r.spec_params = r.overlapped ? std::min<int64_t>(speculation_params, sg.params) : 0;
  r.wire = DTypeSize(GradTransferDType(in.dtype, in.grad_transfer_dtype));
  r.buffers = U(in.buffer_count);
  r.bc = std::to_string(in.buffer_count);
  r.dp = in.ranks() > 1 || in.device_collectives;
  r.on_device = in.device_collectives;
  r.spill = in.offload_gradients == GradOffload::kNvme;
  r.landed = in.grad_accum == 1 && !r.on_device && !r.spill;
  r.largest_unit = U(std::max({units.embeddings, units.block, units.head}));
  if (r.spill) {
    // fp32 when accumulating, and with data parallelism (the ranks' running
    // sum is fp32 from the first micro-batch).
    r.spill_bytes = in.grad_accum > 1 || r.dp ? kGradAccumulatorBytesPerParam : r.wire;
    // One tensor "<sub-group>/grad" per sub-group (the state is wholly on
    // NVMe: every sub-group of the rank's parts), each rounded up to whole
    // blocks like the state's.
    r.grad_files = SummarizeSubGroups(in.model, SubGroupRuleOf(in), 1.0, r.spill_bytes,
                                      in.nvme_block_bytes, in.ranks())
                       .nvme_block_bytes;
    r.grad_tensor = Mul(U(sg.max_group_params), r.spill_bytes);
  }
  r.copy = StreamedCopyOf(in, pp, units);
  r.streamed_units = std::to_string(pp.streamed_units.size()) + " streamed units' weights, " +
                     std::to_string(r.a) + " B/param";
  return r;
}

// The host's buffers besides the state.
struct HostBuffers {
  uint64_t accumulator = 0, grad_staging = 0;     // the gradient's landing
  uint64_t grad_spill = 0;                        // its pinned slots on the way to NVMe
  uint64_t unit_gathers = 0;                      // data parallelism on NVMe: units for the sum
  uint64_t weight_staging = 0, spec_weights = 0;  // the new weights' way out
  uint64_t nvme_slots = 0;                        // the state's NVMe I/O
  uint64_t checkpoint = 0, load = 0;              // saving and loading
};

HostBuffers HostBuffersOf(const RankLayout& r, int64_t bucket_params) {
  const PlanInput& in = r.in;
  const SubGroupSummary& sg = r.sg;
  HostBuffers b;
  // One micro-batch: the gradients land from the device in one pinned buffer
  // of the transfer dtype, and nothing else is needed. Several: each bucket
  // lands in pinned staging and is added into a pageable fp32 accumulator
  // (data parallelism: gathered whole in the transfer dtype for the ranks'
  // sum, which adds into this rank's fp32 part instead).
  // Device collectives: nothing lands whole; this rank's part of the sum
  // crosses into a pinned buffer of its own.
  // On NVMe: nothing whole; each bucket lands in pinned staging and is
  // copied (or added, in fp32) into grad_spill_slots pinned sub-group slots,
  // each written to the drives once complete.
  b.accumulator = r.on_device || r.spill ? 0
                  : r.landed             ? Mul(r.P, r.wire)
                                         : Mul(r.P, r.dp ? r.wire : kGradAccumulatorBytesPerParam);
  b.grad_staging = r.landed || r.on_device ? 0 : Mul(U(in.grad_buckets), U(bucket_params), r.wire);
  b.grad_spill =
      r.spill ? Mul(U(in.grad_spill_slots), RoundUp(r.grad_tensor, kDirectIoAlignmentBytes)) : 0;
  // Data parallelism with the gradients on NVMe: three whole units gathered
  // for their reduce-scatter (OffloadEngine's unit_gathers), in place of the
  // whole model's.
  b.unit_gathers = r.spill && r.dp ? Mul(3, r.largest_unit, r.wire) : 0;
  // Data parallelism: two whole units' weights for the all-gathers (in
  // place of the per-sub-group staging).
  b.weight_staging =
      r.dp ? Mul(2, U(sg.max_unit_params), r.a) : Mul(r.buffers, U(sg.max_group_params), r.a);
  b.spec_weights = SpeculationPinnedBytes(r.spec_params, r.a);
  b.nvme_slots = sg.nvme_sub_groups > 0
                     ? Mul(r.buffers, RoundUp(Mul(U(sg.max_nvme_group_params), r.state_bytes),
                                              kDirectIoAlignmentBytes))
                     : 0;
  // Start-up reads each unit whole as fp32 before the first step; it never
  // coexists with a checkpoint's buffers, so the peak counts the larger.
  b.checkpoint = CheckpointBufferBytes(sg, r.P, r.a);
  b.load = Mul(kMasterBytesPerParam, U(sg.max_unit_params));
  return b;
}

// The gradient's components on the host, each with its note.
std::vector<PlanComponent> HostGradientComponents(const RankLayout& r, const HostBuffers& b) {
  const PlanInput& in = r.in;
  const bool dp = r.dp;
  const bool on_device = r.on_device;
  const bool landed = r.landed;
  return {
      {"gradient_accumulator", b.accumulator,
       r.spill     ? "none: the gradients wait on NVMe (--offload-gradients nvme)"
       : on_device ? "none: the ranks sum the gradient on their devices"
       : landed    ? "one micro-batch: the D2H landing, " + std::to_string(r.wire) +
                      " B/param in the transfer dtype, pinned"
       : dp ? "each micro-batch's whole gradient for the ranks' sum, " + std::to_string(r.wire) +
                  " B/param, pageable"
            : "fp32, 4 B/param, pageable (no DMA touches it)"},
      {"summed_gradient_part",
       !dp       ? 0
       : r.spill ? Mul(U(r.sg.max_unit_params), 4)
                 : Mul(r.R, 4),
       on_device ? "fp32, pinned: this rank's part of the gradient summed on the devices, "
                   "landed once a step"
       : r.spill ? "fp32: one unit's part of the running sum over the ranks (the rest on NVMe)"
                 : "fp32: this rank's part of the gradient summed over the ranks"},
      {"unit_gradient_gathers", b.unit_gathers,
       "3 whole units' gradients (the largest unit, " + std::to_string(r.wire) +
           " B/param) gathered for their reduce-scatter"},
      {"pinned_gradient_staging", b.grad_staging,
       on_device ? "none: only the summed part crosses"
       : landed  ? "none: one micro-batch's gradients land in the accumulator"
                 : "D2H landing, " + std::to_string(r.wire) + " B/param: bucket size x " +
                      std::to_string(in.grad_buckets) + " buckets"},
      {"gradient_spill_slots", b.grad_spill,
       "pinned: " + std::to_string(in.grad_spill_slots) +
           " sub-group slots of the largest sub-group's gradient (" +
           std::to_string(r.spill_bytes) + " B/param, " +
           (in.grad_accum > 1 || r.dp ? "fp32, the running sum" : "the transfer dtype") +
           ", whole 4 KiB pages), each written to NVMe once complete"},
  };
}

TierPlan HostTier(const RankLayout& r, const HostBuffers& b, const Hardware& hw,
                  uint64_t device_tensor_bytes, const ParamPlacement& pp) {
  const PlanInput& in = r.in;
  TierPlan host;
  host.name = "host";
  host.capacity_bytes = hw.host_memory_bytes;
  host.components = {
      {"master_weights", Mul(r.host_params, kMasterBytesPerParam), "fp32, 4 B/param on host"},
      {"optimizer_moments", Mul(r.host_params, kMomentBytesPerParam, U(r.moments)),
       std::to_string(r.moments) + " fp32 moment(s), " + std::to_string(4 * r.moments) +
           " B/param on host"},
      {"speculation_backup",
       SpeculationBackupBytes(r.spec_params, static_cast<int64_t>(r.host_params), r.state_bytes),
       "overlapped pipeline: state backup of the speculated host-tier sub-groups (" +
           std::to_string(r.spec_params) + " speculated params)"},
  };
  for (PlanComponent& c : HostGradientComponents(r, b)) host.components.push_back(std::move(c));
  std::vector<PlanComponent> rest = {
      {"pinned_weight_staging", b.weight_staging,
       r.dp ? "H2D source: two whole units' weights (the largest unit) for the all-gathers"
            : "H2D source: largest sub-group x " + std::to_string(r.a) + " B x " + r.bc + " slots"},
      {"streamed_weights", r.copy.host_pinned,
       "pinned: the " + r.streamed_units +
           "; each fetch uploads from here, the update writes here"},
      {"weight_staging", r.copy.staging,
       "pinned: " + std::to_string(pp.nvme_staging) +
           " NVMe staging buffers of one slot each (the largest streamed unit, " +
           std::to_string(pp.slot_params) + " params)"},
      {"weight_write_back", r.copy.write_back,
       std::to_string(kStreamedWriteBackBuffers) +
           " write-back buffers of one slot each (registered for the NVMe ring): a streamed "
           "unit's new weights on their way to the drive"},
      {"pinned_speculative_weights", b.spec_weights,
       "overlapped pipeline: new weights of the speculated sub-groups"},
      {"nvme_io_buffers", b.nvme_slots,
       "pinned: largest NVMe sub-group x " + std::to_string(r.state_bytes) + " B x " + r.bc +
           " slots"},
      {"checkpoint_buffers", b.checkpoint,
       "checkpoints and the final save stream the state: one sub-group's master + moments "
       "(fp32) and the file writer's buffer"},
      {"model_load", b.load > b.checkpoint ? b.load - b.checkpoint : 0,
       "start-up reads each unit whole as fp32 (" + FormatBytes(b.load) +
           ", the largest unit): what it needs beyond the checkpoint buffers, which it never "
           "coexists with"},
      {"activation_checkpoints", ActivationHostBytes(in),
       in.offload_activations == ActivationOffload::kHost
           ? "pinned: each block's input (the residual stream) but the last " +
                 std::to_string(kCheckpointDeviceSlots) + ", per micro-batch's rows"
           : "none: the checkpoints stay on the device"},
      {"dataset", in.dataset_bytes,
       in.dataset_bytes > 0 ? "the tokenized dataset and its shuffled order"
                            : "not known here (tierflow train counts the dataset it loads)"},
      {"process_overhead", kHostProcessOverheadBytes, "code, threads, allocator slack"},
  };
  for (PlanComponent& c : rest) host.components.push_back(std::move(c));
  if (hw.device_memory_is_host_memory) {
    host.components.push_back(
        {"emulated_device_memory", device_tensor_bytes, "the CPU device's memory is host RAM"});
  }
  return host;
}

uint64_t PinnedBytes(const RankLayout& r, const HostBuffers& b, const TierPlan& host) {
  uint64_t pinned =
      Sum(r.landed ? b.accumulator : 0, r.on_device ? Mul(r.R, 4) : 0, b.grad_staging, b.grad_spill,
          b.weight_staging, b.spec_weights, b.nvme_slots, r.copy.host_pinned, r.copy.staging,
          r.copy.write_back, ActivationHostBytes(r.in));
  if (r.in.lock_host_state) {
    // pin_memory: the host share of the state is page-locked too.
    pinned = Sum(pinned, host.bytes_of("master_weights"), host.bytes_of("optimizer_moments"));
  }
  return pinned;
}

// The state's files on NVMe: the blocks, the spare ones, and per directory
// the header (tensor table) and two block-table copies (8 bytes per logical
// block), together padded to where data starts.
std::vector<PlanComponent> NvmeStateComponents(const RankLayout& r) {
  const PlanInput& in = r.in;
  const SubGroupSummary& sg = r.sg;
  if (sg.nvme_sub_groups <= 0) return {{"state_files", 0, "no optimizer state on NVMe"}};
  const uint64_t copies = r.overlapped ? 2 : 1;
  const uint64_t dirs = U(in.nvme_directories);
  const uint64_t state_files = Mul(copies, sg.nvme_block_bytes);
  const uint64_t block = in.nvme_block_bytes;
  // Each directory's spare blocks: (slots + 1) state tensors, and with the
  // gradients on NVMe grad_spill_slots of the largest gradient tensor more,
  // rounded up to a block together (the engine's spare_bytes_per_directory).
  const uint64_t state_spare = Mul(r.buffers + 1, U(sg.max_nvme_group_params), r.state_bytes);
  const uint64_t grad_spare = r.spill ? Mul(U(in.grad_spill_slots), r.grad_tensor) : 0;
  const uint64_t spare = Mul(dirs, RoundUp(state_spare, block));
  const uint64_t spare_with_grads = Mul(dirs, RoundUp(Sum(state_spare, grad_spare), block));
  // One "<sub-group>/grad" tensor per sub-group beside the state's.
  const uint64_t tensors =
      Sum(Mul(copies, U(sg.nvme_sub_groups)), r.spill ? U(sg.nvme_sub_groups) : 0);
  const uint64_t logical_blocks_per_dir = Sum(state_files, r.grad_files) / dirs / block + 1;
  const uint64_t metadata = Mul(
      dirs,
      RoundUp(Sum(RoundUp(Sum(kNvmeHeaderFixedBytes, Mul(kNvmeHeaderBytesPerTensor, tensors)),
                          kDirectIoAlignmentBytes),
                  Mul(2, RoundUp(Sum(32, Mul(kNvmeBlockTableBytesPerBlock, logical_blocks_per_dir)),
                                 kDirectIoAlignmentBytes))),
              std::min(block, kNvmeBlockBytes)));
  return {
      {"state_files", state_files,
       std::to_string(r.state_bytes) + " B/param (master + moments) x " + std::to_string(copies) +
           (copies == 2 ? " copies (overlapped pipeline)" : " copy") + ", whole " +
           FormatBytes(block) + " blocks"},
      {"spare_blocks", spare,
       "per directory: (" + r.bc + " slots + 1) x the largest sub-group's state"},
      {"headers_and_block_tables", metadata,
       "tensor table and two block tables per file, padded to the first data block"},
      {"gradient_files", r.grad_files,
       r.spill ? "the step's gradient, one tensor per sub-group, " + std::to_string(r.spill_bytes) +
                     " B/param (" +
                     (in.grad_accum > 1 || r.dp ? "fp32, the running sum" : "the transfer dtype") +
                     "), whole " + FormatBytes(block) + " blocks"
               : "none: the gradients wait in host memory"},
      {"gradient_spare_blocks", spare_with_grads - spare,
       "per directory: " + std::to_string(in.grad_spill_slots) +
           " x the largest sub-group's gradient more spare blocks"},
  };
}

TierPlan NvmeTier(const RankLayout& r, const Hardware& hw) {
  TierPlan nvme;
  nvme.name = "nvme";
  nvme.capacity_bytes = hw.nvme_capacity_bytes;
  nvme.components = NvmeStateComponents(r);
  if (r.copy.nvme > 0) {
    nvme.components.push_back({"streamed_weights", r.copy.nvme,
                               "the " + r.streamed_units + ", each unit in whole " +
                                   FormatBytes(r.in.nvme_block_bytes) +
                                   " blocks; read every fetch, written every step"});
    nvme.components.push_back({"streamed_weights_spare", r.copy.nvme_spare,
                               "per directory: " + std::to_string(kStreamedSpareSlotsPerDirectory) +
                                   " slots of spare blocks, so a unit is rewritten while its "
                                   "old copy stays readable"});
  }
  return nvme;
}

// The node's ranks each hold all of one rank's tiers (the ranks of a node
// are sized by the largest part): host RAM and NVMe are shared.
void ScaleToNode(const PlanInput& in, StateTiers& t) {
  const auto n = U(in.gpus_per_node);
  const std::string each = " (each of the node's " + std::to_string(n) + " ranks)";
  for (TierPlan* tier : {&t.host, &t.nvme}) {
    for (PlanComponent& c : tier->components) {
      c.bytes = Mul(c.bytes, n);
      c.note += each;
    }
  }
  t.pinned_bytes = Mul(t.pinned_bytes, n);
}

StateTiers BuildStateTiers(const PlanInput& in, const Hardware& hw, int64_t params,
                           uint64_t state_bytes, uint64_t device_tensor_bytes, double ratio,
                           int64_t speculation_params, int64_t bucket_params,
                           const ParamPlacement& pp, const ModelUnits& units) {
  StateTiers t;
  // With several ranks, one rank's layout (the largest parts); the tiers
  // are the node's: every component times its ranks.
  t.sub_groups = SummarizeSubGroups(in.model, SubGroupRuleOf(in), ratio, state_bytes,
                                    in.nvme_block_bytes, in.ranks());
  const RankLayout r =
      RankLayoutOf(in, t.sub_groups, params, state_bytes, speculation_params, pp, units);
  const HostBuffers buffers = HostBuffersOf(r, bucket_params);
  t.host = HostTier(r, buffers, hw, device_tensor_bytes, pp);
  t.pinned_bytes = PinnedBytes(r, buffers, t.host);
  t.nvme = NvmeTier(r, hw);
  if (r.dp && in.gpus_per_node > 1) ScaleToNode(in, t);
  return t;
}

// The placement: the user's ratio, or (kAuto) the smallest ratio, in steps of
// 1%, that lets the host hold the rest within kHostAutoPlacementFraction of
// its capacity (1 when none does).
StatusOr<double> ChooseRatio(const PlanInput& in, const Hardware& hw, int64_t params,
                             uint64_t state_bytes, uint64_t device_tensor_bytes,
                             int64_t bucket_params, const ParamPlacement& pp,
                             const ModelUnits& units, bool* chosen_by_planner) {
  *chosen_by_planner = false;
  if (in.nvme_ratio >= 0) return in.nvme_ratio;
  // The gradients on NVMe wait beside the state, all of it there.
  if (in.offload_gradients == GradOffload::kNvme) {
    *chosen_by_planner = in.offload == OffloadPlacement::kAuto;
    return 1.0;
  }
  if (in.offload == OffloadPlacement::kHost) return 0;
  if (in.offload == OffloadPlacement::kNvme) return 1;
  *chosen_by_planner = true;
  const double target = static_cast<double>(hw.host_memory_bytes) * kHostAutoPlacementFraction;
  for (int percent = 0; percent <= 100; ++percent) {
    TF_RETURN_IF_ERROR(CheckCancel("planning the optimizer state placement"));
    const double ratio = percent / 100.0;
    // A speculation budget left to the planner comes out of what the state
    // leaves free, so it is 0 here.
    StateTiers t = BuildStateTiers(in, hw, params, state_bytes, device_tensor_bytes, ratio,
                                   in.speculation_params.value_or(0), bucket_params, pp, units);
    if (static_cast<double>(t.host.total_bytes()) <= target) return ratio;
  }
  return 1.0;
}

// The optimizer state's placement for one placement of the weights: the
// NVMe ratio, the speculation budget and the host and NVMe tiers.
struct StatePlacement {
  double ratio = 0;
  bool chosen = false;
  int64_t speculation = 0;
  std::string speculation_from = "none: synchronous pipeline";
  StateTiers tiers;
};

StatusOr<StatePlacement> PlaceState(const PlanInput& in, const Hardware& hw, int64_t params,
                                    uint64_t s, uint64_t device_tensors, int64_t bucket,
                                    const ParamPlacement& pp, const ModelUnits& units) {
  StatePlacement out;
  TF_ASSIGN_OR_RETURN(
      out.ratio, ChooseRatio(in, hw, params, s, device_tensors, bucket, pp, units, &out.chosen));
  // The speculation budget: given, or what host memory has left (up to the
  // fraction auto placement fills) once everything else is counted.
  if (in.pipeline == PipelineKind::kOverlapped) {
    if (in.speculation_params.has_value()) {
      out.speculation = std::min(*in.speculation_params, params);
      out.speculation_from = "input";
    } else {
      const StateTiers without = BuildStateTiers(in, hw, params, s, device_tensors, out.ratio,
                                                 /*speculation_params=*/0, bucket, pp, units);
      const uint64_t usable = static_cast<uint64_t>(static_cast<double>(hw.host_memory_bytes) *
                                                    kHostAutoPlacementFraction);
      const uint64_t used = without.host.total_bytes();
      // Per rank: the node's ranks share what is free.
      SpeculationBudgetInput b;
      b.free_host_bytes = (usable > used ? usable - used : 0) / U(in.gpus_per_node);
      b.params = without.sub_groups.params;
      b.host_state_params = without.sub_groups.params - without.sub_groups.nvme_params;
      b.state_bytes_per_param = s;
      b.weight_bytes_per_param = DTypeSize(in.dtype);
      out.speculation = SpeculationBudget(b);
      out.speculation_from = "free host memory";
    }
  }
  out.tiers = BuildStateTiers(in, hw, params, s, device_tensors, out.ratio, out.speculation, bucket,
                              pp, units);
  return out;
}

// The device does not fit although weights stream: the ring, the buckets
// and the activations are what is left to shrink.
std::string StreamingDeviceAdvice(const PlanInput& in, const Plan& plan) {
  const ParamPlacement& pp = plan.placement.params;
  const uint64_t slot_bytes = Mul(U(pp.slot_params), DTypeSize(in.dtype));
  std::string s = "with " + std::to_string(pp.streamed_units.size()) + " of " +
                  std::to_string(in.model.n_layers + 2) + " units' weights streamed (" +
                  FormatBytes(plan.device.bytes_of("weights")) + " still resident), the " +
                  std::to_string(pp.device_slots) + " weight slots take " +
                  FormatBytes(plan.device.bytes_of("weight_slots")) + " (each " +
                  FormatBytes(slot_bytes) + ", the largest streamed unit), the gradient buckets " +
                  FormatBytes(plan.device.bytes_of("gradient_buckets")) + " and the activations " +
                  FormatBytes(plan.device.bytes_of("activations")) + ": ";
  std::string sep;
  if (pp.device_slots > 2) {
    s += "lower --param-slots (now " + std::to_string(pp.device_slots) + "; 2 is the least)";
    sep = ", ";
  }
  if (!in.checkpointing) {
    s += sep + "turn activation checkpointing on (--checkpointing on)";
    sep = ", ";
  }
  if (in.micro_batch > 1) {
    s += sep + "lower --micro-batch (now " + std::to_string(in.micro_batch) + ")";
    sep = ", ";
  }
  return s + sep + "shorten --seq-len (now " + std::to_string(in.seq_len) +
         "), or use a device with at least " + FormatBytes(plan.device.total_bytes());
}

std::string DeviceAdvice(const PlanInput& in, const Plan& plan) {
  if (plan.placement.params.where != ParamOffload::kNone) return StreamingDeviceAdvice(in, plan);
  const uint64_t cap = plan.device.capacity_bytes;
  const uint64_t weights = plan.device.bytes_of("weights");
  const uint64_t resident =
      weights + plan.device.bytes_of("cuda_context") + plan.device.bytes_of("workspace");
  const uint64_t buckets = plan.device.bytes_of("gradient_buckets");
  if (resident > cap) {
    return "the " + std::string(DTypeName(in.dtype)) + " working weights alone are " +
           FormatBytes(weights) + " and " +
           (in.param_offload == ParamOffload::kNone ? "--offload-param none keeps"
                                                    : "the planner keeps") +
           " them all on the device: use a device with at least " +
           FormatBytes(plan.device.total_bytes()) + ", or a smaller model";
  }
  if (resident + buckets > cap) {
    // Even the smallest buckets (the largest tensor's gradient) overflow.
    return "the " + std::to_string(in.grad_buckets) + " gradient buckets (" + FormatBytes(buckets) +
           ", each " + std::to_string(plan.placement.grad_bucket_params) +
           " params of fp32 gradient" +
           (plan.grad_transfer_dtype != DType::kF32 ? " and its 16-bit cast" : "") +
           ") do not fit beside the " + FormatBytes(weights) + " of working weights" +
           (in.grad_buckets > 2 ? ": lower --grad-buckets (2 is the least)" : "") +
           "; use a device with at least " + FormatBytes(plan.device.total_bytes()) +
           ", or a smaller model";
  }
  std::string s =
      "activations take " + FormatBytes(plan.device.bytes_of("activations")) + " of it: ";
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

// The streamed weights' copy on the host, when it is there.
std::string StreamedCopyAdvice(const PlanInput& in, const Plan& plan) {
  const uint64_t copy = plan.host.bytes_of("streamed_weights");
  if (copy == 0) return "";
  return "; the streamed weights' pinned copy takes " + FormatBytes(copy) +
         (in.param_offload == ParamOffload::kHost ? " (--offload-param nvme moves it to NVMe)"
                                                  : "");
}

// The checkpoints in host memory, when they are there: their share, and how
// to do without.
std::string CheckpointAdvice(const PlanInput& in, const Plan& plan) {
  const uint64_t bytes = plan.host.bytes_of("activation_checkpoints");
  if (bytes == 0) return "";
  return "; the activation checkpoints in host memory take " + FormatBytes(bytes) +
         " of it (shorten --seq-len or --micro-batch, now " + std::to_string(in.seq_len) + " x " +
         std::to_string(in.micro_batch) +
         ", or keep them on the device with "
         "--offload-activations none where it has room)";
}

// The gradients in host memory, when they are there and large: their
// share, and how to do without (on the drives, where the engine can).
std::string GradientAdvice(const PlanInput& in, const Hardware& hw, const Plan& plan) {
  const Placement& p = plan.placement;
  if (p.gradients != GradOffload::kHost || plan.gradients.host_bytes == 0) return "";
  std::string s = "; the gradient waiting for the step's decision takes " +
                  FormatBytes(plan.gradients.host_bytes) + " of it (" +
                  (in.grad_accum > 1 ? "the fp32 accumulator" : "the whole model's D2H landing") +
                  " and its staging)";
  const std::string blocker = GradSpillBlocker(in, hw);
  if (!blocker.empty()) {
    return s + "; it could wait on the drives (--offload-gradients nvme) but " + blocker;
  }
  return s + ": --offload-gradients nvme keeps it on the drives instead (" +
         (in.offload_gradients == GradOffload::kHost ? "--offload-gradients host holds it here; "
                                                     : "") +
         "the optimizer state goes wholly to NVMe beside it), or use a host with at least " +
         FormatBytes(plan.host.total_bytes());
}

std::string HostAdvice(const PlanInput& in, const Hardware& hw, const Plan& plan) {
  const Placement& p = plan.placement;
  std::string ranks = GradientAdvice(in, hw, plan) + CheckpointAdvice(in, plan);
  if (in.gpus_per_node > 1 && in.device_collectives) {
    ranks += "; the node's " + std::to_string(in.gpus_per_node) +
             " ranks each hold their part of the state and its buffers: more nodes need less of "
             "it";
  } else if (in.gpus_per_node > 1) {
    // Every rank lands the whole gradient and holds its buffers: the
    // node's host memory grows with its GPUs, not only with the model.
    ranks += "; the node's " + std::to_string(in.gpus_per_node) +
             " ranks each land the whole gradient (" +
             FormatBytes(plan.host.bytes_of("gradient_accumulator") / U(in.gpus_per_node)) +
             " per rank): fewer GPUs per node (--gpus-per-node) or more nodes need less of it, "
             "and so does summing it on the devices (--collectives device)";
  }
  if (p.nvme_state_params < plan.sub_groups.params) {
    std::string how = in.offload == OffloadPlacement::kHost
                          ? "move optimizer state to NVMe (--offload-optimizer nvme, or auto "
                            "to let the planner split it)"
                          : "put more of the optimizer state on NVMe (raise --ratio toward 1)";
    return how + "; the optimizer state on host is " +
           FormatBytes(plan.host.bytes_of("master_weights") +
                       plan.host.bytes_of("optimizer_moments")) +
           StreamedCopyAdvice(in, plan) + ranks;
  }
  std::string s =
      p.gradients == GradOffload::kNvme
          ? "even with all optimizer state and the gradients on NVMe the host needs the "
            "gradients' pinned staging (" +
                FormatBytes(plan.gradients.host_bytes) +
                "), the weights' staging and the I/O buffers"
      : in.device_collectives
          ? "even with all optimizer state on NVMe the host needs the ranks' parts of the summed "
            "gradient (" +
                FormatBytes(plan.host.bytes_of("summed_gradient_part")) +
                ", fp32), pinned staging and I/O buffers"
          : "even with all optimizer state on NVMe the host needs the gradient accumulator (" +
                FormatBytes(plan.host.bytes_of("gradient_accumulator")) +
                (in.grad_accum == 1 ? ", the gradients as they land" : ", fp32") +
                "), pinned staging and I/O buffers";
  if (plan.host.bytes_of("emulated_device_memory") > 0) {
    s += " and the emulated device's memory (" +
         FormatBytes(plan.host.bytes_of("emulated_device_memory")) + ")";
  }
  return s + StreamedCopyAdvice(in, plan) + ": use a host with more RAM, or a smaller model" +
         ranks;
}

std::string NvmeAdvice(const PlanInput& in, const Plan& plan) {
  std::string s =
      plan.nvme.capacity_bytes == 0
          ? "no NVMe path has free space: give one with --nvme-path (or --nvme-capacity)"
          : "free space on the NVMe paths or add a larger one with --nvme-path";
  if (in.pipeline == PipelineKind::kOverlapped) {
    // The synchronous pipeline keeps one copy of the state instead of two.
    const uint64_t sync_bytes = plan.nvme.total_bytes() - plan.nvme.bytes_of("state_files") / 2;
    s += ", or use the synchronous pipeline (--pipeline sync keeps one copy of the state: " +
         FormatBytes(sync_bytes) + ")";
  }
  return s;
}

std::string TierName(const std::string& tier) {
  if (tier == "device") return "device memory";
  if (tier == "host") return "host memory";
  return "NVMe capacity";
}

void Explain(const PlanInput& in, const Hardware& hw, Plan& plan) {
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
      p.where() == "host" ? "optimizer state on host"
      : p.where() == "nvme"
          ? "optimizer state on NVMe"
          : "optimizer state split, " +
                std::to_string(static_cast<int>(std::lround(p.nvme_ratio * 100))) + "% on NVMe";
  if (p.activations == ActivationOffload::kHost) {
    state_where =
        "activation checkpoints in host memory" +
        (p.mlp_tile_rows > 0 ? " (the MLP in " + std::to_string(p.mlp_tile_rows) + "-row tiles)"
                             : std::string()) +
        ", " + state_where;
  } else if (p.mlp_tile_rows > 0) {
    state_where = "the MLP in " + std::to_string(p.mlp_tile_rows) + "-row tiles, " + state_where;
  }
  if (p.gradients == GradOffload::kNvme) state_where = "gradients on NVMe, " + state_where;
  const ParamPlacement& pp = p.params;
  if (pp.where != ParamOffload::kNone) {
    state_where = std::to_string(pp.streamed_units.size()) + " of " +
                  std::to_string(in.model.n_layers + 2) + " units' weights streamed from " +
                  (pp.where == ParamOffload::kHost ? "host" : "NVMe") + ", " + state_where;
  }
  if (plan.feasible) {
    plan.explanation = "fits: " + state_where + "; the tightest tier is " +
                       TierName(binding->name) + " (" + FormatBytes(binding->total_bytes()) +
                       " of " + FormatBytes(binding->capacity_bytes) + ", " +
                       Percent(binding->total_bytes(), binding->capacity_bytes) + ")";
    if (in.seq_len > in.model.max_seq_len) {
      plan.explanation += ". The sequence is longer than the model's " +
                          std::to_string(in.model.max_seq_len) +
                          " positions: training it needs a config.json that extends them "
                          "(max_position_embeddings, rope_scaling)";
    }
    return;
  }
  std::string advice = binding->name == "device" ? DeviceAdvice(in, plan)
                       : binding->name == "host" ? HostAdvice(in, hw, plan)
                                                 : NvmeAdvice(in, plan);
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

uint64_t TierPlan::total_bytes() const {
  uint64_t sum = 0;
  for (const PlanComponent& c : components) sum = SaturatingAdd(sum, c.bytes);
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

OffloadPlacement Placement::offload() const {
  return nvme_state_params > 0 ? OffloadPlacement::kNvme : OffloadPlacement::kHost;
}

namespace {

StatusOr<Plan> PlanOnce(const PlanInput& in, const Hardware& hw);

// Adding GPUs per node at the same global batch (a user keeps the batch
// the learning rate was tuned for): the input planned with 1, 2, 4, ... of
// them that divide its own count, each running the input's micro-batches
// of the ranks it stands for, and what binds where the step stops
// shrinking. (With the per-rank batch fixed instead, every GPU adds tokens
// to a step whose update costs the same, which always looks like it helps.)
Status PlanScaling(const PlanInput& in, const Hardware& hw, Plan& plan) {
  Plan::DataParallel& dp = plan.data_parallel;
  std::vector<int> counts;
  for (int n = 1; n < in.gpus_per_node; n *= 2) {
    if (in.gpus_per_node % n == 0) counts.push_back(n);
  }
  counts.push_back(in.gpus_per_node);
  for (int n : counts) {
    Plan::DataParallel::Point point;
    point.gpus_per_node = n;
    const Plan* at = &plan;
    Plan other;
    if (n != in.gpus_per_node) {
      PlanInput fewer = in;
      fewer.gpus_per_node = n;
      fewer.grad_accum = in.grad_accum * (in.gpus_per_node / n);
      // Past the planner's bound on accumulation there is no point to plan.
      if (fewer.grad_accum > kMaxPlanGradAccum) continue;
      fewer.gpus_per_pcie_link = std::min(in.gpus_per_pcie_link, n);
      TF_ASSIGN_OR_RETURN(other, PlanOnce(fewer, hw));
      at = &other;
    }
    point.feasible = at->feasible;
    point.tokens_per_second =
        at->predicted_step_seconds > 0
            ? static_cast<double>(at->tokens_per_step) / at->predicted_step_seconds
            : 0;
    point.step_seconds = at->predicted_step_seconds;
    point.slowest = SlowestStage(*at).name;
    point.slowest_seconds = SlowestStage(*at).seconds;
    point.binding = at->binding_constraint;
    dp.scaling.push_back(std::move(point));
  }
  dp.scaling_advice = ScalingAdvice(in, plan);
  return Status::Ok();
}

}  // namespace

namespace {

// The activation layouts auto may choose from, the least moved first:
// checkpoints on the device or in host memory, the MLP whole or in tiles.
std::vector<PlanInput> ActivationCandidates(const PlanInput& in) {
  std::vector<ActivationOffload> wheres = {in.offload_activations};
  if (in.offload_activations == ActivationOffload::kAuto) {
    wheres = {ActivationOffload::kNone};
    if (in.checkpointing) wheres.push_back(ActivationOffload::kHost);
  }
  std::vector<int64_t> tiles = {in.mlp_tile_rows.value_or(0)};
  const int64_t rows = in.micro_batch * in.seq_len;
  // Auto tiles only under checkpointing, where tiling adds no FLOPs.
  if (!in.mlp_tile_rows.has_value() && in.checkpointing && rows > kAutoMlpTileRows) {
    tiles.push_back(kAutoMlpTileRows);
  }
  std::vector<PlanInput> out;
  for (int64_t tile : tiles) {
    for (ActivationOffload where : wheres) {
      PlanInput c = in;
      c.offload_activations = where;
      c.mlp_tile_rows = tile;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace

StatusOr<Plan> ComputePlan(const PlanInput& in, const Hardware& hw) {
  const std::vector<PlanInput> candidates = ActivationCandidates(in);
  // Auto, even when only one layout was possible (checkpointing off).
  const bool chosen =
      in.offload_activations == ActivationOffload::kAuto || !in.mlp_tile_rows.has_value();
  // Each layout is planned without the GPUs-per-node table; the chosen one
  // gets it once.
  std::optional<Plan> best;
  size_t best_at = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    TF_ASSIGN_OR_RETURN(Plan plan, PlanOnce(candidates[i], hw));
    plan.placement.activations_chosen = chosen;
    const bool streams = plan.placement.params.where != ParamOffload::kNone;
    // The first that fits without streaming weights; else the fastest that
    // fits; neither fitting and the device binding, the one that moves the
    // most off it (the last), which says what is still missing.
    if (plan.feasible && !streams && !best.has_value()) {
      best = std::move(plan);
      break;
    }
    const bool better = !best.has_value() ||
                        (plan.feasible && (!best->feasible || plan.predicted_step_seconds <
                                                                  best->predicted_step_seconds)) ||
                        (!plan.feasible && !best->feasible && best->binding_constraint == "device");
    if (better) {
      best = std::move(plan);
      best_at = i;
    }
  }
  // The table compares GPUs per node: nothing to compare with one.
  if (in.gpus_per_node > 1) TF_RETURN_IF_ERROR(PlanScaling(candidates[best_at], hw, *best));
  return std::move(*best);
}

ActivationOptions ActivationOptionsOf(const PlanInput& in) {
  ActivationOptions act;
  act.micro_batch = in.micro_batch;
  act.seq_len = in.seq_len;
  act.dtype = in.dtype;
  act.checkpointing = in.checkpointing;
  act.offload_checkpoints = in.offload_activations == ActivationOffload::kHost;
  act.mlp_tile_rows = in.mlp_tile_rows.value_or(0);
  return act;
}

namespace {

// The plan's identity: the model, the step's tokens, the state's bytes.
Plan StartPlan(const PlanInput& in) {
  const ModelConfig& m = in.model;
  Plan plan;
  plan.model_name = m.name;
  plan.family = m.family;
  plan.params = ParameterCount(m);
  // Every rank runs grad_accum micro-batches of the step.
  plan.tokens_per_step = SaturatingMul(
      SaturatingMul(SaturatingMul(in.micro_batch, in.seq_len), in.grad_accum), in.ranks());
  plan.data_parallel.ranks = in.ranks();
  plan.data_parallel.gpus_per_node = in.gpus_per_node;
  plan.data_parallel.nodes = in.nodes;
  plan.state_bytes_per_param = OptimizerStateBytesPerParam(OptimizerMomentCount(in.optimizer));
  plan.grad_transfer_dtype = GradTransferDType(in.dtype, in.grad_transfer_dtype);
  return plan;
}

// The activations as run, and with checkpointing on and off (checkpoints
// on the device) for the notes.
void SizeActivations(const PlanInput& in, Plan& plan) {
  ActivationOptions act = ActivationOptionsOf(in);
  plan.activations = ComputeActivationBytes(in.model, act);
  act.offload_checkpoints = false;
  act.checkpointing = true;
  plan.activations_with_checkpointing_bytes = ComputeActivationBytes(in.model, act).total();
  act.checkpointing = false;
  plan.activations_without_checkpointing_bytes = ComputeActivationBytes(in.model, act).total();
}

// The gradient bucket sizes to try: the given one, or the largest unit, a
// block, the largest tensor, each at most the largest unit.
std::vector<int64_t> BucketCandidates(const PlanInput& in, const GradBucketSizes& sizes,
                                      int64_t max_unit_params) {
  std::vector<int64_t> buckets;
  if (in.grad_bucket_params.has_value()) {
    buckets = {std::min<int64_t>(*in.grad_bucket_params, max_unit_params)};
  } else {
    // A tiled MLP's weights are one piece: no bucket below them.
    const int64_t least = in.mlp_tile_rows.value_or(0) > 0 ? sizes.mlp : 0;
    for (int64_t candidate : {sizes.whole_units, sizes.blocks, sizes.tensors}) {
      buckets.push_back(std::min<int64_t>(std::max(candidate, least), max_unit_params));
    }
  }
  return buckets;
}

// --offload-param auto with units streaming: the copy goes to the host when
// the host holds it within its margin (before the optimizer state: it is
// read every micro-batch, the state once a step), else to NVMe, unless only
// the host copy fits at all. Moves `params` and `state` there.
Status PlaceStreamedCopy(const PlanInput& in, const Hardware& hw, const Plan& plan,
                         uint64_t device_tensors, int64_t bucket, const ModelUnits& units,
                         ParamPlacement& params, StatePlacement& state) {
  if (in.param_offload != ParamOffload::kAuto || params.where == ParamOffload::kNone) {
    return Status::Ok();
  }
  const double host_target = static_cast<double>(hw.host_memory_bytes) * kHostAutoPlacementFraction;
  if (static_cast<double>(state.tiers.host.total_bytes()) <= host_target) return Status::Ok();
  ParamPlacement on_nvme = params;
  on_nvme.where = ParamOffload::kNvme;
  TF_ASSIGN_OR_RETURN(StatePlacement nvme_state,
                      PlaceState(in, hw, plan.params, plan.state_bytes_per_param, device_tensors,
                                 bucket, on_nvme, units));
  auto fits = [&](const StatePlacement& sp) {
    return sp.tiers.host.total_bytes() <= hw.host_memory_bytes &&
           sp.tiers.nvme.total_bytes() <= hw.nvme_capacity_bytes;
  };
  if (fits(nvme_state) || !fits(state)) {
    params = std::move(on_nvme);
    state = std::move(nvme_state);
  }
  return Status::Ok();
}

// The host and NVMe tiers and the placement the engine is given.
void AdoptPlacement(const PlanInput& in, int64_t bucket, bool vocab_sliced, ParamPlacement params,
                    StatePlacement state, Plan& plan) {
  params.chosen_by_planner = in.param_offload == ParamOffload::kAuto;
  plan.host = std::move(state.tiers.host);
  plan.nvme = std::move(state.tiers.nvme);
  plan.pinned_bytes = state.tiers.pinned_bytes;
  plan.sub_groups = state.tiers.sub_groups;

  Placement& p = plan.placement;
  p.nvme_ratio = state.ratio;
  p.nvme_state_params = plan.sub_groups.nvme_params;
  p.host_state_params = plan.sub_groups.params - p.nvme_state_params;
  plan.data_parallel.rank_params = plan.sub_groups.params;
  p.sub_group_params = in.sub_group_params;
  p.sub_group_cut = in.sub_group_cut;
  p.num_sub_groups = plan.sub_groups.num_sub_groups;
  p.nvme_sub_groups = plan.sub_groups.nvme_sub_groups;
  p.buffer_count = in.buffer_count;
  p.grad_buckets = in.grad_buckets;
  p.grad_bucket_params = bucket;
  p.vocab_sliced = vocab_sliced;
  p.speculation_params = state.speculation;
  p.speculation_from = state.speculation_from;
  p.chosen_by_planner = state.chosen;
  p.params = std::move(params);
  p.activations = in.offload_activations;
  p.gradients =
      in.offload_gradients == GradOffload::kNvme ? GradOffload::kNvme : GradOffload::kHost;
  p.grad_spill_slots = p.gradients == GradOffload::kNvme ? in.grad_spill_slots : 0;
  p.mlp_tile_rows = in.mlp_tile_rows.value_or(0);
  plan.gradients.host_bytes =
      Sum(plan.host.bytes_of("gradient_accumulator"), plan.host.bytes_of("summed_gradient_part"),
          plan.host.bytes_of("pinned_gradient_staging"), plan.host.bytes_of("gradient_spill_slots"),
          plan.host.bytes_of("unit_gradient_gathers"));
  plan.gradients.nvme_bytes =
      Sum(plan.nvme.bytes_of("gradient_files"), plan.nvme.bytes_of("gradient_spare_blocks"));
}

// A device that does not fit with every weight resident: would streaming
// weights fit it? Plans it (one level: kAuto) and says so.
Status SuggestStreaming(const PlanInput& in, const Hardware& hw, Plan& plan) {
  if (plan.feasible || plan.binding_constraint != "device" ||
      in.param_offload != ParamOffload::kNone) {
    return Status::Ok();
  }
  PlanInput streamed = in;
  streamed.param_offload = ParamOffload::kAuto;
  TF_ASSIGN_OR_RETURN(const Plan alt, PlanOnce(streamed, hw));
  const ParamPlacement& ap = alt.placement.params;
  if (alt.feasible && ap.where != ParamOffload::kNone) {
    plan.explanation +=
        ". Streaming weights fits it: --offload-param auto streams " +
        std::to_string(ap.streamed_units.size()) + " of " + std::to_string(in.model.n_layers + 2) +
        " units' weights from " + (ap.where == ParamOffload::kHost ? "host" : "NVMe") +
        " through " + std::to_string(ap.device_slots) + " device slots (the device then needs " +
        FormatBytes(alt.device.total_bytes()) + " of " + FormatBytes(alt.device.capacity_bytes) +
        "); --offload-param host or nvme says where their copy lives";
  }
  return Status::Ok();
}

// The plan with the gradients where in.offload_gradients says (kHost or
// kNvme; kAuto plans them on the host).
StatusOr<Plan> PlanWithGradients(const PlanInput& in, const Hardware& hw) {
  TF_RETURN_IF_ERROR(ValidateInput(in, hw));
  TF_RETURN_IF_ERROR(CheckCancel("planning " + in.model.name));
  const ModelConfig& m = in.model;
  Plan plan = StartPlan(in);
  const uint64_t a = DTypeSize(in.dtype);
  const uint64_t s = plan.state_bytes_per_param;

  // ---- device ----
  SizeActivations(in, plan);
  const SubGroupSummary layout = SummarizeSubGroups(m, SubGroupRuleOf(in), 0.0, s);
  const GradBucketSizes bucket_sizes = GradBucketSizesOf(m);
  const int64_t rank_params =
      in.device_collectives
          ? SummarizeSubGroups(m, SubGroupRuleOf(in), 0.0, s, in.nvme_block_bytes, in.ranks())
                .params
          : 0;
  const DeviceTierModel device(in, hw, plan, rank_params, layout.max_unit_params);
  // The bucket size and the streamed units (plan/param_placement.h): given
  // or the largest bucket, with everything resident, that leaves the device
  // its margin; else the least streaming that does.
  const ModelUnits units = ModelUnitsOf(m);
  const int slots = in.param_slots.value_or(kDefaultParamSlots);
  const double device_target = static_cast<double>(hw.device_memory_bytes) * kDeviceTargetFraction;
  // With several ranks each streams the same units through its own ring
  // from its own whole copy (the all-gather fills it): the device layout is
  // one GPU's, the copy is counted per rank on the node below.
  const DeviceLayout device_layout = ChooseDeviceLayout(
      in.param_offload, units, BucketCandidates(in, bucket_sizes, layout.max_unit_params), slots,
      device_target, [&device](int64_t resident, int64_t slot, int n_slots, int64_t bucket) {
        return device.Bytes(resident, slot, n_slots, bucket);
      });
  const int64_t bucket = device_layout.bucket_params;
  // Where the streamed copy lives does not change the device.
  const ParamOffload forced =
      in.param_offload == ParamOffload::kNvme ? ParamOffload::kNvme : ParamOffload::kHost;
  ParamPlacement params = DescribeStreaming(units, device_layout.streamed, forced, slots, a);
  plan.device = device.Tier(bucket, params);
  const uint64_t device_tensors = plan.device.total_bytes() - hw.device_reserved_bytes;

  // ---- placement, host, NVMe ----
  TF_ASSIGN_OR_RETURN(StatePlacement state,
                      PlaceState(in, hw, plan.params, s, device_tensors, bucket, params, units));
  TF_RETURN_IF_ERROR(PlaceStreamedCopy(in, hw, plan, device_tensors, bucket, units, params, state));
  const bool vocab_sliced = bucket < layout.max_unit_params && bucket < bucket_sizes.whole_units;
  AdoptPlacement(in, bucket, vocab_sliced, std::move(params), std::move(state), plan);

  Explain(in, hw, plan);
  TF_RETURN_IF_ERROR(SuggestStreaming(in, hw, plan));
  PredictStepTime(in, hw, plan);
  return plan;
}

}  // namespace

namespace {

// --offload-gradients auto: on the host while the host holds them with
// everything else; else on the drives, where the engine can spill them
// (GradSpillBlocker), with the state moved wholly to NVMe beside them.
StatusOr<Plan> PlanOnce(const PlanInput& in, const Hardware& hw) {
  if (in.offload_gradients != GradOffload::kAuto) return PlanWithGradients(in, hw);
  PlanInput on_host = in;
  on_host.offload_gradients = GradOffload::kHost;
  TF_ASSIGN_OR_RETURN(Plan plan, PlanWithGradients(on_host, hw));
  plan.placement.gradients_chosen = true;
  if (plan.host.total_bytes() <= plan.host.capacity_bytes || !GradSpillBlocker(in, hw).empty()) {
    return plan;
  }
  PlanInput on_nvme = in;
  on_nvme.offload_gradients = GradOffload::kNvme;
  TF_ASSIGN_OR_RETURN(Plan spilled, PlanWithGradients(on_nvme, hw));
  spilled.placement.gradients_chosen = true;
  // The host did not hold them: the drives' plan, which fits or says what
  // is still missing once they are off the host.
  return spilled;
}

}  // namespace

Status RequireFeasible(const Plan& plan) {
  if (plan.feasible) return Status::Ok();
  if (plan.binding_constraint == "nvme") return ResourceExhaustedError(plan.explanation);
  return OutOfMemoryError(plan.explanation);
}

}  // namespace tierflow
