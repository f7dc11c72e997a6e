// Sub-groups: the pieces of each unit's parameters that the CPU optimizer
// and the state tiers work on one at a time, cut by a SubGroupRule
// (tierflow/sub_group_rule.h): slices of at most N, or DeepSpeed's whole
// tensors of at least N. A sub-group never spans two units, so a unit's
// update is complete (and can go back to the device) when its own
// sub-groups are done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/trainable.h"
#include "tierflow/status.h"
#include "tierflow/sub_group_rule.h"

namespace tierflow {

struct SubGroup {
  int unit = 0;
  int index_in_unit = 0;
  uint64_t unit_offset = 0;    // first parameter, relative to the unit
  uint64_t global_offset = 0;  // first parameter, relative to the whole model
  uint64_t num_params = 0;
  std::string name;  // "<unit>.sg<k>", names state tensors
};

struct SubGroupLayout {
  std::vector<SubGroup> groups;           // forward order
  std::vector<uint64_t> unit_offsets;     // (num_units + 1,) prefix sums of unit sizes
  std::vector<std::vector<int>> by_unit;  // unit -> indices into groups
  uint64_t total_params = 0;
  uint64_t max_unit_params = 0;
  uint64_t max_group_params = 0;
};

// Errors: InvalidArgument for kSlices with N = 0, a unit without
// parameters, or one whose tensor_params do not sum to its num_params.
StatusOr<SubGroupLayout> MakeSubGroups(const std::vector<UnitInfo>& units, SubGroupRule rule);

}  // namespace tierflow
