// One check family for CUDA runtime and cuBLAS calls: a failing call becomes
// a Status naming the call, the error and file:line. Always on (not assert).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "tierflow/status.h"

namespace tierflow {

Status CudaStatus(cudaError_t err, const char* call, const char* file, int line);
Status CublasStatus(cublasStatus_t err, const char* call, const char* file, int line);

}  // namespace tierflow

#define TF_CUDA_RETURN_IF_ERROR(call)                                         \
  do {                                                                        \
    cudaError_t tf_cuda_err_ = (call);                                        \
    if (tf_cuda_err_ != cudaSuccess)                                          \
      return ::tierflow::CudaStatus(tf_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define TF_CUBLAS_RETURN_IF_ERROR(call)                                           \
  do {                                                                            \
    cublasStatus_t tf_cublas_err_ = (call);                                       \
    if (tf_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                  \
      return ::tierflow::CublasStatus(tf_cublas_err_, #call, __FILE__, __LINE__); \
  } while (0)
