// GatherMasterWeights and StateRangeReader: sub-group reads into a flat
// array, or range by range through a one-sub-group cache.
#include "engine/master_weights.h"

#include <algorithm>
#include <cstring>
#include <string>

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

Status StateRangeReader::Read(int unit, Array array, uint64_t offset, uint64_t count, float* out) {
  const SubGroupLayout& layout = engine_.layout();
  if (unit < 0 || static_cast<size_t>(unit) >= layout.by_unit.size()) {
    return InvalidArgumentError("state reader: no unit " + std::to_string(unit));
  }
  const uint64_t unit_params = layout.unit_offsets[unit + 1] - layout.unit_offsets[unit];
  if (offset > unit_params || count > unit_params - offset) {
    return InvalidArgumentError("state reader: [" + std::to_string(offset) + ", +" +
                                std::to_string(count) + ") is outside unit " +
                                std::to_string(unit) + " of " + std::to_string(unit_params));
  }
  if (master_.empty()) {
    master_.resize(layout.max_group_params);
    exp_avg_.resize(layout.max_group_params);
    exp_avg_sq_.resize(layout.max_group_params);
  }
  const std::vector<int>& groups = layout.by_unit[unit];
  // The unit's sub-groups are in offset order: the first that ends past `offset`.
  auto it = std::partition_point(groups.begin(), groups.end(), [&](int g) {
    const SubGroup& sg = layout.groups[g];
    return sg.unit_offset + sg.num_params <= offset;
  });
  while (count > 0) {
    if (it == groups.end()) return InternalError("state reader: sub-groups do not cover the unit");
    const int g = *it;
    const SubGroup& sg = layout.groups[g];
    if (cached_group_ != g) {
      cached_group_ = -1;
      TF_RETURN_IF_ERROR(engine_.ReadState(g, master_.data(), exp_avg_.data(), exp_avg_sq_.data()));
      cached_group_ = g;
    }
    const std::vector<float>& src = array == Array::kMaster   ? master_
                                    : array == Array::kExpAvg ? exp_avg_
                                                              : exp_avg_sq_;
    const uint64_t begin = offset - sg.unit_offset;
    const uint64_t n = std::min(count, sg.num_params - begin);
    std::memcpy(out, src.data() + begin, n * sizeof(float));
    out += n;
    offset += n;
    count -= n;
    ++it;
  }
  return Status::Ok();
}

}  // namespace tierflow
