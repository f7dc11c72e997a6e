// NCCL collectives on device buffers (comm/nccl_communicator.h).
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "comm/agree.h"
#include "comm/nccl_kernels.h"

namespace tierflow::comm {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return InternalError(std::string("NCCL backend: ") + what + ": " + cudaGetErrorString(e));
}

Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return InternalError(std::string("NCCL backend: ") + what + ": " + ncclGetErrorString(r));
}

StatusOr<nccl_detail::Element> ElementOf(DType t) {
  switch (t) {
    case DType::kF32:
      return nccl_detail::Element::kF32;
    case DType::kBF16:
      return nccl_detail::Element::kBF16;
    case DType::kF16:
      return nccl_detail::Element::kF16;
  }
  return InvalidArgumentError("NCCL backend: no such element type");
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  PeerWatch watch;
};

void NcclCommunicator::set_peer_watch(PeerWatch watch) { impl_->watch = std::move(watch); }

Status NcclCommunicator::Sync(const char* what) {
  Status s = Wait(what);
  if (!s.ok() && impl_->comm != nullptr) {
    // NCCL's kernels in flight may never finish after an error: abort the
    // communicator, so that the device (and its teardown) is not held, and
    // refuse later calls (Usable).
    (void)ncclCommAbort(impl_->comm);
    impl_->comm = nullptr;
  }
  return s;
}

Status NcclCommunicator::Usable() const {
  if (impl_->comm != nullptr) return Status::Ok();
  return FailedPreconditionError(
      "the NCCL communicator was aborted after an earlier error: the run must end");
}

Status NcclCommunicator::Wait(const char* what) {
  cudaStream_t s = impl_->stream;
  if (!impl_->watch.active()) return CudaStatus(cudaStreamSynchronize(s), what);
  // Polled, so that a dead peer (NCCL waits for it forever) ends the job,
  // and an error NCCL met on its own threads surfaces here.
  PeerWatch watch = impl_->watch;
  ncclComm_t comm = impl_->comm;
  auto end_job = watch.end_job;
  watch.end_job = [this, end_job](const std::string& message) {
    (void)ncclCommAbort(impl_->comm);  // frees the GPU from the collective first
    impl_->comm = nullptr;
    if (end_job) end_job(message);
  };
  return PollWithPeerWatch(
      [&]() -> StatusOr<bool> {
        const cudaError_t q = cudaStreamQuery(s);
        if (q == cudaSuccess) return true;
        if (q != cudaErrorNotReady) return CudaStatus(q, what);
        ncclResult_t async = ncclSuccess;
        TF_RETURN_IF_ERROR(NcclStatus(ncclCommGetAsyncError(comm, &async), what));
        TF_RETURN_IF_ERROR(NcclStatus(async, what));
        return false;
      },
      watch);
}

NcclCommunicator::NcclCommunicator(int rank, int world, int ordinal, std::unique_ptr<Impl> impl)
    : rank_(rank), world_(world), ordinal_(ordinal), impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ == nullptr) return;
  (void)cudaSetDevice(ordinal_);
  if (impl_->comm != nullptr) (void)ncclCommDestroy(impl_->comm);
  if (impl_->scratch != nullptr) (void)cudaFree(impl_->scratch);
  if (impl_->stream != nullptr) (void)cudaStreamDestroy(impl_->stream);
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(Communicator* bootstrap,
                                                                     int cuda_ordinal) {
  const int rank = bootstrap != nullptr ? bootstrap->rank() : 0;
  const int world = bootstrap != nullptr ? bootstrap->world_size() : 1;
  // Rank 0's unique id, broadcast over the host path. A rank without a
  // usable GPU still takes part in the broadcast, then every rank agrees.
  int devices = 0;
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  Status usable = Status::Ok();
  if (counted != cudaSuccess) {
    usable =
        UnavailableError(std::string("NCCL backend: no GPU (") + cudaGetErrorString(counted) + ")");
  } else if (cuda_ordinal < 0 || cuda_ordinal >= devices) {
    usable = UnavailableError("NCCL backend: rank " + std::to_string(rank) + " wants GPU " +
                              std::to_string(cuda_ordinal) + " and this node has " +
                              std::to_string(devices));
  }
  // The device and the stream before the agreement, so that a rank that
  // cannot make them says so instead of leaving the others in NCCL's init.
  // A blocking stream: ordered after the legacy default stream's work.
  auto impl = std::make_unique<Impl>();
  if (usable.ok()) usable = CudaStatus(cudaSetDevice(cuda_ordinal), "cudaSetDevice");
  if (usable.ok()) {
    usable =
        CudaStatus(cudaStreamCreateWithFlags(&impl->stream, cudaStreamDefault), "cudaStreamCreate");
  }
  std::unique_ptr<NcclCommunicator> c(
      new NcclCommunicator(rank, world, cuda_ordinal, std::move(impl)));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0 && usable.ok()) usable = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (bootstrap != nullptr) {
    TF_RETURN_IF_ERROR(bootstrap->Broadcast(&id, sizeof id, 0));
    usable = AgreeOnStatus(*bootstrap, usable);  // no rank joins a group one has left
  }
  TF_RETURN_IF_ERROR(usable);
  TF_RETURN_IF_ERROR(
      NcclStatus(ncclCommInitRank(&c->impl_->comm, world, id, rank), "ncclCommInitRank"));
  return c;
}

