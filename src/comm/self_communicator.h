// A world of one rank over host buffers: every collective is a copy or an
// add of this rank's own contribution (the MPI backend's arithmetic, with
// no peers). It lets a single process run the data-parallel path, which is
// how a machine with one GPU checks the device collectives (NCCL with one
// rank, EngineOptions::device_comm) against the plain run, bit for bit,
// without starting MPI.
#pragma once

#include "comm/communicator.h"

namespace tierflow::comm {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  BufferKind buffers() const override { return BufferKind::kHost; }
  std::string_view backend() const override { return "self"; }

  // recv (= or +=) send widened to fp32: one rank's sum.
  Status ReduceScatterSum(const void* send, DType send_dtype, const Partition& partition,
                          float* recv, bool accumulate = false) override;
  // This rank's part into place, unless it is there already.
  Status AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                   void* recv) override;
  Status Broadcast(void* data, size_t bytes, int root) override;
  Status Barrier() override { return Status::Ok(); }
};

}  // namespace tierflow::comm
