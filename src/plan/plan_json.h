// The plan as one JSON object, for `tierflow plan --json` and scripts.
// Schema (docs/PLANNER.md, "JSON"): params, feasible, binding_constraint,
// explanation, tiers.{device,host,nvme}.{total_bytes, capacity_bytes,
// components{...}}, placement{...}, stages{...}, predicted_step_seconds,
// serial_step_seconds, max_params, and the model, input and hardware used.
#pragma once

#include <nlohmann/json.hpp>

#include "plan/planner.h"

namespace tierflow {

// `largest` and `longest` may be null (max_params, max_seq_len are then omitted).
nlohmann::json PlanToJson(const PlanInput& input, const Hardware& hardware, const Plan& plan,
                          const LargestModel* largest, const LongestContext* longest = nullptr);

}  // namespace tierflow
