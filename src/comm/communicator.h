// The collectives data-parallel training needs, behind one small interface
// with two backends: MPI for host buffers (comm/mpi_communicator.h), NCCL for
// device buffers. Every rank must issue the same collectives in the same
// order with the same sizes; a call blocks until this rank's part is done.
// A communicator is used by one thread at a time (the engine's communication
// thread).
#pragma once

#include <cstddef>
#include <string_view>

#include "comm/partition.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow::comm {

// Where a communicator's buffers live.
enum class BufferKind { kHost, kDevice };

// A library's own collective on `count` floats (MPI's, NCCL's), summing
// where it sums: the raw loop `tierflow bench comm` measures tierflow's
// collectives against. kAllReduce: count in send and recv; kReduceScatter:
// count in send, count / world in recv; kAllGather: count / world in send,
// count in recv. count must be a multiple of the world size.
enum class RawOp { kAllReduce, kReduceScatter, kAllGather };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual BufferKind buffers() const = 0;
  virtual std::string_view backend() const = 0;  // "mpi", "nccl"

  // Every rank passes `send`: partition.total() elements of `send_dtype`,
  // its contribution. Rank r receives in `recv` (partition.size(r) floats)
  // the sum over ranks of its part [begin(r), end(r)), each contribution
  // widened to fp32. MPI adds in rank order with the engine's micro-batch
  // accumulation (optim/grad_accumulate.h), so the
  // result is bit-identical to one process accumulating the contributions
  // in that order; NCCL fixes no order. With `accumulate` the contributions
  // are added to what recv holds (recv += c0, then += c1, ...), so
  // successive calls continue one running sum: micro-batch after
  // micro-batch, in the global order.
  virtual Status ReduceScatterSum(const void* send, DType send_dtype, const Partition& partition,
                                  float* recv, bool accumulate = false) = 0;

  // Every rank passes its part, partition.size(rank) elements of
  // `elem_bytes` bytes at `send`; every rank receives all parts in place in
  // `recv` (partition.total() elements). `send` may be recv's own part.
  virtual Status AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                           void* recv) = 0;

  // `bytes` at `data` on rank `root` to every rank's `data`.
  virtual Status Broadcast(void* data, size_t bytes, int root) = 0;

  virtual Status Barrier() = 0;
};

// Sum over ranks of `count` elements of `send_dtype` at `send`, widened to
// fp32, into every rank's `recv` (count floats): a reduce-scatter over an
// even partition then an all-gather of the sums, so every rank holds the
// same bits (with MPI, the rank-ordered sum).
Status AllReduceSum(Communicator& comm, const void* send, DType send_dtype, size_t count,
                    float* recv);

}  // namespace tierflow::comm
