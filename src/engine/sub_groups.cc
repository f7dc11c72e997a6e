// Cutting units into sub-groups.
#include "engine/sub_groups.h"

#include <algorithm>

namespace tierflow {

namespace {

Status CheckUnits(const std::vector<UnitInfo>& units, SubGroupRule rule) {
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
  return Status::Ok();
}

// The unit's tensor sizes within [begin, begin + count).
std::vector<uint64_t> TensorsWithin(const UnitInfo& unit, uint64_t begin, uint64_t count) {
  if (unit.tensor_params.empty()) return {count};
  std::vector<uint64_t> out;
  uint64_t t0 = 0;
  for (uint64_t t : unit.tensor_params) {
    const uint64_t lo = std::max(t0, begin), hi = std::min(t0 + t, begin + count);
    if (lo < hi) out.push_back(hi - lo);
    t0 += t;
  }
  return out;
}

}  // namespace

StatusOr<SubGroupLayout> MakeSubGroups(const std::vector<UnitInfo>& units, SubGroupRule rule) {
  std::vector<uint64_t> begin(units.size(), 0), params;
  for (const UnitInfo& unit : units) params.push_back(unit.num_params);
  return MakeSubGroupsOfParts(units, rule, begin, params);
}

StatusOr<SubGroupLayout> MakeSubGroupsOfParts(const std::vector<UnitInfo>& units, SubGroupRule rule,
                                              const std::vector<uint64_t>& part_begin,
                                              const std::vector<uint64_t>& part_params) {
  TF_RETURN_IF_ERROR(CheckUnits(units, rule));
  if (part_begin.size() != units.size() || part_params.size() != units.size()) {
    return InvalidArgumentError("sub-groups: " + std::to_string(part_begin.size()) + " and " +
                                std::to_string(part_params.size()) + " part bounds for " +
                                std::to_string(units.size()) + " units");
  }
  SubGroupLayout layout;
  layout.unit_offsets.push_back(0);
  layout.part_begins = part_begin;
  layout.by_unit.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const uint64_t b = part_begin[u], n = part_params[u];
    if (b > units[u].num_params || n > units[u].num_params - b) {
      return InvalidArgumentError("sub-groups: part [" + std::to_string(b) + ", +" +
                                  std::to_string(n) + ") is outside unit '" + units[u].name +
                                  "' of " + std::to_string(units[u].num_params) + " parameters");
    }
    layout.max_unit_params = std::max(layout.max_unit_params, n);
    const std::vector<uint64_t> sizes =
        n == 0 ? std::vector<uint64_t>{}
               : CutUnit(rule.cut == SubGroupCut::kSlices ? std::vector<uint64_t>{n}
                                                          : TensorsWithin(units[u], b, n),
                         rule);
    uint64_t off = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      SubGroup g;
      g.unit = static_cast<int>(u);
      g.index_in_unit = static_cast<int>(k);
      g.unit_offset = b + off;
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
