// The sum of squares of gradients in blocks, for the per-level objects only
// (it includes common/simd.h): common/grad_stats_kernels.cc sums plain
// gradients with it, optim/grad_kernels.cc accumulates and sums in one pass.
// One copy of the code, so GradStats and AccumulateGradsWithStats give the
// same bits. Blocks of kStatsBlockElems whose 16-lane order is the same at
// every vector width (AVX-512: one register, AVX2: two, SSE2: four).
//
// Everything here lives in the level's namespace inside an anonymous
// namespace, like common/simd.h.
#pragma once

#include "common/grad_stats_kernels.h"
#include "common/simd.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

using grad_stats_internal::ChunkStats;
using grad_stats_internal::kStatsBlockElems;

constexpr size_t kVectorsPerBlock = kStatsBlockElems / kLanes;
static_assert(kStatsBlockElems % 16 == 0 && kVectorsPerBlock % kRegsPer16 == 0);

TF_SIMD_INLINE bool IsFinite(float x) {
  return (__builtin_bit_cast(uint32_t, x) & 0x7f800000u) != 0x7f800000u;
}

// acc + g as AddScaled(acc, -1, g) (common/simd.h): the same sum, and when
// both are NaN the result is acc's NaN at every level.
TF_SIMD_INLINE VF AccumulateOne(VF acc, VF g, VF neg_one) { return AddScaled(acc, neg_one, g); }

// One full block: values x[e] for e in [0, kStatsBlockElems) are the widened
// gradients, or (acc != null) the accumulated acc[e] = g[e] or acc[e] + g[e],
// stored back. Writes the values to `values` when it is not null. Returns the
// fp32 sum of squares: element e adds to lane e % 16, lanes in SumTree16 order.
template <Elem G>
TF_SIMD_INLINE float BlockSumSquares(float* acc, const Storage<G>* grads, bool first,
                                     float* values) {
  VF lanes[kRegsPer16];
  for (size_t r = 0; r < kRegsPer16; ++r) lanes[r] = Zero();
  const VF neg_one = Opaque(Set1(-1.0f));
#pragma GCC unroll 16
  for (size_t j = 0; j < kVectorsPerBlock; ++j) {
    VF x = Load<G>(grads + j * kLanes);
    if (acc != nullptr) {
      if (!first) x = AccumulateOne(LoadF32(acc + j * kLanes), x, neg_one);
      StoreF32(acc + j * kLanes, x);
    }
    if (values != nullptr) StoreF32(values + j * kLanes, x);
    lanes[j % kRegsPer16] = Add(lanes[j % kRegsPer16], Mul(x, x));
  }
  return SumTree16(lanes);
}

// Adds one block (len <= kStatsBlockElems elements at acc/grads) to `stats`.
// A short block goes through the same code on zero-filled values (a zero adds
// nothing to a sum of squares). When the fp32 sum is not finite the block's
// values decide: some Inf or NaN -> non_finite; otherwise the squares
// overflowed fp32 and the block is summed again in double.
template <Elem G>
TF_SIMD_INLINE void AddBlock(float* acc, const Storage<G>* grads, size_t len, bool first,
                             ChunkStats* stats) {
  float block_sum;
  float* acc_block = acc;
  const Storage<G>* grad_block = grads;
  float acc_copy[kStatsBlockElems];
  Storage<G> grad_copy[kStatsBlockElems];
  const bool partial = len < kStatsBlockElems;
  if (partial) {
    for (size_t e = 0; e < kStatsBlockElems; ++e) {
      grad_copy[e] = e < len ? LoadOne(grads + e) : Storage<G>{};
      if (acc != nullptr) acc_copy[e] = e < len ? LoadOne(acc + e) : 0.0f;
    }
    grad_block = grad_copy;
    if (acc != nullptr) acc_block = acc_copy;
  }
  block_sum = BlockSumSquares<G>(acc_block, grad_block, first, nullptr);
  if (partial && acc != nullptr) {
    for (size_t e = 0; e < len; ++e) StoreOne(acc + e, acc_copy[e]);
  }
  if (IsFinite(block_sum)) {
    stats->sum_squares += static_cast<double>(block_sum);
    return;
  }
  // The block's values again: acc holds them now; plain gradients are widened again.
  float values[kStatsBlockElems];
  if (acc != nullptr) {
    for (size_t e = 0; e < len; ++e) values[e] = LoadOne(acc + e);
  } else {
    BlockSumSquares<G>(nullptr, grad_block, false, values);
  }
  for (size_t e = 0; e < len; ++e) {
    if (!IsFinite(values[e])) {
      stats->non_finite = true;
      return;
    }
  }
  for (size_t e = 0; e < len; ++e) {
    stats->sum_squares += static_cast<double>(values[e]) * static_cast<double>(values[e]);
  }
}

// Statistics of [begin, end) in blocks from begin; acc as in BlockSumSquares.
template <Elem G>
ChunkStats ChunkSumSquares(float* acc, const void* grads_bytes, size_t begin, size_t end,
                           bool first) {
  const Storage<G>* grads = static_cast<const Storage<G>*>(grads_bytes);
  ChunkStats stats{0.0, false};
  for (size_t b = begin; b < end; b += kStatsBlockElems) {
    const size_t len = end - b < kStatsBlockElems ? end - b : kStatsBlockElems;
    AddBlock<G>(acc != nullptr ? acc + b : nullptr, grads + b, len, first, &stats);
  }
  return stats;
}

}  // namespace
}  // namespace tierflow::TIERFLOW_ISA_NS
