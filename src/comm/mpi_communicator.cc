#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "optim/grad_accumulate.h"

namespace tierflow::comm {
namespace {

constexpr size_t kDefaultPieceBytes = size_t{1} << 30;

// An MPI error code as a Status naming the call.
Status MpiStatus(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return Status();
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  return UnavailableError("MPI " + what +
                          " failed: " + std::string(text, static_cast<size_t>(len)) +
                          " (a peer rank may have died; see its log)");
}

bool Overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> requests;

  // Posts one message of `bytes` to or from `peer`, in pieces; tag 0.
  void Post(bool is_send, const void* data, size_t bytes, int peer, size_t piece) {
    auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
    for (size_t off = 0; off < bytes; off += piece) {
      const int n = static_cast<int>(std::min(piece, bytes - off));
      MPI_Request r = MPI_REQUEST_NULL;
      int code = is_send ? MPI_Isend(p + off, n, MPI_BYTE, peer, 0, comm, &r)
                         : MPI_Irecv(p + off, n, MPI_BYTE, peer, 0, comm, &r);
      if (code != MPI_SUCCESS) {
        errors.push_back(code);
        return;
      }
      requests.push_back(r);
    }
  }

  Status WaitAll(const std::string& what) {
    int code = errors.empty() ? MPI_SUCCESS : errors.front();
    if (!requests.empty()) {
      const int wait = Wait(static_cast<int>(requests.size()), requests.data());
      if (code == MPI_SUCCESS) code = wait;
    }
    requests.clear();
    errors.clear();
    return MpiStatus(code, what);
  }

  // MPI_Waitall, or with a peer check a polling wait that ends the job
  // when the check names a dead peer (comm/peer_watch.h).
  int Wait(int n, MPI_Request* reqs) {
    if (!watch.active()) return MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
    int code = MPI_SUCCESS;
    (void)PollWithPeerWatch(
        [&]() -> StatusOr<bool> {
          int done = 0;
          code = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
          return code != MPI_SUCCESS || done != 0;
        },
        watch);  // ends the job rather than return with a dead peer
    return code;
  }

  std::vector<int> errors;
  PeerWatch watch;
};

void MpiCommunicator::set_peer_check(PeerCheck check, std::chrono::milliseconds every) {
  impl_->watch.check = std::move(check);
  impl_->watch.every = every;
  impl_->watch.end_job = [](const std::string&) { EndJob(); };
}

PeerWatch MpiCommunicator::peer_watch() const { return impl_->watch; }

void MpiCommunicator::EndJob() {
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();  // MPI_Abort does not return
}

MpiCommunicator::MpiCommunicator(int rank, int world, std::unique_ptr<Impl> impl)
    : rank_(rank), world_(world), max_piece_bytes_(kDefaultPieceBytes), impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(const LaunchEnv& launch) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 || finalized != 0) {
    return FailedPreconditionError(
        "MPI is already initialised in this process: one communicator per process");
  }
  int provided = 0;
  TF_RETURN_IF_ERROR(MpiStatus(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
                               "MPI_Init_thread"));
  auto impl = std::make_unique<Impl>();
  int rank = 0, world = 0;
  Status s = MpiStatus(MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm), "MPI_Comm_dup");
  if (s.ok()) {
    // Errors come back as codes, to be reported by name, not as an abort.
    MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(impl->comm, &rank);
    MPI_Comm_size(impl->comm, &world);
    if (provided < MPI_THREAD_SERIALIZED) {
      s = UnavailableError("this MPI library offers thread level " + std::to_string(provided) +
                           ", below MPI_THREAD_SERIALIZED: rebuild OpenMPI with thread support");
    } else if (rank != launch.rank || world != launch.world_size) {
      s = FailedPreconditionError(
          "MPI says rank " + std::to_string(rank) + " of " + std::to_string(world) + ", but the " +
          launch.launcher + " environment says rank " + std::to_string(launch.rank) + " of " +
          std::to_string(launch.world_size) +
          ": the launcher's MPI and the one tierflow links differ (use Debian's mpirun)");
    }
  }
  if (!s.ok()) {
    if (impl->comm != MPI_COMM_NULL) MPI_Comm_free(&impl->comm);
    MPI_Finalize();
    return s;
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(rank, world, std::move(impl)));
}

MpiCommunicator::~MpiCommunicator() {
  MPI_Comm_free(&impl_->comm);
  MPI_Finalize();
}

void MpiCommunicator::set_max_piece_bytes(size_t bytes) {
  max_piece_bytes_ = std::clamp<size_t>(bytes, 1, static_cast<size_t>(INT_MAX));
}

Status MpiCommunicator::CheckPartition(const Partition& partition, const char* op) const {
  if (partition.world() != world_) {
    return InvalidArgumentError(std::string(op) + ": the partition has " +
                                std::to_string(partition.world()) + " parts for a world of " +
                                std::to_string(world_) + " ranks");
  }
  return Status();
}

