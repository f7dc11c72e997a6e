// GEMM on the CPU device: Eigen for the block product, oneTBB across fixed
// 64-row blocks of C, k summed in fixed panels (kGemmCpuKPanel). Half-precision
// inputs are widened to fp32 once per batch, so accumulation is fp32 as on
// cuBLAS with CUBLAS_COMPUTE_32F.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <Eigen/Core>

#include <algorithm>
#include <vector>

#include "common/half.h"
#include "kernels/gemm.h"

namespace tierflow {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using MutMap = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// Fixed, thread-count independent: each block of C is always computed by the
// same Eigen call with the same shapes, so results are bit-identical for any
// number of threads.
constexpr int64_t kRowBlock = 64;

// Returns an fp32 view of a (rows, cols) matrix with leading dimension ld,
// widening into `scratch` when the storage type is 16-bit.
ConstMap WidenedView(DType t, const void* base, int64_t rows, int64_t cols, int64_t ld,
                     std::vector<float>* scratch) {
  if (t == DType::kF32) {
    return ConstMap(static_cast<const float*>(base), rows, cols, Eigen::OuterStride<>(ld));
  }
  scratch->resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = static_cast<const char*>(base) + r * ld * DTypeSize(t);
    ConvertBuffer(t, row, DType::kF32, scratch->data() + r * cols, static_cast<size_t>(cols));
  }
  return ConstMap(scratch->data(), rows, cols, Eigen::OuterStride<>(cols));
}

}  // namespace

Status GemmCpu(const GemmParams& p) {
  TF_RETURN_IF_ERROR(ValidateGemm(p));
  if (p.m == 0 || p.n == 0) return Status::Ok();
  const size_t ab_size = DTypeSize(p.ab_type);
  const size_t c_size = DTypeSize(p.c_type);
  const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  std::vector<float> a_scratch, b_scratch;
  for (int64_t batch = 0; batch < p.batch; ++batch) {
    const void* a_base = static_cast<const char*>(p.a) + batch * p.stride_a * ab_size;
    const void* b_base = static_cast<const char*>(p.b) + batch * p.stride_b * ab_size;
    char* c_base = static_cast<char*>(p.c) + batch * p.stride_c * c_size;
    ConstMap a = WidenedView(p.ab_type, a_base, a_rows, a_cols, p.lda, &a_scratch);
    ConstMap b = WidenedView(p.ab_type, b_base, b_rows, b_cols, p.ldb, &b_scratch);
    const int64_t num_blocks = (p.m + kRowBlock - 1) / kRowBlock;
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, num_blocks, 1),
        [&](const tbb::blocked_range<int64_t>& range) {
          RowMatrix c_block;
          for (int64_t blk = range.begin(); blk < range.end(); ++blk) {
            const int64_t i0 = blk * kRowBlock;
            const int64_t rows = std::min(kRowBlock, p.m - i0);
            c_block.resize(rows, p.n);
            if (p.beta != 0.0f) {
              for (int64_t r = 0; r < rows; ++r) {
                ConvertBuffer(p.c_type, c_base + ((i0 + r) * p.ldc) * c_size, DType::kF32,
                              c_block.row(r).data(), static_cast<size_t>(p.n));
              }
              c_block *= p.beta;
            } else {
              c_block.setZero();
            }
            // k in fixed panels, in order (kGemmCpuKPanel's contract).
            for (int64_t k0 = 0; k0 < p.k; k0 += kGemmCpuKPanel) {
              const int64_t kp = std::min(kGemmCpuKPanel, p.k - k0);
              auto b_op = [&](const auto& a_panel) {
                if (p.trans_b)
                  c_block.noalias() += p.alpha * (a_panel * b.middleCols(k0, kp).transpose());
                else
                  c_block.noalias() += p.alpha * (a_panel * b.middleRows(k0, kp));
              };
              if (p.trans_a)
                b_op(a.block(k0, i0, kp, rows).transpose());
              else
                b_op(a.block(i0, k0, rows, kp));
            }
            for (int64_t r = 0; r < rows; ++r) {
              ConvertBuffer(DType::kF32, c_block.row(r).data(), p.c_type,
                            c_base + ((i0 + r) * p.ldc) * c_size, static_cast<size_t>(p.n));
            }
          }
        },
        tbb::simple_partitioner());
  }
  return Status::Ok();
}

}  // namespace tierflow
