// Cutting units into sub-groups.
#include "engine/sub_groups.h"

#include <algorithm>

namespace tierflow {

SubGroupLayout MakeSubGroups(const std::vector<UnitInfo>& units, uint64_t sub_group_params) {
  SubGroupLayout layout;
  layout.unit_offsets.push_back(0);
  layout.by_unit.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const uint64_t n = units[u].num_params;
    layout.max_unit_params = std::max(layout.max_unit_params, n);
    int k = 0;
    for (uint64_t off = 0; off < n; off += sub_group_params, ++k) {
      SubGroup g;
      g.unit = static_cast<int>(u);
      g.index_in_unit = k;
      g.unit_offset = off;
      g.global_offset = layout.total_params + off;
      g.num_params = std::min(sub_group_params, n - off);
      g.name = units[u].name + ".sg" + std::to_string(k);
      layout.max_group_params = std::max(layout.max_group_params, g.num_params);
      layout.by_unit[u].push_back(static_cast<int>(layout.groups.size()));
      layout.groups.push_back(std::move(g));
    }
    layout.total_params += n;
    layout.unit_offsets.push_back(layout.total_params);
  }
  return layout;
}

}  // namespace tierflow
