// GEMM on either device: C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b],
// row-major, bf16/fp16/fp32 storage, fp32 accumulation, strided batches.
//
// Shapes (row-major, leading dimensions in elements):
//   op(A): (m, k)   A stored (m, k) with lda >= k, or (k, m) with lda >= m if trans_a
//   op(B): (k, n)   B stored (k, n) with ldb >= n, or (n, k) with ldb >= k if trans_b
//   C:     (m, n)   ldc >= n
// A and B must have the same dtype (cuBLAS's rule); C may be that dtype or f32.
#pragma once

#include <cstdint>

#include "tierflow/device.h"
#include "tierflow/dtype.h"

namespace tierflow {

struct GemmParams {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType ab_type = DType::kF32;
  DType c_type = DType::kF32;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;  // stride between batches, elements
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// Fills lda/ldb/ldc with the tight values for the shapes and strides for packed batches.
GemmParams PackedGemm(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, DType ab_type,
                      DType c_type, int64_t batch = 1);

// Checks shapes, leading dimensions and dtype combination.
Status ValidateGemm(const GemmParams& p);

// Enqueues the GEMM on `stream` (its device's implementation). Pointers are device memory.
Status Gemm(Stream& stream, const GemmParams& p);

// Runs now on the calling thread, host pointers: Eigen + oneTBB, deterministic
// for any thread count (fixed row blocks, each computed by one task).
Status GemmCpu(const GemmParams& p);

// Plain triple loop with double accumulation: the reference for every GEMM.
Status GemmReference(const GemmParams& p);

#ifdef TIERFLOW_HAVE_CUDA
// cuBLAS (cublasGemmStridedBatchedEx, fp32 compute) on a CUDA stream.
Status GemmCuda(Stream& stream, const GemmParams& p);
#endif

}  // namespace tierflow
