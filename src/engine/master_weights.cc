// GatherMasterWeights and StateRangeReader: sub-group reads into a flat
// array, or range by range through a one-sub-group cache.
#include "engine/master_weights.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "comm/agree.h"
#include "comm/communicator.h"

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
  if (unit < 0 || static_cast<size_t>(unit) >= engine_.layout().by_unit.size()) {
    return InvalidArgumentError("state reader: no unit " + std::to_string(unit));
  }
  const uint64_t unit_params = engine_.unit_params(unit);
  if (offset > unit_params || count > unit_params - offset) {
    return InvalidArgumentError("state reader: [" + std::to_string(offset) + ", +" +
                                std::to_string(count) + ") is outside unit " +
                                std::to_string(unit) + " of " + std::to_string(unit_params));
  }
  if (engine_.world_size() == 1) return ReadLocal(unit, array, offset, count, out);
  if (engine_.rank() != 0) {
    return FailedPreconditionError("state reader: rank " + std::to_string(engine_.rank()) +
                                   " reads through rank 0 (it serves: Serve)");
  }
  while (count > 0) {
    const uint64_t n = std::min(count, kServePieceParams);
    TF_RETURN_IF_ERROR(ServePiece(unit, array, offset, n, out));
    offset += n;
    count -= n;
    out += n;
  }
  return Status::Ok();
}

namespace {
// A read request broadcast by rank 0; unit -1 ends serving.
struct ServeRequest {
  int64_t unit = -1, array = 0;
  uint64_t offset = 0, count = 0;
};
}  // namespace

Status StateRangeReader::ServePiece(int unit, Array array, uint64_t offset, uint64_t count,
                                    float* out) {
  comm::Communicator& comm = *engine_.communicator();
  if (engine_.rank() == 0) {
    ServeRequest req{unit, static_cast<int64_t>(array), offset, count};
    TF_RETURN_IF_ERROR(comm.Broadcast(&req, sizeof req, 0));
  }
  // Who holds what of [offset, offset + count): the unit's parts, clamped.
  const comm::Partition& part = engine_.unit_part(unit);
  std::vector<size_t> bounds(1, 0);
  for (int r = 0; r < part.world(); ++r) {
    const uint64_t end = std::clamp<uint64_t>(part.end(r), offset, offset + count);
    bounds.push_back(end - offset);
  }
  TF_ASSIGN_OR_RETURN(comm::Partition share, comm::Partition::FromBounds(bounds));
  const int me = engine_.rank();
  float* mine = out + share.begin(me);
  Status read = share.size(me) == 0
                    ? Status::Ok()
                    : ReadLocal(unit, array, offset + share.begin(me), share.size(me), mine);
  TF_RETURN_IF_ERROR(comm.AllGather(mine, sizeof(float), share, out));
  return comm::AgreeOnStatus(comm, read);
}

Status StateRangeReader::Serve() {
  if (engine_.world_size() == 1 || engine_.rank() == 0) {
    return FailedPreconditionError("state reader: only ranks other than 0 serve");
  }
  comm::Communicator& comm = *engine_.communicator();
  Status first_error;
  for (;;) {
    ServeRequest req;
    TF_RETURN_IF_ERROR(comm.Broadcast(&req, sizeof req, 0));
    if (req.unit < 0) return first_error;
    // Rank 0 checked the request against the same model.
    if (req.unit >= static_cast<int64_t>(engine_.layout().by_unit.size()) || req.array < 0 ||
        req.array > 2 || req.count > kServePieceParams) {
      return InternalError("state reader: rank 0 asked for an impossible range");
    }
    scratch_.resize(req.count);
    Status s = ServePiece(static_cast<int>(req.unit), static_cast<Array>(req.array), req.offset,
                          req.count, scratch_.data());
    if (!s.ok() && first_error.ok()) first_error = s;
  }
}

Status StateRangeReader::EndServing(OffloadEngine& engine) {
  if (engine.world_size() == 1) return Status::Ok();
  ServeRequest stop;
  return engine.communicator()->Broadcast(&stop, sizeof stop, 0);
}

Status StateRangeReader::ReadLocal(int unit, Array array, uint64_t offset, uint64_t count,
                                   float* out) {
  const SubGroupLayout& layout = engine_.layout();
  const uint64_t part_begin = layout.part_begins[unit];
  const uint64_t part_params = layout.unit_offsets[unit + 1] - layout.unit_offsets[unit];
  if (offset < part_begin || offset - part_begin > part_params ||
      count > part_params - (offset - part_begin)) {
    return InternalError("state reader: [" + std::to_string(offset) + ", +" +
                         std::to_string(count) + ") of unit " + std::to_string(unit) +
                         " is not this rank's part");
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
    const int a = static_cast<int>(array);
    std::vector<float>& src = array == Array::kMaster   ? master_
                              : array == Array::kExpAvg ? exp_avg_
                                                        : exp_avg_sq_;
    if (cached_group_[a] != g) {
      cached_group_[a] = -1;
      TF_RETURN_IF_ERROR(engine_.ReadState(g, array == Array::kMaster ? src.data() : nullptr,
                                           array == Array::kExpAvg ? src.data() : nullptr,
                                           array == Array::kExpAvgSq ? src.data() : nullptr));
      cached_group_[a] = g;
    }
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
