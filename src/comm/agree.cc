#include "comm/agree.h"

#include <cstdint>
#include <vector>

namespace tierflow::comm {

Status BroadcastString(Communicator& comm, std::string* s, int root) {
  constexpr uint64_t kMaxBytes = uint64_t{1} << 20;
  uint64_t size = comm.rank() == root ? s->size() : 0;
  if (comm.rank() == root && size > kMaxBytes) size = UINT64_MAX;  // every rank refuses alike
  TF_RETURN_IF_ERROR(comm.Broadcast(&size, sizeof size, root));
  if (size > kMaxBytes) {
    return InvalidArgumentError("broadcast of a string from rank " + std::to_string(root) +
                                ": over the 1 MiB a path or message may take");
  }
  s->resize(size);
  return comm.Broadcast(s->data(), size, root);
}

Status AgreeOnStatus(Communicator& comm, const Status& local) {
  const int world = comm.world_size();
  TF_ASSIGN_OR_RETURN(Partition one_each,
                      Partition::Even(static_cast<size_t>(world), world, /*align=*/1));
  std::vector<int32_t> codes(static_cast<size_t>(world));
  const int32_t mine = static_cast<int32_t>(local.code());
  TF_RETURN_IF_ERROR(comm.AllGather(&mine, sizeof mine, one_each, codes.data()));
  int first = -1;
  for (int r = 0; r < world && first < 0; ++r) {
    if (codes[static_cast<size_t>(r)] != static_cast<int32_t>(StatusCode::kOk)) first = r;
  }
  if (first < 0) return Status::Ok();
  std::string message = comm.rank() == first ? local.message() : "";
  TF_RETURN_IF_ERROR(BroadcastString(comm, &message, first));
  if (comm.rank() == first) return local;
  return Status(static_cast<StatusCode>(codes[static_cast<size_t>(first)]),
                "rank " + std::to_string(first) + " of " + std::to_string(world) + ": " + message);
}

}  // namespace tierflow::comm
