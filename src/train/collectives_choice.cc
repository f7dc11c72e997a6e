#include "train/collectives_choice.h"

#include "comm/agree.h"
#include "comm/host_memory_device_comm.h"
#ifdef TIERFLOW_HAVE_NCCL
#include "comm/nccl_communicator.h"
#endif

namespace tierflow {

namespace {
#ifdef TIERFLOW_HAVE_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif
}  // namespace

StatusOr<bool> ResolveDeviceCollectives(const std::string& choice, DeviceKind device, int ranks) {
  if (choice == "host") return false;
  if (choice == "device") {
    if (device == DeviceKind::kCuda && !kHaveNccl) {
      return FailedPreconditionError(
          "--collectives device on a CUDA device needs NCCL, which this build lacks (CMake "
          "found no nccl.h and libnccl): rebuild where NCCL is installed, or use --collectives "
          "host");
    }
    return true;
  }
  // One rank has nothing to sum: the plain path (the device path over a
  // world of one is asked for by name).
  if (choice == "auto") return ranks > 1 && device == DeviceKind::kCuda && kHaveNccl;
  return InvalidArgumentError("collectives '" + choice +
                              "' is not valid; use auto, host or device");
}

StatusOr<std::unique_ptr<comm::Communicator>> MakeDeviceComm(comm::Communicator& host,
                                                             const Device& device, int local_rank,
                                                             const comm::PeerWatch& watch) {
  if (device.kind() != DeviceKind::kCuda) {
    TF_ASSIGN_OR_RETURN(std::unique_ptr<comm::HostMemoryDeviceComm> c,
                        comm::HostMemoryDeviceComm::Create(host, device.kind()));
    return std::unique_ptr<comm::Communicator>(std::move(c));
  }
#ifdef TIERFLOW_HAVE_NCCL
  auto nccl = comm::NcclCommunicator::Create(&host, local_rank);
  TF_RETURN_IF_ERROR(
      comm::AgreeOnStatus(host, nccl.status()).WithContext("NCCL for the ranks' GPUs"));
  (*nccl)->set_peer_watch(watch);
  return std::unique_ptr<comm::Communicator>(std::move(nccl).value());
#else
  (void)local_rank;
  (void)watch;
  return FailedPreconditionError(
      "collectives on CUDA devices need NCCL, which this build lacks: use --collectives host");
#endif
}

}  // namespace tierflow
