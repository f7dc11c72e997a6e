// The skeleton every CPU optimizer kernel here shares: fixed chunks run as
// oneTBB tasks, each walked in L1-sized blocks that Eigen vectorizes.
//
// Why this shape: the step is memory-bound, so each parameter must be read
// and written once. A block of kBlockElems elements of every stream stays in
// L1 while Eigen makes several cheap passes over it (widen gradients, update
// moments, update weights, narrow the copy), so DRAM sees one pass, and the
// arithmetic stays cheaper than the memory traffic; the skeleton prefetches
// a few blocks ahead so DRAM stays busy while the core divides. Chunk and
// block boundaries are fixed offsets from the span's start, never derived
// from the thread count, and the library is built with -ffp-contract=off and
// EIGEN_FAST_MATH=0 so the vector body and the scalar tail round identically:
// every element's result depends only on its inputs, hence results are
// bit-identical for any number of threads and any alignment.
//
// Internal header: include only from src/optim.
#pragma once

// Eigen 3.4.0 never enables its F16C fp16 conversions under GCC (its test
// reads EIGEN_COMP_CLANG, which is defined as 0 there), leaving fp16 <-> fp32
// to a slow bit-twiddling emulation. Enable them when the instruction set
// has F16C; both paths round identically. Must precede the first Eigen include.
#if defined(__F16C__) && !defined(EIGEN_HAS_FP16_C)
#ifdef EIGEN_CORE_H
#error "include optim/block_loop.h before any Eigen header"
#endif
#define EIGEN_HAS_FP16_C
#endif

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <Eigen/Core>

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
// One block: 64 elements, 256 bytes per fp32 stream. Full blocks have this
// size at compile time, so Eigen emits straight-line vector code with no
// alignment peeling, and a block's few passes (~10 instructions per vector)
// fit the out-of-order window together: the next block's moment updates
// overlap this block's sqrt and divide, which set the pace. (Measured: 512-
// element dynamic blocks cost ~1.5 cycles/element, 64-128 fixed ~1.07, the
// same as one hand-fused loop; at 64M parameters 64 kept DRAM busier than
// 128, and 256 clearly less.) Only the last block of a span is dynamic.
inline constexpr int kBlockElems = 64;
static_assert(kChunkElems % kBlockElems == 0);

// Kernels are written once over the block size N: kBlockElems, or
// Eigen::Dynamic for the ragged last block of a span.
template <int N>
using FloatBlock = Eigen::Map<Eigen::Array<float, N, 1>>;
template <int N>
using ConstFloatBlock = Eigen::Map<const Eigen::Array<float, N, 1>>;
template <typename T, int N>
using Block = Eigen::Map<Eigen::Array<T, N, 1>>;
template <typename T, int N>
using ConstBlock = Eigen::Map<const Eigen::Array<T, N, 1>>;

// Correctly rounded sqrt, vectorized. Eigen 3.4 marks its AVX-512 float sqrt
// as vectorizable only under EIGEN_FAST_MATH, where it is rsqrt14 plus one
// Newton step (not correctly rounded, and different from the scalar tail).
// This library is built with EIGEN_FAST_MATH=0, where Eigen's psqrt is the
// exact instruction on every instruction set; this functor lets Eigen use it.
struct ExactSqrtOp {
  float operator()(float x) const { return std::sqrt(x); }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    // GCC 12 flags the self-initialised _mm512_undefined_ps() inside
    // _mm512_sqrt_ps as uninitialised: a false positive in its own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
    return Eigen::internal::psqrt(x);
#pragma GCC diagnostic pop
  }
};

// A block-local fp32 scratch buffer (e.g. the widened, scaled gradients).
struct alignas(64) BlockBuffer {
  float data[kBlockElems];
};

