// Chooses and creates a device: auto, cpu, cuda or sim.
#include <string>

#include "device/cpu/cpu_device.h"
#include "tierflow/device.h"

#ifdef TIERFLOW_HAVE_CUDA
#include <cuda_runtime.h>

#include "device/cuda/cuda_device.h"
#endif

namespace tierflow {

bool BuiltWithCuda() {
#ifdef TIERFLOW_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::string CudaUnavailableReason() {
#ifndef TIERFLOW_HAVE_CUDA
  return "this build has no CUDA backend (configured with TIERFLOW_CUDA=OFF or no nvcc found)";
#else
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorInsufficientDriver) {
    return "no usable CUDA driver (cudaErrorInsufficientDriver): this machine has no GPU driver";
  }
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    return "no CUDA device (cudaErrorNoDevice)";
  }
  if (err != cudaSuccess) {
    return std::string("CUDA is not usable: ") + cudaGetErrorName(err) + " (" +
           cudaGetErrorString(err) + ")";
  }
  return "";
#endif
}

StatusOr<std::unique_ptr<Device>> CreateDevice(const DeviceOptions& options) {
  bool want_cuda = false;
  switch (options.kind) {
    case DeviceChoice::kAuto:
      want_cuda = CudaUnavailableReason().empty();
      break;
    case DeviceChoice::kCpu:
      want_cuda = false;
      break;
    case DeviceChoice::kCuda:
      want_cuda = true;
      break;
    case DeviceChoice::kSim: {
      TF_RETURN_IF_ERROR(ValidateSimProfile(options.sim));
      const uint64_t capacity =
          options.memory_capacity_bytes != 0
              ? options.memory_capacity_bytes
              : static_cast<uint64_t>(options.sim.memory_gib * static_cast<double>(1ull << 30));
      return std::unique_ptr<Device>(std::make_unique<CpuDevice>(capacity, options.sim));
    }
  }
  if (want_cuda) {
    std::string why = CudaUnavailableReason();
    if (!why.empty()) {
      return UnavailableError("--device cuda: " + why + "; use --device cpu (or auto)");
    }
#ifdef TIERFLOW_HAVE_CUDA
    TF_ASSIGN_OR_RETURN(auto dev,
                        CudaDevice::Create(options.cuda_ordinal, options.memory_capacity_bytes));
    return std::unique_ptr<Device>(std::move(dev));
#endif
  }
  uint64_t capacity = options.memory_capacity_bytes != 0 ? options.memory_capacity_bytes
                                                         : CpuDevice::kDefaultCapacityBytes;
  return std::unique_ptr<Device>(std::make_unique<CpuDevice>(capacity));
}

}  // namespace tierflow
