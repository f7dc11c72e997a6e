// The gradient statistics' loops (common/grad_stats.h), compiled once per
// instruction-set level (grad_stats_kernels.cc, see common/cpu_isa.h): the
// sum of squares of one chunk, one function per dtype, indexed by
// static_cast<int>(DType). optim's fused accumulate-and-sum
// (optim/grad_kernels.cc) adds its blocks with the same code
// (common/grad_stats_block.h), so the two give the same bits.
//
// Internal header: plain declarations only, so the per-level objects can
// include it without pulling in any inline function.
#pragma once

#include <cstddef>

#include "common/isa_tables.h"

namespace tierflow::grad_stats_internal {

// Gradient statistics of one chunk: the sum of squares in double and whether
// some element was Inf or NaN.
struct ChunkStats {
  double sum_squares;
  bool non_finite;
};

// The statistics are summed in blocks of kStatsBlockElems counted from the
// chunk's first element (begin): each block in fp32 over 16 lanes (element
// begin + 16 * k + l adds to lane l, k ascending), the lanes added in a fixed
// tree (simd.h SumTree16), the block's sum added to the chunk's double sum.
// A block whose fp32 sum is not finite while its elements are is summed
// again in double, element by element.
inline constexpr size_t kStatsBlockElems = 64;

// Statistics of grads[begin, end).
using SumSquaresFn = ChunkStats (*)(const void* grads, size_t begin, size_t end);

struct GradStatsKernels {
  SumSquaresFn sum_squares[3];  // [dtype]
};

}  // namespace tierflow::grad_stats_internal

TF_DECLARE_ISA_TABLES(grad_stats_internal::GradStatsKernels, kGradStatsKernels)
