#include "comm/host_memory_device_comm.h"

#include <string>

namespace tierflow::comm {

StatusOr<std::unique_ptr<HostMemoryDeviceComm>> HostMemoryDeviceComm::Create(Communicator& host,
                                                                             DeviceKind device) {
  if (device == DeviceKind::kCuda) {
    return InvalidArgumentError(
        "collectives on a CUDA device's buffers need NCCL, not " + std::string(host.backend()) +
        " over host memory: build with NCCL, or reduce on the host (--collectives host)");
  }
  if (host.buffers() != BufferKind::kHost) {
    return InvalidArgumentError(std::string(host.backend()) +
                                " is not a communicator of host buffers");
  }
  return std::unique_ptr<HostMemoryDeviceComm>(new HostMemoryDeviceComm(host));
}

}  // namespace tierflow::comm
