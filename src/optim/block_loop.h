// The skeleton every CPU optimizer kernel here shares: fixed chunks run as
// oneTBB tasks, each walked in L1-sized blocks that Eigen vectorizes.
//
// Why this shape: the step is memory-bound, so each parameter must be read
// and written once. A block of kBlockElems elements of every stream stays in
// L1 while Eigen makes several cheap passes over it (widen gradients, update
// moments, update weights, narrow the copy), so DRAM sees one pass. Chunk and
// block boundaries are fixed offsets from the span's start, never derived
// from the thread count, and the library is built with -ffp-contract=off and
// EIGEN_FAST_MATH=0 so the vector body and the scalar tail round identically:
// every element's result depends only on its inputs, hence results are
// bit-identical for any number of threads and any alignment.
//
// Internal header: include only from src/optim.
#pragma once

#include <Eigen/Core>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <atomic>
#include <cmath>
#include <cstddef>

#include "optim/optim_spans.h"
#include "tierflow/dtype.h"

namespace tierflow::optim_internal {

static_assert(sizeof(Eigen::bfloat16) == sizeof(bf16) && sizeof(Eigen::half) == sizeof(fp16),
              "tierflow's 16-bit storage types must match Eigen's bit layouts");

// One oneTBB task (see optim_spans.h): large enough to amortize scheduling,
// small enough to balance a few-million-element sub-group.
inline constexpr size_t kChunkElems = kOptimChunkElems;
// One L1 working set: 2 KiB per fp32 stream, ~10 KiB for the widest kernel.
inline constexpr size_t kBlockElems = 512;
static_assert(kChunkElems % kBlockElems == 0);

using FloatArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstFloatArrayMap = Eigen::Map<const Eigen::ArrayXf>;
template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Correctly rounded sqrt, vectorized. Eigen 3.4 marks its AVX-512 float sqrt
// as vectorizable only under EIGEN_FAST_MATH, where it is rsqrt14 plus one
// Newton step (not correctly rounded, and different from the scalar tail).
// This library is built with EIGEN_FAST_MATH=0, where Eigen's psqrt is the
// exact instruction on every instruction set; this functor lets Eigen use it.
struct ExactSqrtOp {
  float operator()(float x) const { return std::sqrt(x); }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    return Eigen::internal::psqrt(x);
  }
};

// A block-local fp32 scratch buffer (the widened, scaled gradients).
struct alignas(64) BlockBuffer {
  float data[kBlockElems];
};

// Calls block_fn(begin, len) for consecutive blocks covering [0, n): chunks
// in parallel (one task per chunk), blocks within a chunk in order. Returns
// true when any block_fn returned true (e.g. "saw a non-finite gradient").
// block_fn must be safe to call concurrently for disjoint ranges.
template <typename BlockFn>
bool ParallelForBlocks(size_t n, const BlockFn& block_fn) {
  if (n == 0) return false;
  const size_t num_chunks = (n + kChunkElems - 1) / kChunkElems;
  std::atomic<bool> any{false};
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<size_t>& chunks) {
        bool chunk_any = false;
        for (size_t c = chunks.begin(); c < chunks.end(); ++c) {
          const size_t chunk_end = std::min(n, (c + 1) * kChunkElems);
          for (size_t b = c * kChunkElems; b < chunk_end; b += kBlockElems) {
            chunk_any |= block_fn(b, std::min(kBlockElems, chunk_end - b));
          }
        }
        if (chunk_any) any.store(true, std::memory_order_relaxed);
      },
      tbb::simple_partitioner());
  return any.load(std::memory_order_relaxed);
}

// Writes grads[begin, begin+len) widened to fp32 and multiplied by `scale`
// into dst (len <= kBlockElems). Widening is exact; the product rounds once.
inline void LoadScaledGrads(const void* grads, DType dtype, size_t begin, size_t len, float scale,
                            float* dst) {
  FloatArrayMap out(dst, static_cast<Eigen::Index>(len));
  const auto count = static_cast<Eigen::Index>(len);
  switch (dtype) {
    case DType::kF32:
      out = ConstFloatArrayMap(static_cast<const float*>(grads) + begin, count) * scale;
      return;
    case DType::kBF16:
      out = ConstArrayMap<Eigen::bfloat16>(static_cast<const Eigen::bfloat16*>(grads) + begin,
                                           count)
                .cast<float>() *
            scale;
      return;
    case DType::kF16:
      out = ConstArrayMap<Eigen::half>(static_cast<const Eigen::half*>(grads) + begin, count)
                .cast<float>() *
            scale;
      return;
  }
}

// Writes src[0, len) to out[begin, begin+len) in `dtype`, rounding to nearest
// even (NaN stays NaN, Inf stays Inf; NaN payloads are not preserved).
inline void StoreNarrowed(const float* src, void* out, DType dtype, size_t begin, size_t len) {
  const auto count = static_cast<Eigen::Index>(len);
  ConstFloatArrayMap in(src, count);
  switch (dtype) {
    case DType::kF32:
      FloatArrayMap(static_cast<float*>(out) + begin, count) = in;
      return;
    case DType::kBF16:
      ArrayMap<Eigen::bfloat16>(static_cast<Eigen::bfloat16*>(out) + begin, count) =
          in.cast<Eigen::bfloat16>();
      return;
    case DType::kF16:
      ArrayMap<Eigen::half>(static_cast<Eigen::half*>(out) + begin, count) =
          in.cast<Eigen::half>();
      return;
  }
}

// True when some element of the (L1-resident) block is Inf or NaN: x * 0 is
// NaN exactly for those, and a sum containing a NaN is NaN.
inline bool HasNonFinite(const float* block, size_t len) {
  const float probe = (ConstFloatArrayMap(block, static_cast<Eigen::Index>(len)) * 0.0f).sum();
  return probe != probe;
}

}  // namespace tierflow::optim_internal

#if EIGEN_FAST_MATH
#error "src/optim must be compiled with EIGEN_FAST_MATH=0 (exact sqrt); see its CMakeLists.txt"
#endif

namespace Eigen::internal {
template <>
struct functor_traits<tierflow::optim_internal::ExactSqrtOp> {
  enum { Cost = 5 * NumTraits<float>::MulCost, PacketAccess = packet_traits<float>::Vectorizable };
};
}  // namespace Eigen::internal
