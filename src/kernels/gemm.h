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

// The CPU GEMM's reduction panel: GemmCpu sums over k in panels of this many
// (k0 = 0, P, 2P, ...; the last may be shorter), one after another, each one
// Eigen product of fixed shape accumulated onto the fp32 C block. The
// contract this gives: splitting a GEMM's k at multiples of the panel into
// calls that accumulate (beta = 1, fp32 C) performs exactly the same fp32
// operations as the single call, so the result is bit-identical. The model's
// row tiles (TrainShape::mlp_tile_rows) rely on it for the weight gradients,
// whose k is the row count; BiasBackward's CPU sum reduces in the same panels.
// (cuBLAS gives no such promise: there a k-split sum differs in rounding.)
inline constexpr int64_t kGemmCpuKPanel = 256;

// Runs now on the calling thread, host pointers: Eigen + oneTBB, deterministic
// for any thread count (fixed 64-row blocks of C, each computed by one task;
// k in kGemmCpuKPanel panels).
Status GemmCpu(const GemmParams& p);

// Plain triple loop with double accumulation: the reference for every GEMM.
Status GemmReference(const GemmParams& p);

#ifdef TIERFLOW_HAVE_CUDA
// cuBLAS (cublasGemmStridedBatchedEx, fp32 compute) on a CUDA stream.
Status GemmCuda(Stream& stream, const GemmParams& p);
#endif

}  // namespace tierflow