// How far ahead of the block being computed the skeleton asks for the
// spans' cache lines. The step's sqrt and divide chains fill the core's
// out-of-order window, so the hardware prefetchers alone keep fewer DRAM
// requests in flight than a light kernel would; explicit prefetches retire at
// once and keep them coming. Tuned on the 64M-parameter step (see
// tools/bench_adam.cc: on the 2-core development VM the step went from
// ~0.85 to ~0.92 of the probe); the bandwidth probe uses the same skeleton
// and so the same prefetches. 512 elements = 8 blocks = 2 KiB per fp32 stream.
inline constexpr size_t kPrefetchAheadElems = 512;

// Asks for the cache lines of [begin, end) of every stream of `spans`: the
// in-place fp32 arrays for writing, the gradients for reading.
inline void PrefetchStreams(const OptimSpans& spans, size_t begin, size_t end) {
  constexpr size_t kLineBytes = 64;
  for (const float* state : {spans.params, spans.exp_avg, spans.exp_avg_sq}) {
    if (state == nullptr) continue;
    const char* first = reinterpret_cast<const char*>(state + begin);
    const char* last = reinterpret_cast<const char*>(state + end);
    for (const char* line = first; line < last; line += kLineBytes) __builtin_prefetch(line, 1);
  }
  const size_t grad_bytes = DTypeSize(spans.grad_dtype);
  const char* grads = static_cast<const char*>(spans.grads);
  for (size_t offset = begin * grad_bytes; offset < end * grad_bytes; offset += kLineBytes) {
    __builtin_prefetch(grads + offset, 0);
  }
}

// Calls block_fn.template operator()<N>(begin, len) for consecutive blocks
// covering [0, spans.n): N = kBlockElems for full blocks, Eigen::Dynamic for
// the last one when it is shorter. Chunks run in parallel (one oneTBB task
// each), blocks within a chunk in order, each after a prefetch of the block
// kPrefetchAheadElems further on in the same chunk. Returns true when any
// call returned true (e.g. "saw a non-finite gradient"). block_fn must be
// safe to call concurrently for disjoint ranges.
template <typename BlockFn>
bool ParallelForBlocks(const OptimSpans& spans, const BlockFn& block_fn) {
  const size_t n = spans.n;
  if (n == 0) return false;
  const size_t num_chunks = (n + kChunkElems - 1) / kChunkElems;
  constexpr size_t ahead = kPrefetchAheadElems;
  std::atomic<bool> any{false};
  tbb::parallel_for(
      tbb::blocked_range<size_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<size_t>& chunks) {
        bool chunk_any = false;
        for (size_t c = chunks.begin(); c < chunks.end(); ++c) {
          const size_t chunk_end = std::min(n, (c + 1) * kChunkElems);
          size_t b = c * kChunkElems;
          for (; b + kBlockElems <= chunk_end; b += kBlockElems) {
            if (b + ahead < chunk_end) {
              PrefetchStreams(spans, b + ahead, std::min(chunk_end, b + ahead + kBlockElems));
            }
            chunk_any |= block_fn.template operator()<kBlockElems>(b, kBlockElems);
          }
          if (b < chunk_end) {
            chunk_any |= block_fn.template operator()<Eigen::Dynamic>(
                b, static_cast<Eigen::Index>(chunk_end - b));
          }
        }
        if (chunk_any) any.store(true, std::memory_order_relaxed);
      },
      tbb::simple_partitioner());
  return any.load(std::memory_order_relaxed);
}

// Eigen 3.4 does not vectorize .cast<>() inside array expressions (its cast
// functor has no packet path), so 16-bit <-> fp32 conversions use Eigen's
// packet conversions directly: F16C / AVX-512 for fp16, integer rounding for
// bf16, whatever the build's instruction set offers. Both directions are
// exact or round to nearest even, in the vector body and the scalar tail
// alike (NaN payloads aside).
//
// Packet code below names Eigen's packet types as template arguments; GCC
// warns that their vector attributes are ignored there, which is harmless
// (Eigen silences the same warning in its own headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"

