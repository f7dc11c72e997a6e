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

// Whether the engine takes the data-parallel path with the gradient summed
// and the weights gathered on the devices: "device" yes (with one rank, over
// a world of one: how one GPU checks it), "host" no, "auto" with several
// ranks where NCCL serves them (a CUDA device in a build with NCCL), never
// for one rank. `ranks` is the run's world size. train and plan both ask
// here, so the plan is of the path train takes. "device" on a CUDA device
// in a build without NCCL is refused with what to do.
StatusOr<bool> ResolveDeviceCollectives(const std::string& choice, DeviceKind device, int ranks);

// The device communicator beside `host` (every rank calls it: NCCL's
// creation is collective, and its outcome is agreed over `host`).
// `local_rank` picks this rank's GPU; `watch` bounds NCCL's waits on a
// dead peer (MPI's own waits already are).
StatusOr<std::unique_ptr<comm::Communicator>> MakeDeviceComm(comm::Communicator& host,
                                                             const Device& device, int local_rank,
                                                             const comm::PeerWatch& watch);

}  // namespace tierflow
