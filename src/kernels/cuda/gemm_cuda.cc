// GEMM on the CUDA device through cuBLAS: row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so A and B swap places in the call.
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "kernels/gemm.h"

namespace tierflow {
namespace {

cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

}  // namespace

Status GemmCuda(Stream& stream, const GemmParams& p) {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  if (cuda_stream == nullptr) return InvalidArgumentError("GemmCuda: not a CUDA stream");
  if (p.m == 0 || p.n == 0) return Status::Ok();
  TF_ASSIGN_OR_RETURN(cublasHandle_t handle, cuda_stream->Cublas());
  const float alpha = p.alpha, beta = p.beta;
  TF_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      handle, p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(p.n), static_cast<int>(p.m), static_cast<int>(p.k), &alpha, p.b,
      CudaType(p.ab_type), static_cast<int>(p.ldb), p.stride_b, p.a, CudaType(p.ab_type),
      static_cast<int>(p.lda), p.stride_a, &beta, p.c, CudaType(p.c_type), static_cast<int>(p.ldc),
      p.stride_c, static_cast<int>(p.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

}  // namespace tierflow
