// `tierflow bench comm`: the bus bandwidth of tierflow's collectives
// (all-reduce, reduce-scatter, all-gather; over MPI on host buffers,
// comm/mpi_communicator.h, or over NCCL on device buffers) against the
// library's own collectives on the same buffers, as nccl-tests reports
// them: algbw = bytes / time, busbw = algbw x 2(n-1)/n for all-reduce and
// x (n-1)/n for the other two, where bytes is the whole buffer (all-reduce's
// and reduce-scatter's input, all-gather's output) and time is the slowest
// rank's mean over the iterations.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"

namespace tierflow {

struct CommBenchOptions {
  std::vector<uint64_t> sizes = {uint64_t{4} << 10, uint64_t{64} << 10, uint64_t{1} << 20,
                                 uint64_t{16} << 20, uint64_t{64} << 20};
  int iterations = 20;  // timed, after 2 untimed
};

struct CommBenchRow {
  std::string op;  // "all_reduce", "reduce_scatter", "all_gather"
  uint64_t bytes = 0;
  double seconds = 0, algbw_gb_per_second = 0, busbw_gb_per_second = 0;
  double raw_seconds = 0, raw_algbw_gb_per_second = 0, raw_busbw_gb_per_second = 0;
  double ratio_to_raw = 0;  // raw_seconds / seconds: above 1 is faster than MPI's own
};

struct CommBenchResult {
  int world_size = 0;
  std::vector<CommBenchRow> rows;
};

// Every rank calls it with the same options. Sizes are rounded down to a
// multiple of 4 x world bytes (at least that). The MPI host path: host
// buffers, MPI's own collectives as the raw loop.
StatusOr<CommBenchResult> RunCommBench(comm::MpiCommunicator& comm,
                                       const CommBenchOptions& options);

// Any backend: `ours` measured against `raw` (the library's own, RawOp), on
// buffers from `allocate` (two of `count` floats each: send and receive,
// host or device as `ours` wants; `fill` names the send values, host-side,
// for it to place). Timing and the slowest rank go through `host` (MPI).
struct CommBenchBuffers {
  std::shared_ptr<float> send, recv;
};
using CommBenchAllocate =
    std::function<StatusOr<CommBenchBuffers>(size_t count, const std::vector<float>& fill)>;
using CommBenchRaw = std::function<Status(comm::RawOp, const float*, float*, size_t)>;
StatusOr<CommBenchResult> RunCommBench(comm::Communicator& ours, comm::MpiCommunicator& host,
                                       const CommBenchRaw& raw, const CommBenchAllocate& allocate,
                                       const CommBenchOptions& options);

}  // namespace tierflow
