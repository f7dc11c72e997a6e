// Where a data-parallel run's collectives go (TrainConfig::collectives) and
// the communicator of device buffers that serves the device path
// (EngineOptions::device_comm): NCCL on a CUDA device, MPI over the memory
// of the CPU device and the simulated accelerators (which the host
// addresses).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/peer_watch.h"
#include "tierflow/device.h"
#include "tierflow/status.h"

namespace tierflow {

// Whether the ranks sum the gradient and gather the weights on their
// devices: "device" yes, "host" no, "auto" where NCCL serves it (a CUDA
// device in a build with NCCL). "device" on a CUDA device in a build
// without NCCL is refused with what to do.
StatusOr<bool> ResolveDeviceCollectives(const std::string& choice, DeviceKind device);

// The device communicator beside `host` (every rank calls it: NCCL's
// creation is collective, and its outcome is agreed over `host`).
// `local_rank` picks this rank's GPU; `watch` bounds NCCL's waits on a
// dead peer (MPI's own waits already are).
StatusOr<std::unique_ptr<comm::Communicator>> MakeDeviceComm(comm::Communicator& host,
                                                             const Device& device, int local_rank,
                                                             const comm::PeerWatch& watch);

}  // namespace tierflow
