// GEMM validation and its Kernel (cost, CPU and CUDA implementations).
#include "kernels/gemm.h"

#include <algorithm>
#include <string>

#include "kernels/op_costs.h"
#include "kernels/ops_common.h"

namespace tierflow {

GemmParams PackedGemm(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, DType ab_type,
                      DType c_type, int64_t batch) {
  // Leading dimensions of at least 1, as BLAS requires even for empty matrices.
  return GemmParams{.m = m,
                    .n = n,
                    .k = k,
                    .trans_a = trans_a,
                    .trans_b = trans_b,
                    .ab_type = ab_type,
                    .c_type = c_type,
                    .lda = std::max<int64_t>(trans_a ? m : k, 1),
                    .stride_a = m * k,
                    .ldb = std::max<int64_t>(trans_b ? k : n, 1),
                    .stride_b = k * n,
                    .ldc = std::max<int64_t>(n, 1),
                    .stride_c = m * n,
                    .batch = batch};
}

Status ValidateGemm(const GemmParams& p) {
  auto bad = [](const std::string& what) { return InvalidArgumentError("GEMM: " + what); };
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 1) {
    return bad("m, n, k must be >= 0 and batch >= 1");
  }
  if (p.c_type != p.ab_type && p.c_type != DType::kF32) {
    return bad("C must have the dtype of A and B, or f32");
  }
  int64_t a_cols = p.trans_a ? p.m : p.k;
  int64_t b_cols = p.trans_b ? p.k : p.n;
  if (p.lda < std::max<int64_t>(a_cols, 1))
    return bad("lda " + std::to_string(p.lda) + " < " + std::to_string(a_cols));
  if (p.ldb < std::max<int64_t>(b_cols, 1))
    return bad("ldb " + std::to_string(p.ldb) + " < " + std::to_string(b_cols));
  if (p.ldc < std::max<int64_t>(p.n, 1))
    return bad("ldc " + std::to_string(p.ldc) + " < " + std::to_string(p.n));
  if (p.m * p.n > 0 && p.c == nullptr) return bad("C is null");
  if (p.m * p.n * p.k > 0 && (p.a == nullptr || p.b == nullptr)) return bad("A or B is null");
  return Status::Ok();
}

Status Gemm(Stream& stream, const GemmParams& p) {
  TF_RETURN_IF_ERROR(ValidateGemm(p));
  return stream.Launch({"Gemm",
                        op_costs::Gemm(p.m, p.n, p.k, p.batch, DTypeSize(p.ab_type),
                                       DTypeSize(p.c_type), p.beta != 0.0f),
                        [p] { return GemmCpu(p); },
                        TF_CUDA_KERNEL(GemmCuda(cuda_stream_object, p))});
}

}  // namespace tierflow
