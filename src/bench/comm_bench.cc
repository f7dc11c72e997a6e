#include "bench/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>

namespace tierflow {
namespace {

using comm::MpiCommunicator;
using comm::RawOp;

// The slowest rank's mean seconds per call of `fn` over `iterations`.
StatusOr<double> TimeCollective(MpiCommunicator& host, int iterations,
                                const std::function<Status()>& fn) {
  for (int i = 0; i < 2; ++i) TF_RETURN_IF_ERROR(fn());
  TF_RETURN_IF_ERROR(host.Barrier());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) TF_RETURN_IF_ERROR(fn());
  const double mine =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
  return host.MaxOverRanks(mine);
}

}  // namespace

StatusOr<CommBenchResult> RunCommBench(MpiCommunicator& c, const CommBenchOptions& o) {
  auto raw = [&c](RawOp op, const float* send, float* recv, size_t count) {
    return c.RawCollective(op, send, recv, count);
  };
  auto allocate = [](size_t count, const std::vector<float>& fill) -> StatusOr<CommBenchBuffers> {
    CommBenchBuffers b;
    b.send.reset(new float[count], std::default_delete<float[]>());
    b.recv.reset(new float[count](), std::default_delete<float[]>());
    std::copy(fill.begin(), fill.end(), b.send.get());
    return b;
  };
  return RunCommBench(c, c, raw, allocate, o);
}

StatusOr<CommBenchResult> RunCommBench(comm::Communicator& c, MpiCommunicator& host,
                                       const CommBenchRaw& raw, const CommBenchAllocate& allocate,
                                       const CommBenchOptions& o) {
  if (o.iterations < 1) return InvalidArgumentError("bench comm: --iterations must be at least 1");
  if (o.sizes.empty()) return InvalidArgumentError("bench comm: no sizes to measure");
  if (c.world_size() != host.world_size() || c.rank() != host.rank()) {
    return InvalidArgumentError("bench comm: the measured and the timing communicators differ");
  }
  const size_t world = static_cast<size_t>(c.world_size());
  CommBenchResult result;
  result.world_size = c.world_size();
  for (uint64_t size : o.sizes) {
    if (size > (uint64_t{1} << 31) - 1) {
      return InvalidArgumentError("bench comm: size " + std::to_string(size) +
                                  " bytes is past 2 GiB - 1, MPI's int count for the raw loop");
    }
    const size_t count = std::max<size_t>(world, size / 4 / world * world);
    std::vector<float> fill(count);
    for (size_t i = 0; i < count; ++i) fill[i] = static_cast<float>((i + c.rank()) % 1000) * 0.5f;
    TF_ASSIGN_OR_RETURN(const CommBenchBuffers buffers, allocate(count, fill));
    float* send = buffers.send.get();
    float* recv = buffers.recv.get();
    TF_ASSIGN_OR_RETURN(const comm::Partition even,
                        comm::Partition::Even(count, c.world_size(), 1));
    float* mine = recv + even.begin(c.rank());
    const double frac = static_cast<double>(world - 1) / static_cast<double>(world);
    struct Op {
      const char* name;
      double bus_factor;
      std::function<Status()> ours, raw;
    };
    const Op ops[] = {
        {"all_reduce", 2 * frac, [&] { return AllReduceSum(c, send, DType::kF32, count, recv); },
         [&] { return raw(RawOp::kAllReduce, send, recv, count); }},
        {"reduce_scatter", frac, [&] { return c.ReduceScatterSum(send, DType::kF32, even, mine); },
         [&] { return raw(RawOp::kReduceScatter, send, recv, count); }},
        {"all_gather", frac, [&] { return c.AllGather(send, 4, even, recv); },
         [&] { return raw(RawOp::kAllGather, send, recv, count); }},
    };
    for (const Op& op : ops) {
      CommBenchRow row;
      row.op = op.name;
      row.bytes = count * 4;
      TF_ASSIGN_OR_RETURN(row.seconds, TimeCollective(host, o.iterations, op.ours));
      TF_ASSIGN_OR_RETURN(row.raw_seconds, TimeCollective(host, o.iterations, op.raw));
      const double gb = static_cast<double>(row.bytes) / 1e9;
      row.algbw_gb_per_second = gb / row.seconds;
      row.busbw_gb_per_second = row.algbw_gb_per_second * op.bus_factor;
      row.raw_algbw_gb_per_second = gb / row.raw_seconds;
      row.raw_busbw_gb_per_second = row.raw_algbw_gb_per_second * op.bus_factor;
      row.ratio_to_raw = row.raw_seconds / row.seconds;
      result.rows.push_back(row);
    }
  }
  return result;
}

}  // namespace tierflow
