// CUDA and cuBLAS errors as Status values.
#include "device/cuda/cuda_check.h"

namespace tierflow {

Status CudaStatus(cudaError_t err, const char* call, const char* file, int line) {
  std::string msg = std::string(call) + " failed: " + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ") at " + file + ":" + std::to_string(line);
  if (err == cudaErrorMemoryAllocation) return OutOfMemoryError(std::move(msg));
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
    return UnavailableError(std::move(msg));
  }
  return InternalError(std::move(msg));
}

Status CublasStatus(cublasStatus_t err, const char* call, const char* file, int line) {
  std::string msg = std::string(call) + " failed: " + cublasGetStatusName(err) + " (" +
                    cublasGetStatusString(err) + ") at " + file + ":" + std::to_string(line);
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return OutOfMemoryError(std::move(msg));
  return InternalError(std::move(msg));
}

}  // namespace tierflow
