// The data-parallel strategy: how the ranks share a step. Each unit is cut
// into one part per rank (comm::Partition::Even at the norm's chunks), rank r
// runs micro-batches k = j * world + r of the global step, and at the
// decision the ranks exchange their parts' chunk sums of squares, their
// losses and their stop requests in one all-gather.
//
// One process is a world of one: its part of each unit is the whole unit,
// it runs every micro-batch, and its exchange is with itself (no
// collective). Whether the engine calls collectives at all is `collective()`:
// a run given a host communicator over several ranks, or device collectives
// (a world of one with those runs the data-parallel path: how one GPU checks
// them).
//
// Thread ownership: immutable after Create; read by both threads.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/partition.h"
#include "common/trace.h"
#include "engine/sub_groups.h"
#include "engine/trainable.h"

namespace tierflow {

class DataParallelStrategy {
 public:
  struct Options {
    comm::Communicator* comm = nullptr;         // host buffers (null: one process)
    comm::Communicator* device_comm = nullptr;  // device buffers (null: none)
    int micro_batches_per_step = 0;             // global; 0: any number (one process only)
  };
  // Errors name the option: a host communicator over device buffers (or the
  // reverse), communicators that order the ranks differently, device
  // collectives over several ranks without host ones, a step's
  // micro-batches not a multiple of the world.
  static StatusOr<DataParallelStrategy> Create(const std::vector<UnitInfo>& units,
                                               const Options& options);

  int rank() const { return rank_; }
  int world() const { return world_; }
  // Whether the engine runs collectives (null comm(): it does not).
  bool collective() const { return comm_ != nullptr; }
  comm::Communicator* comm() const { return comm_; }
  comm::Communicator* device_comm() const { return device_comm_; }
  // Micro-batches this rank runs per step (0: any number).
  int local_micro() const { return local_micro_; }
  const comm::Partition& part(int unit) const { return parts_[static_cast<size_t>(unit)]; }
  // This rank's sub-groups: its part of every unit, cut by `rule`.
  StatusOr<SubGroupLayout> Layout(const std::vector<UnitInfo>& units, SubGroupRule rule) const;

  // Of a global step of `global` micro-batches, how many this rank runs;
  // an error when the world cannot share them equally.
  StatusOr<int> LocalMicroBatches(int global) const;
  // The global index of this rank's j-th micro-batch.
  int GlobalMicroBatch(int j) const { return j * world_ + rank_; }

  // Norm chunk sums (GradChunkSquares) rank r's part of unit u yields:
  // [ChunkBegin(r, u), ChunkBegin(r, u + 1)) of the rank's sums, which
  // number ChunkBegin(r, units).
  uint64_t ChunkBegin(int r, int u) const {
    return rank_chunks_[static_cast<size_t>(r)][static_cast<size_t>(u)];
  }
  uint64_t Chunks(int r) const { return rank_chunks_[static_cast<size_t>(r)].back(); }

  // What the ranks agree on at the decision.
  struct StepTotals {
    std::vector<double> unit_sum_squares;  // per unit: its chunks in order, rank after rank
    std::vector<char> unit_non_finite;
    float loss = 0;               // every micro-batch's, weighted, in global order
    bool stop_requested = false;  // any rank's
  };
  // Sends this rank's chunk sums (Chunks(rank()) of them), its losses (one
  // per local micro-batch) and stop request; combines every rank's. The
  // micro-batches' weights are the global step's (every rank's alike).
  StatusOr<StepTotals> Exchange(const std::vector<double>& chunk_sums,
                                const std::vector<double>& local_losses, bool stop_requested,
                                const std::vector<double>& micro_weights,
                                TraceRecorder* trace) const;
  // The combination alone: `all` holds every rank's report (rank r's from
  // `reports.begin(r)`: chunk sums, local_micro losses, stop flag).
  StepTotals Combine(const std::vector<double>& all, const comm::Partition& reports,
                     const std::vector<double>& micro_weights) const;
  // Where each rank's report lies in the exchange.
  StatusOr<comm::Partition> Reports() const;

 private:
  DataParallelStrategy() = default;

  comm::Communicator* comm_ = nullptr;
  comm::Communicator* device_comm_ = nullptr;
  int rank_ = 0, world_ = 1;
  int local_micro_ = 0;
  std::vector<comm::Partition> parts_;  // per unit: the ranks' parts
  // Per rank, (num_units + 1,) prefix sums of the chunk sums its parts yield.
  std::vector<std::vector<uint64_t>> rank_chunks_;
};

}  // namespace tierflow
