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
  uint64_t unit_offset = 0;  // first parameter, relative to the (whole) unit
  // First parameter in the layout's packed order: the whole model's, or a
  // rank's parts of every unit one after another (MakeSubGroupsOfParts).
  uint64_t global_offset = 0;
  uint64_t num_params = 0;
  std::string name;  // "<unit>.sg<k>", names state tensors
};

struct SubGroupLayout {
  std::vector<SubGroup> groups;  // forward order
  // (num_units + 1,) prefix sums of the sizes laid out (units, or parts of them).
  std::vector<uint64_t> unit_offsets;
  // Per unit, where the part laid out starts in it (all 0 for whole units).
  std::vector<uint64_t> part_begins;
  std::vector<std::vector<int>> by_unit;  // unit -> indices into groups
  uint64_t total_params = 0;
  uint64_t max_unit_params = 0;
  uint64_t max_group_params = 0;
};

// Errors: InvalidArgument for kSlices with N = 0, a unit without
// parameters, or one whose tensor_params do not sum to its num_params.
StatusOr<SubGroupLayout> MakeSubGroups(const std::vector<UnitInfo>& units, SubGroupRule rule);

// One data-parallel rank's share: of unit u only parameters [part_begin[u],
// part_begin[u] + part_params[u]) (possibly none), cut by `rule` as if the
// part were the unit (a tensor crossing the part's edges counts as the
// piece inside). total_params, unit_offsets and global_offset count the
// parts only; unit_offset stays relative to the whole unit; max_unit_params
// is the largest part.
// Errors: those of MakeSubGroups, and InvalidArgument for a part outside its
// unit or vectors not one entry per unit.
StatusOr<SubGroupLayout> MakeSubGroupsOfParts(const std::vector<UnitInfo>& units, SubGroupRule rule,
                                              const std::vector<uint64_t>& part_begin,
                                              const std::vector<uint64_t>& part_params);

}  // namespace tierflow