StatusOr<void*> NcclCommunicator::Scratch(size_t bytes) {
  if (impl_->scratch_bytes >= bytes) return impl_->scratch;
  if (impl_->scratch != nullptr) {
    TF_RETURN_IF_ERROR(CudaStatus(cudaFree(impl_->scratch), "cudaFree"));
    impl_->scratch = nullptr;
    impl_->scratch_bytes = 0;
  }
  TF_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&impl_->scratch, bytes), "cudaMalloc (scratch)"));
  impl_->scratch_bytes = bytes;
  return impl_->scratch;
}

Status NcclCommunicator::Check(const Partition& partition, const char* op) const {
  if (partition.world() != world_) {
    return InvalidArgumentError(std::string("NCCL ") + op + ": a partition of " +
                                std::to_string(partition.world()) + " parts over " +
                                std::to_string(world_) + " ranks");
  }
  TF_RETURN_IF_ERROR(Usable());
  return CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice");
}

Status NcclCommunicator::ReduceScatterSum(const void* send, DType send_dtype,
                                          const Partition& partition, float* recv,
                                          bool accumulate) {
  TF_RETURN_IF_ERROR(Check(partition, "reduce-scatter"));
  TF_ASSIGN_OR_RETURN(nccl_detail::Element element, ElementOf(send_dtype));
  const size_t total = partition.total();
  const size_t mine = partition.size(rank_);
  // Scratch: the widened contribution, then (accumulating) this rank's sum.
  const size_t wide_bytes = total * sizeof(float);
  TF_ASSIGN_OR_RETURN(void* scratch, Scratch(wide_bytes + (accumulate ? mine : 0) * sizeof(float)));
  auto* wide = static_cast<float*>(scratch);
  float* sum = accumulate ? wide + total : recv;
  cudaStream_t s = impl_->stream;
  TF_RETURN_IF_ERROR(
      CudaStatus(nccl_detail::WidenToFloat(send, element, total, wide, s), "widening to fp32"));
  TF_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  for (int r = 0; r < world_; ++r) {
    if (partition.size(r) == 0) continue;
    ncclResult_t issued = ncclReduce(wide + partition.begin(r), r == rank_ ? sum : nullptr,
                                     partition.size(r), ncclFloat32, ncclSum, r, impl_->comm, s);
    if (issued != ncclSuccess) {
      (void)ncclGroupEnd();
      return NcclStatus(issued, "ncclReduce");
    }
  }
  TF_RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), "ncclGroupEnd (reduce-scatter)"));
  if (accumulate) {
    TF_RETURN_IF_ERROR(CudaStatus(nccl_detail::AddInto(recv, sum, mine, s), "accumulating"));
  }
  return Sync("reduce-scatter");
}

Status NcclCommunicator::AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                                   void* recv) {
  TF_RETURN_IF_ERROR(Check(partition, "all-gather"));
  auto* out = static_cast<char*>(recv);
  cudaStream_t s = impl_->stream;
  // This rank's part into place first (send may be recv's own part).
  const size_t mine = partition.size(rank_) * elem_bytes;
  char* own = out + partition.begin(rank_) * elem_bytes;
  if (mine > 0 && own != send) {
    TF_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(own, send, mine, cudaMemcpyDeviceToDevice, s),
                                  "all-gather copy"));
  }
  TF_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  for (int r = 0; r < world_; ++r) {
    const size_t bytes = partition.size(r) * elem_bytes;
    if (bytes == 0) continue;
    char* part = out + partition.begin(r) * elem_bytes;
    ncclResult_t issued = ncclBroadcast(part, part, bytes, ncclUint8, r, impl_->comm, s);
    if (issued != ncclSuccess) {
      (void)ncclGroupEnd();
      return NcclStatus(issued, "ncclBroadcast");
    }
  }
  TF_RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), "ncclGroupEnd (all-gather)"));
  return Sync("all-gather");
}

Status NcclCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= world_) {
    return InvalidArgumentError("NCCL broadcast from rank " + std::to_string(root) + " of " +
                                std::to_string(world_));
  }
  TF_RETURN_IF_ERROR(Usable());
  TF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  if (bytes == 0) return Status::Ok();
  TF_RETURN_IF_ERROR(
      NcclStatus(ncclBroadcast(data, data, bytes, ncclUint8, root, impl_->comm, impl_->stream),
                 "ncclBroadcast"));
  return Sync("broadcast");
}

Status NcclCommunicator::RawCollective(RawOp op, const float* send, float* recv, size_t count) {
  const auto world = static_cast<size_t>(world_);
  if (count % world != 0) {
    return InvalidArgumentError("NCCL raw collective: " + std::to_string(count) +
                                " floats are not a multiple of " + std::to_string(world_) +
                                " ranks");
  }
  TF_RETURN_IF_ERROR(Usable());
  TF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  ncclResult_t r = ncclSuccess;
  switch (op) {
    case RawOp::kAllReduce:
      r = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, impl_->comm, impl_->stream);
      break;
    case RawOp::kReduceScatter:
      r = ncclReduceScatter(send, recv, count / world, ncclFloat32, ncclSum, impl_->comm,
                            impl_->stream);
      break;
    case RawOp::kAllGather:
      r = ncclAllGather(send, recv, count / world, ncclFloat32, impl_->comm, impl_->stream);
      break;
  }
  TF_RETURN_IF_ERROR(NcclStatus(r, "NCCL's own collective"));
  return Sync("NCCL's own collective");
}

Status NcclCommunicator::Barrier() {
  TF_RETURN_IF_ERROR(Usable());
  TF_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  TF_ASSIGN_OR_RETURN(void* scratch, Scratch(sizeof(float)));
  TF_RETURN_IF_ERROR(NcclStatus(
      ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, impl_->comm, impl_->stream),
      "ncclAllReduce (barrier)"));
  return Sync("barrier");
}

}  // namespace tierflow::comm
