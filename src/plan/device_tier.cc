#include "plan/device_tier.h"

#include <algorithm>
#include <string>

#include "common/checked_math.h"
#include "common/units.h"
#include "plan/memory_model.h"

namespace tierflow {
namespace {

uint64_t U(int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); }

// Byte counts saturate (common/checked_math.h), as the planner's.
uint64_t Mul(auto... v) { return SaturatingProduct(v...); }

}  // namespace

DeviceTierModel::DeviceTierModel(const PlanInput& in, const Hardware& hw, const Plan& plan,
                                 int64_t rank_params, int64_t max_unit_params)
    : in_(in),
      hw_(hw),
      plan_(plan),
      rank_params_(rank_params),
      max_unit_params_(max_unit_params),
      weight_bytes_(DTypeSize(in.dtype)),
      bucket_bytes_per_param_(
          kGradBucketBytesPerParam +
          (plan.grad_transfer_dtype == DType::kF32 ? 0 : DTypeSize(plan.grad_transfer_dtype))) {}

// Device collectives: this rank's part of the sum (the step's running sum
// over several micro-batches, else one bucket's part at a time) and, on a
// GPU, NCCL's scratch (a bucket's contribution widened to fp32, and with
// accumulation the bucket's new part before it is added).
DeviceSizes DeviceTierModel::Sizes(int64_t resident, int64_t slot, int slots,
                                   int64_t bucket) const {
  const bool on_device = in_.device_collectives;
  DeviceSizes d;
  d.weights = Mul(U(resident), weight_bytes_);
  d.slots = Mul(U(slots), U(slot), weight_bytes_);
  d.buckets = Mul(U(in_.grad_buckets), U(bucket), bucket_bytes_per_param_);
  if (on_device) {
    d.summed = Mul(U(in_.grad_accum > 1 ? rank_params_ : bucket), 4);
    if (hw_.device_is_gpu) d.collective = Mul(U(bucket), in_.grad_accum > 1 ? 8 : 4);
  }
  if (hw_.device_is_gpu) {
    d.workspace = Mul(kGemmWorkspaceBytesPerStream, kGemmStreams);
    // Each slot of the streamed weights' ring is an allocation of its own.
    d.allocations = kFixedDeviceAllocations + 2 * in_.grad_buckets + slots + (on_device ? 2 : 0);
    d.rounding = Mul(kDeviceAllocationGranuleBytes, U(d.allocations));
  }
  return d;
}

uint64_t DeviceTierModel::Bytes(int64_t resident, int64_t slot, int slots, int64_t bucket) const {
  const DeviceSizes d = Sizes(resident, slot, slots, bucket);
  return SaturatingSum(d.weights, d.slots, d.buckets, d.summed, d.collective,
                       plan_.activations.total(), d.workspace, d.rounding,
                       hw_.device_reserved_bytes);
}

TierPlan DeviceTierModel::Tier(int64_t bucket, const ParamPlacement& pp) const {
  const DeviceSizes d = Sizes(pp.resident_params, pp.slot_params, pp.device_slots, bucket);
  const bool on_device = in_.device_collectives;
  const DType wire = plan_.grad_transfer_dtype;
  TierPlan t;
  t.name = "device";
  t.capacity_bytes = hw_.device_memory_bytes;
  const bool sliced = bucket < max_unit_params_;
  const bool streams = pp.where != ParamOffload::kNone;
  const int64_t units = in_.model.n_layers + 2;
  t.components = {
      {"weights", d.weights,
       std::to_string(weight_bytes_) + " B/param, " +
           (streams ? std::to_string(units - static_cast<int64_t>(pp.streamed_units.size())) +
                          " of " + std::to_string(units) + " units resident"
                    : "all layers resident")},
      {"weight_slots", d.slots,
       streams ? std::to_string(pp.device_slots) + " slots of the largest streamed unit (" +
                     std::to_string(pp.slot_params) + " params) for the streamed weights"
               : "none: no weights stream"},
      {"gradient_buckets", d.buckets,
       std::string(wire == DType::kF32
                       ? "fp32"
                       : "fp32 + its " + std::string(DTypeName(wire)) + " cast for D2H") +
           ": " + std::to_string(in_.grad_buckets) + " buckets of " + std::to_string(bucket) +
           " params (" + (sliced ? "units cut in pieces" : "the largest unit") + ")"},
      {"summed_gradient", d.summed,
       on_device ? (in_.grad_accum > 1
                        ? "fp32: this rank's part of every unit, the step's sum over the ranks' "
                          "micro-batches"
                        : "fp32: this rank's part of one bucket, summed over the ranks")
                 : "none: the gradient is summed on the host"},
      {"collective_scratch", d.collective,
       d.collective > 0 ? "NCCL's: a bucket widened to fp32" +
                              std::string(in_.grad_accum > 1 ? ", and its part before the add" : "")
                        : "none"},
      {"activations", plan_.activations.total(),
       std::string(in_.checkpointing ? "checkpointing on" : "checkpointing off") +
           " (on: " + FormatBytes(plan_.activations_with_checkpointing_bytes) +
           ", off: " + FormatBytes(plan_.activations_without_checkpointing_bytes) +
           "), incl. logits " + FormatBytes(plan_.activations.logits)},
  };
  if (hw_.device_is_gpu) {
    t.components.push_back({"workspace", d.workspace, "cuBLAS workspace"});
    t.components.push_back({"allocation_rounding", d.rounding,
                            "fragmentation headroom: " + std::to_string(d.allocations) +
                                " allocations, each up to a 2 MiB granule"});
  }
  if (hw_.device_reserved_bytes > 0) {
    t.components.push_back(
        {"cuda_context", hw_.device_reserved_bytes, "CUDA context and allocator reserve"});
  }
  return t;
}

}  // namespace tierflow