template <typename Half>
inline constexpr bool kHasPacketCast =
    Eigen::internal::packet_traits<Half>::Vectorizable&& Eigen::internal::unpacket_traits<
        typename Eigen::internal::packet_traits<Half>::type>::size ==
    Eigen::internal::unpacket_traits<Eigen::internal::packet_traits<float>::type>::size;

// dst[i] = float(src[i]) * scale for i in [0, len).
template <typename Half>
inline void WidenScaled(const Half* src, float* dst, Eigen::Index len, float scale) {
  Eigen::Index done = 0;
  if constexpr (kHasPacketCast<Half>) {
    namespace ei = Eigen::internal;
    using PacketF = typename ei::packet_traits<float>::type;
    using PacketH = typename ei::packet_traits<Half>::type;
    constexpr Eigen::Index kLanes = ei::unpacket_traits<PacketF>::size;
    const PacketF scale_packet = ei::pset1<PacketF>(scale);
    done = len - len % kLanes;
    for (Eigen::Index i = 0; i < done; i += kLanes) {
      ei::pstoreu(dst + i, ei::pmul(ei::pcast<PacketH, PacketF>(ei::ploadu<PacketH>(src + i)),
                                    scale_packet));
    }
  }
  for (Eigen::Index i = done; i < len; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}

// dst[i] = Half(src[i]), rounded to nearest even, for i in [0, len).
template <typename Half>
inline void Narrow(const float* src, Half* dst, Eigen::Index len) {
  Eigen::Index done = 0;
  if constexpr (kHasPacketCast<Half>) {
    namespace ei = Eigen::internal;
    using PacketF = typename ei::packet_traits<float>::type;
    using PacketH = typename ei::packet_traits<Half>::type;
    constexpr Eigen::Index kLanes = ei::unpacket_traits<PacketF>::size;
    done = len - len % kLanes;
    for (Eigen::Index i = 0; i < done; i += kLanes) {
      ei::pstoreu(dst + i, ei::pcast<PacketF, PacketH>(ei::ploadu<PacketF>(src + i)));
    }
  }
  for (Eigen::Index i = done; i < len; ++i) dst[i] = Half(src[i]);
}

#pragma GCC diagnostic pop

// Writes grads[begin, begin+len) widened to fp32 and multiplied by `scale`
// into dst. Widening is exact; the product rounds once.
template <int N>
inline void LoadScaledGrads(const void* grads, DType dtype, size_t begin, Eigen::Index len,
                            float scale, float* dst) {
  switch (dtype) {
    case DType::kF32:
      FloatBlock<N>(dst, len) =
          ConstFloatBlock<N>(static_cast<const float*>(grads) + begin, len) * scale;
      return;
    case DType::kBF16:
      WidenScaled(static_cast<const Eigen::bfloat16*>(grads) + begin, dst, len, scale);
      return;
    case DType::kF16:
      WidenScaled(static_cast<const Eigen::half*>(grads) + begin, dst, len, scale);
      return;
  }
}

// Writes src[0, len) to out[begin, begin+len) in `dtype`, rounding to nearest
// even (NaN stays NaN, Inf stays Inf; NaN payloads are not preserved).
template <int N>
inline void StoreNarrowed(const float* src, void* out, DType dtype, size_t begin,
                          Eigen::Index len) {
  switch (dtype) {
    case DType::kF32:
      FloatBlock<N>(static_cast<float*>(out) + begin, len) = ConstFloatBlock<N>(src, len);
      return;
    case DType::kBF16:
      Narrow(src, static_cast<Eigen::bfloat16*>(out) + begin, len);
      return;
    case DType::kF16:
      Narrow(src, static_cast<Eigen::half*>(out) + begin, len);
      return;
  }
}

// True when some element of the (L1-resident) block is Inf or NaN: x * 0 is
// NaN exactly for those, and a sum containing a NaN is NaN.
template <int N>
inline bool HasNonFinite(const float* block, Eigen::Index len) {
  const float probe = (ConstFloatBlock<N>(block, len) * 0.0f).sum();
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
