// GatherMasterWeights: reads every sub-group's state (master, m, v) and keeps
// the masters at their global offsets.
#include "engine/master_weights.h"

#include <algorithm>

namespace tierflow {

StatusOr<std::vector<float>> GatherMasterWeights(OffloadEngine& engine) {
  TF_RETURN_IF_ERROR(engine.Finish().status());
  const SubGroupLayout& layout = engine.layout();
  std::vector<float> master(layout.total_params);
  std::vector<float> m(layout.max_group_params), v(layout.max_group_params);
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    const SubGroup& sg = layout.groups[g];
    TF_RETURN_IF_ERROR(engine.ReadState(static_cast<int>(g), master.data() + sg.global_offset,
                                        m.data(), v.data()));
  }
  return master;
}

}  // namespace tierflow
