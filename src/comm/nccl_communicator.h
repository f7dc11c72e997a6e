// The NCCL backend of Communicator, for device buffers (built where CUDA
// and NCCL are found: TIERFLOW_HAVE_NCCL). Each call runs on the
// communicator's own CUDA stream and returns when this rank's part is done
// (the stream synchronised), as the interface asks.
//
// - ReduceScatterSum widens each contribution to fp32 on the device, then
//   ncclReduce sums each rank's part (of any size: NCCL's own reduce-scatter
//   wants equal parts) into that rank; with `accumulate` the sum is added to
//   what recv holds. NCCL fixes no order of the adds: results agree with
//   the MPI backend's to fp32 rounding, not bit for bit.
// - AllGather is a broadcast of each rank's part from that rank (uneven
//   parts again), grouped into one NCCL call.
//
// The stream is a blocking one: it runs after work already issued to the
// legacy default stream; work on the caller's own non-blocking streams must
// be complete (synchronised) before a call.
//
// Bootstrap: rank 0 makes NCCL's unique id and `bootstrap` (the MPI
// backend, host buffers) broadcasts it; one rank needs no bootstrap at all.
// A dead peer makes NCCL wait: the MPI side's liveness check (which ends
// the job) is what bounds that, as for the host path.
#pragma once

#include <memory>
#include <string_view>

#include "comm/communicator.h"
#include "comm/peer_watch.h"

namespace tierflow::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks (every rank calls it); with a null
  // bootstrap, a world of one. `cuda_ordinal`: this rank's GPU, made
  // current on the calling thread. Errors: Unavailable when CUDA has no
  // such device (no GPU, or no driver), Internal for an NCCL failure,
  // naming the call; those of the bootstrap's broadcast.
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(Communicator* bootstrap,
                                                            int cuda_ordinal);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  BufferKind buffers() const override { return BufferKind::kDevice; }
  std::string_view backend() const override { return "nccl"; }

  // `send`, `recv` and `data` are device pointers (of this rank's GPU).
  Status ReduceScatterSum(const void* send, DType send_dtype, const Partition& partition,
                          float* recv, bool accumulate = false) override;
  Status AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                   void* recv) override;
  Status Broadcast(void* data, size_t bytes, int root) override;
  Status Barrier() override;

  // NCCL's own collective (comm::RawOp) on device buffers, equal parts.
  Status RawCollective(RawOp op, const float* send, float* recv, size_t count);

  // NCCL waits forever for a dead peer: with a watch (the MPI side's,
  // MpiCommunicator::peer_watch), each call's wait polls the stream and,
  // when a peer has stopped beating, aborts the NCCL communicator and ends
  // the job naming it, as the MPI collectives do.
  void set_peer_watch(PeerWatch watch);

 private:
  struct Impl;
  NcclCommunicator(int rank, int world, int ordinal, std::unique_ptr<Impl> impl);
  // The device scratch, at least `bytes` (kept between calls).
  StatusOr<void*> Scratch(size_t bytes);
  Status Check(const Partition& partition, const char* op) const;
  // Waits for the stream (Wait: synchronised, or polled under the peer
  // watch); after an error, aborts the NCCL communicator.
  Status Sync(const char* what);
  Status Wait(const char* what);
  // FailedPrecondition once the communicator was aborted.
  Status Usable() const;

  int rank_;
  int world_;
  int ordinal_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierflow::comm