Status MpiCommunicator::ReduceScatterSum(const void* send, DType send_dtype,
                                         const Partition& partition, float* recv, bool accumulate) {
  TF_RETURN_IF_ERROR(CheckPartition(partition, "reduce-scatter"));
  const size_t esz = DTypeSize(send_dtype);
  const size_t n = partition.size(rank_);
  const size_t part_bytes = n * esz;
  const auto* src = static_cast<const unsigned char*>(send);
  const unsigned char* own = src + partition.begin(rank_) * esz;
  // One slot per rank; this rank's own slot is used only when its
  // contribution overlaps recv (an in-place call), which the sum would
  // otherwise overwrite before reading.
  const bool copy_own = Overlaps(own, part_bytes, recv, n * sizeof(float));
  scratch_.resize(static_cast<size_t>(world_) * part_bytes);
  auto slot = [&](int r) { return scratch_.data() + static_cast<size_t>(r) * part_bytes; };
  if (copy_own && part_bytes > 0) std::memcpy(slot(rank_), own, part_bytes);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    impl_->Post(false, slot(peer), part_bytes, peer, max_piece_bytes_);
    impl_->Post(true, src + partition.begin(peer) * esz, partition.size(peer) * esz, peer,
                max_piece_bytes_);
  }
  TF_RETURN_IF_ERROR(impl_->WaitAll("reduce-scatter exchange"));
  // The contributions in rank order, through the engine's own micro-batch
  // accumulation: the same adds in the same order give the same bits.
  for (int r = 0; r < world_; ++r) {
    const void* c = (r == rank_ && !copy_own) ? own : slot(r);
    AccumulateGrads(recv, c, send_dtype, n, /*first=*/!accumulate && r == 0);
  }
  return Status();
}

Status MpiCommunicator::AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                                  void* recv) {
  TF_RETURN_IF_ERROR(CheckPartition(partition, "all-gather"));
  if (elem_bytes == 0) return InvalidArgumentError("all-gather: element size must be at least 1");
  auto* dst = static_cast<unsigned char*>(recv);
  unsigned char* mine = dst + partition.begin(rank_) * elem_bytes;
  const size_t my_bytes = partition.size(rank_) * elem_bytes;
  if (send != mine && my_bytes > 0) std::memmove(mine, send, my_bytes);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    impl_->Post(false, dst + partition.begin(peer) * elem_bytes, partition.size(peer) * elem_bytes,
                peer, max_piece_bytes_);
    impl_->Post(true, mine, my_bytes, peer, max_piece_bytes_);
  }
  return impl_->WaitAll("all-gather exchange");
}

Status MpiCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_) {
    return InvalidArgumentError("broadcast: root " + std::to_string(root) +
                                " is not a rank of a world of " + std::to_string(world_));
  }
  auto* p = static_cast<unsigned char*>(data);
  for (size_t off = 0; off < bytes; off += max_piece_bytes_) {
    const int n = static_cast<int>(std::min(max_piece_bytes_, bytes - off));
    MPI_Request r = MPI_REQUEST_NULL;
    TF_RETURN_IF_ERROR(
        MpiStatus(MPI_Ibcast(p + off, n, MPI_BYTE, root, impl_->comm, &r), "MPI_Ibcast"));
    TF_RETURN_IF_ERROR(MpiStatus(impl_->Wait(1, &r), "MPI_Ibcast"));
  }
  return Status();
}

Status MpiCommunicator::RawCollective(RawOp op, const float* send, float* recv, size_t count) {
  const auto w = static_cast<size_t>(world_);
  if (count % w != 0 || count > static_cast<size_t>(INT_MAX)) {
    return InvalidArgumentError("raw collective: " + std::to_string(count) +
                                " floats is not a multiple of the world size " +
                                std::to_string(world_) + " within MPI's int count");
  }
  const int n = static_cast<int>(count);
  const int part = static_cast<int>(count / w);
  switch (op) {
    case RawOp::kAllReduce:
      return MpiStatus(MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, impl_->comm),
                       "MPI_Allreduce");
    case RawOp::kReduceScatter:
      return MpiStatus(MPI_Reduce_scatter_block(send, recv, part, MPI_FLOAT, MPI_SUM, impl_->comm),
                       "MPI_Reduce_scatter_block");
    case RawOp::kAllGather:
      return MpiStatus(MPI_Allgather(send, part, MPI_FLOAT, recv, part, MPI_FLOAT, impl_->comm),
                       "MPI_Allgather");
  }
  return InvalidArgumentError("raw collective: unknown operation");
}

StatusOr<double> MpiCommunicator::MaxOverRanks(double value) {
  double result = 0;
  TF_RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, impl_->comm),
                               "MPI_Allreduce (max)"));
  return result;
}

Status MpiCommunicator::Barrier() {
  MPI_Request r = MPI_REQUEST_NULL;
  TF_RETURN_IF_ERROR(MpiStatus(MPI_Ibarrier(impl_->comm, &r), "MPI_Ibarrier"));
  return MpiStatus(impl_->Wait(1, &r), "MPI_Ibarrier");
}

}  // namespace tierflow::comm
