#include "comm/communicator.h"

namespace tierflow::comm {

Status AllReduceSum(Communicator& comm, const void* send, DType send_dtype, size_t count,
                    float* recv) {
  // 16 elements: every part starts 64-byte aligned in recv when recv is.
  TF_ASSIGN_OR_RETURN(const Partition part, Partition::Even(count, comm.world_size(), 16));
  float* mine = recv + part.begin(comm.rank());
  TF_RETURN_IF_ERROR(comm.ReduceScatterSum(send, send_dtype, part, mine));
  return comm.AllGather(mine, sizeof(float), part, recv);
}

}  // namespace tierflow::comm
