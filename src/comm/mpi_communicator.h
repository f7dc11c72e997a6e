// The MPI backend of Communicator, for host buffers (OpenMPI from Debian):
// point-to-point exchanges in pieces of at most 1 GiB (MPI counts are int),
// and a sum in rank order through optim's AccumulateGrads (the engine's own
// micro-batch accumulation), so results do not depend on the MPI library's
// choice of algorithm.
//
// MPI is initialised once per process, by Create, and finalised when the
// communicator is destroyed; a process that no launcher started never
// creates one (comm/launch_env.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "comm/peer_watch.h"

namespace tierflow::comm {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI (MPI_THREAD_SERIALIZED: any one thread at a time) and
  // checks that its world agrees with the launcher's environment. Errors:
  // MPI already initialised or finalised in this process (FailedPrecondition),
  // the thread level unavailable, or a world that contradicts `launch`.
  static StatusOr<std::unique_ptr<MpiCommunicator>> Create(const LaunchEnv& launch);

  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  BufferKind buffers() const override { return BufferKind::kHost; }
  std::string_view backend() const override { return "mpi"; }

  Status ReduceScatterSum(const void* send, DType send_dtype, const Partition& partition,
                          float* recv, bool accumulate = false) override;
  Status AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                   void* recv) override;
  Status Broadcast(void* data, size_t bytes, int root) override;
  Status Barrier() override;

  // MPI's own collective (comm::RawOp), MPI_SUM where it sums; count must
  // also fit MPI's int counts.
  using RawOp = comm::RawOp;
  Status RawCollective(RawOp op, const float* send, float* recv, size_t count);

  // The largest of every rank's `value` (a timing's slowest rank), on every rank.
  StatusOr<double> MaxOverRanks(double value);

  // While this rank waits in a collective, `check` is called about every
  // `every`; when it returns a message (a peer that stopped beating,
  // comm/liveness.h), this rank prints it and ends the whole job with
  // MPI_Abort, since a collective with a dead peer never completes and
  // OpenMPI has no timeout of its own. Without a check, waits block in MPI.
  using PeerCheck = comm::PeerCheck;
  void set_peer_check(PeerCheck check, std::chrono::milliseconds every);
  // That check and how this communicator ends the job, for the other
  // collectives of the ranks (NCCL's waits: comm/nccl_communicator.h).
  PeerWatch peer_watch() const;
  // Ends every rank's process: MPI_Abort.
  [[noreturn]] static void EndJob();

  // The largest message one MPI call carries; larger transfers go in
  // pieces. Tests lower it to exercise the piecewise path.
  void set_max_piece_bytes(size_t bytes);
  size_t max_piece_bytes() const { return max_piece_bytes_; }

 private:
  struct Impl;
  MpiCommunicator(int rank, int world, std::unique_ptr<Impl> impl);

  Status CheckPartition(const Partition& partition, const char* op) const;

  int rank_;
  int world_;
  size_t max_piece_bytes_;
  std::unique_ptr<Impl> impl_;
  std::vector<unsigned char> scratch_;  // peers' contributions to this rank's part
};

}  // namespace tierflow::comm
