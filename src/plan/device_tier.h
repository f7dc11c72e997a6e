// The device tier of a plan: its components as numbers, which the layout
// search (plan/param_placement.h) evaluates for many layouts, and as the
// tier with notes once one is chosen; the same sums either way.
#pragma once

#include <cstdint>

#include "plan/planner.h"

namespace tierflow {

// One layout's device components, in bytes.
struct DeviceSizes {
  uint64_t weights = 0, slots = 0, buckets = 0, summed = 0, collective = 0, workspace = 0,
           rounding = 0;
  int allocations = 0;
};

class DeviceTierModel {
 public:
  // `plan` gives the activations and the gradients' transfer dtype, and must
  // outlive this. `rank_params`: this rank's part of the state (device
  // collectives sum it on the device); `max_unit_params`: the largest unit.
  DeviceTierModel(const PlanInput& in, const Hardware& hw, const Plan& plan, int64_t rank_params,
                  int64_t max_unit_params);

  // `resident` parameters on the device, a ring of `slots` slots of `slot`
  // parameters (0, 0 when nothing streams), gradient buckets of `bucket`.
  DeviceSizes Sizes(int64_t resident, int64_t slot, int slots, int64_t bucket) const;
  // The device's total for that layout, activations and reserve included.
  uint64_t Bytes(int64_t resident, int64_t slot, int slots, int64_t bucket) const;
  // The tier, each component with its note.
  TierPlan Tier(int64_t bucket, const ParamPlacement& pp) const;

 private:
  const PlanInput& in_;
  const Hardware& hw_;
  const Plan& plan_;
  int64_t rank_params_;
  int64_t max_unit_params_;
  uint64_t weight_bytes_;
  uint64_t bucket_bytes_per_param_;
};

}  // namespace tierflow
