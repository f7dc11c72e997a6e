// Cutting units into sub-groups.
#include "engine/sub_groups.h"

#include <algorithm>

namespace tierflow {

StatusOr<SubGroupLayout> MakeSubGroups(const std::vector<UnitInfo>& units, SubGroupRule rule) {
  if (rule.cut == SubGroupCut::kSlices && rule.params == 0) {
    return InvalidArgumentError("sub-groups: slices of 0 parameters; use 1 or more");
  }
  for (const UnitInfo& unit : units) {
    if (unit.num_params == 0) {
      return InvalidArgumentError("sub-groups: unit '" + unit.name + "' has no parameters");
    }
    uint64_t tensors_sum = 0;
    for (uint64_t t : unit.tensor_params) tensors_sum += t;
    if (!unit.tensor_params.empty() && tensors_sum != unit.num_params) {
      return InvalidArgumentError(
          "sub-groups: unit '" + unit.name + "' has " + std::to_string(unit.num_params) +
          " parameters but its tensors sum to " + std::to_string(tensors_sum));
    }
  }
  SubGroupLayout layout;
  layout.unit_offsets.push_back(0);
  layout.by_unit.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const uint64_t n = units[u].num_params;
    layout.max_unit_params = std::max(layout.max_unit_params, n);
    const bool whole_unit = rule.cut == SubGroupCut::kSlices || units[u].tensor_params.empty();
    const std::vector<uint64_t> sizes =
        CutUnit(whole_unit ? std::vector<uint64_t>{n} : units[u].tensor_params, rule);
    uint64_t off = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      SubGroup g;
      g.unit = static_cast<int>(u);
      g.index_in_unit = static_cast<int>(k);
      g.unit_offset = off;
      g.global_offset = layout.total_params + off;
      g.num_params = sizes[k];
      g.name = units[u].name + ".sg" + std::to_string(k);
      layout.max_group_params = std::max(layout.max_group_params, g.num_params);
      layout.by_unit[u].push_back(static_cast<int>(layout.groups.size()));
      layout.groups.push_back(std::move(g));
      off += sizes[k];
    }
    layout.total_params += n;
    layout.unit_offsets.push_back(layout.total_params);
  }
  return layout;
}

}  // namespace tierflow
