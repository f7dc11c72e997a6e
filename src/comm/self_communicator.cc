#include "comm/self_communicator.h"

#include <cstring>
#include <string>

#include "optim/grad_accumulate.h"

namespace tierflow::comm {
namespace {

Status CheckWorld(const Partition& partition, const char* op) {
  if (partition.world() == 1) return Status::Ok();
  return InvalidArgumentError(std::string("self ") + op + ": a partition of " +
                              std::to_string(partition.world()) + " parts over a world of one");
}

}  // namespace

Status SelfCommunicator::ReduceScatterSum(const void* send, DType send_dtype,
                                          const Partition& partition, float* recv,
                                          bool accumulate) {
  TF_RETURN_IF_ERROR(CheckWorld(partition, "reduce-scatter"));
  AccumulateGrads(recv, send, send_dtype, partition.total(), /*first=*/!accumulate);
  return Status::Ok();
}

Status SelfCommunicator::AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                                   void* recv) {
  TF_RETURN_IF_ERROR(CheckWorld(partition, "all-gather"));
  const size_t bytes = partition.total() * elem_bytes;
  if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
  return Status::Ok();
}

Status SelfCommunicator::Broadcast(void* data, size_t bytes, int root) {
  (void)data;
  (void)bytes;
  if (root != 0) {
    return InvalidArgumentError("self broadcast from rank " + std::to_string(root) +
                                " of a world of one");
  }
  return Status::Ok();
}

}  // namespace tierflow::comm
