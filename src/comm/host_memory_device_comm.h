// A host-buffer communicator (the MPI backend) serving as the device one
// where "device memory" is host memory: the CPU device and the simulated
// accelerators, whose device buffers the host addresses directly. It lets
// the engine's device-collective path (gradients reduce-scattered on the
// device, weights all-gathered there; EngineOptions::device_comm) run, and
// be tested bit for bit against one process, on machines without GPUs: the
// sums are the MPI backend's, in rank order. On a CUDA device the device
// path needs NCCL (comm/nccl_communicator.h); Create refuses it here.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "tierflow/device.h"

namespace tierflow::comm {

class HostMemoryDeviceComm final : public Communicator {
 public:
  // `host`: a communicator of host buffers (not owned, outlives this one).
  // Errors: a CUDA device (its memory is not the host's), or `host` not
  // over host buffers.
  static StatusOr<std::unique_ptr<HostMemoryDeviceComm>> Create(Communicator& host,
                                                                DeviceKind device);

  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  BufferKind buffers() const override { return BufferKind::kDevice; }
  // The host backend's name, "-device-memory" added ("mpi-device-memory").
  std::string_view backend() const override { return name_; }

  Status ReduceScatterSum(const void* send, DType send_dtype, const Partition& partition,
                          float* recv, bool accumulate = false) override {
    return host_.ReduceScatterSum(send, send_dtype, partition, recv, accumulate);
  }
  Status AllGather(const void* send, size_t elem_bytes, const Partition& partition,
                   void* recv) override {
    return host_.AllGather(send, elem_bytes, partition, recv);
  }
  Status Broadcast(void* data, size_t bytes, int root) override {
    return host_.Broadcast(data, bytes, root);
  }
  Status Barrier() override { return host_.Barrier(); }

 private:
  explicit HostMemoryDeviceComm(Communicator& host)
      : host_(host), name_(std::string(host.backend()) + "-device-memory") {}
  Communicator& host_;
  std::string name_;
};

}  // namespace tierflow::comm
