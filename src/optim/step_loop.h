// The loop every optimizer kernel of one instruction-set level runs (see
// optim/optim_kernels.h): one fused pass over [begin, end) that loads each
// element of every stream once, updates it in registers and stores it once.
//
// Only for the per-level objects (it includes common/simd.h); everything has
// internal linkage in the level's namespace.
#pragma once

#include <cstdint>

#include "common/simd.h"

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

// Copy-out kinds: 0 none, otherwise 1 + the Elem of the copy.
template <int O>
struct OutStorageOf {
  using type = Storage<static_cast<Elem>(O - 1)>;
};
template <>
struct OutStorageOf<0> {
  using type = float;  // never dereferenced
};
template <int O>
using OutStorage = typename OutStorageOf<O>::type;

#ifndef TF_STEP_UNROLL_VECTORS
#define TF_STEP_UNROLL_VECTORS 4
#endif
#ifndef TF_STEP_PREFETCH_ELEMS
#if TIERFLOW_ISA_LEVEL == 2
#define TF_STEP_PREFETCH_ELEMS 256
#else
#define TF_STEP_PREFETCH_ELEMS 512
#endif
#endif
#ifndef TF_STEP_STREAM_OUT
#define TF_STEP_STREAM_OUT 1
#endif

// Vectors per iteration of the main loop: a few independent vectors in
// flight, so the next vectors' loads and moment updates overlap the divide
// and square root of the previous ones; 4 at every width (8 spill AVX2's 16
// registers). Elements prefetched ahead of the iteration: 512 (2 KiB of each
// fp32 stream, 16 iterations) at AVX2 and SSE2, 256 (1 KiB, 4 iterations) at
// AVX-512, where 512 left the f32 copy out at 0.94 of the limit on Zen 5
// (docs/MEASUREMENTS.md) and AVX2 lost 3-6% at 256. The three knobs are
// compile-time only, for the ablations in docs/MEASUREMENTS.md ("Why the step fell
// short on Intel"); the defaults are what those measured best. The unroll is
// even since the copy out is stored in pairs (StorePair); the ablation's 1
// vector per iteration can no longer be built.
inline constexpr size_t kUnrollVectors = TF_STEP_UNROLL_VECTORS;
inline constexpr size_t kPrefetchElems = TF_STEP_PREFETCH_ELEMS;
inline constexpr bool kStreamOut = TF_STEP_STREAM_OUT != 0;

static_assert(kUnrollVectors % 2 == 0, "the copy out is stored in pairs of vectors");

// Puts the updated weights' copy out (kind O; nothing when 0): one vector at
// `p`, with a plain or (kStream) a non-temporal store.
template <int O, bool kStream>
TF_SIMD_INLINE void PutOut(OutStorage<O>* p, VF params) {
  if constexpr (O != 0) {
    constexpr Elem kOut = static_cast<Elem>(O - 1);
    if constexpr (kStream) {
      StoreStreaming<kOut>(p, params);
    } else {
      Store<kOut>(p, params);
    }
  }
}

// Calls op(state, grads) for each vector of [begin, end): `state` points at
// the vector's element in each of the K fp32 arrays (updated in place),
// `grads` at its gradients (Elem G); op returns the vector for the copy out,
// which is stored (a plain or, kStream, a non-temporal store) two vectors at
// a time in the main loop (StorePair). The last (end - begin) % kLanes
// elements are copied into zero-filled lanes and go through the same op, with
// a plain store.
// With kBackup, each vector of each state array is first copied to the same
// place in backup[k], with a non-temporal store (backup[k] + begin
// vector-aligned, see StepLoop).
template <int K, Elem G, int O, bool kStream, bool kBackup, typename Op>
TF_SIMD_INLINE void StepLoopStores(Op& op, float* const* state, float* const* backup,
                                   const void* grads_bytes, void* out_bytes, size_t begin,
                                   size_t end) {
  using GradT = Storage<G>;
  using OutT = OutStorage<O>;
  const GradT* grads = static_cast<const GradT*>(grads_bytes);
  OutT* out = static_cast<OutT*>(out_bytes);
  auto at = [&](size_t i) __attribute__((always_inline)) {
    float* s[K];
    for (int k = 0; k < K; ++k) s[k] = state[k] + i;
    if constexpr (kBackup) {
      for (int k = 0; k < K; ++k) StoreStreaming<Elem::kF32>(backup[k] + i, LoadF32(s[k]));
    }
    return op(s, grads + i);
  };
  size_t i = begin;
  constexpr size_t kStep = kUnrollVectors * kLanes;
  for (; i + kStep <= end; i += kStep) {
    if constexpr (kPrefetchElems > 0) {
      if (i + kPrefetchElems + kStep <= end) {
        for (int k = 0; k < K; ++k) {
          for (size_t b = 0; b < kStep * sizeof(float); b += 64) {
            __builtin_prefetch(reinterpret_cast<const char*>(state[k] + i + kPrefetchElems) + b, 1);
          }
        }
        for (size_t b = 0; b < kStep * sizeof(GradT); b += 64) {
          __builtin_prefetch(reinterpret_cast<const char*>(grads + i + kPrefetchElems) + b, 0);
        }
      }
    }
#pragma GCC unroll 16
    for (size_t u = 0; u < kUnrollVectors; u += 2) {
      const VF a = at(i + u * kLanes);
      const VF b = at(i + (u + 1) * kLanes);
      if constexpr (O != 0) {
        StorePair<static_cast<Elem>(O - 1), kStream>(out + i + u * kLanes, a, b);
      }
    }
  }
  for (; i + kLanes <= end; i += kLanes) {
    const VF p = at(i);
    if constexpr (O != 0) PutOut<O, kStream>(out + i, p);
  }
  if (i < end) {
    const size_t len = end - i;
    PartialLanes<float> lanes[K];
    float* s[K];
    for (int k = 0; k < K; ++k) {
      lanes[k].Fill(state[k] + i, len);
      if constexpr (kBackup) lanes[k].CopyOut(backup[k] + i, len);
      s[k] = lanes[k].v;
    }
    PartialLanes<GradT> g;
    g.Fill(grads + i, len);
    PartialLanes<OutT> o;
    PutOut<O, false>(o.v, op(s, g.v));
    for (int k = 0; k < K; ++k) lanes[k].CopyOut(state[k] + i, len);
    if constexpr (O != 0) o.CopyOut(out + i, len);
  }
}

// Elements from begin to the copy out's first element aligned for a streamed
// pair (kPairStreamBytes), or SIZE_MAX when no element of the copy starts
// such an address (it is not element-aligned).
template <int O>
TF_SIMD_INLINE size_t OutHead(const void* out_bytes, size_t begin) {
  using OutT = OutStorage<O>;
  constexpr size_t kAlign = kPairStreamBytes<static_cast<Elem>(O - 1)>;
  const auto address = reinterpret_cast<uintptr_t>(static_cast<const OutT*>(out_bytes) + begin);
  if (address % sizeof(OutT) != 0) return SIZE_MAX;
  return (kAlign - address % kAlign) % kAlign / sizeof(OutT);
}

// The step over [begin, end). With a copy out (element-aligned), the
// elements before out's first address aligned for a streamed pair
// (kPairStreamBytes) take plain stores and the rest non-temporal ones, fenced
// before returning: the copy is written
// once and read next by the H2D transfer (a DMA engine or another thread),
// never by this core, so a plain store's read for ownership of each line
// would be pure overhead, 4 bytes per parameter more DRAM traffic for an
// fp32 copy. The bits are the same either way.
//
// With a backup (backup != nullptr: K arrays, each 64-byte aligned, as
// ValidateOptimSpans checks), the old state goes there with non-temporal
// stores, for the same reason: it is read back only to undo a speculative
// step. Each vector of one StepLoopStores call starts a multiple of kLanes
// elements after its begin, here a chunk boundary (a multiple of
// kOptimChunkElems, itself a multiple of every level's lanes), so every
// backup store is aligned, provided the loop is not split for the copy out:
// with a backup, the copy out streams only when its own first element is
// aligned for a streamed pair too (the engine aligns both), and takes plain
// stores otherwise.
template <int K, Elem G, int O, typename Op>
TF_SIMD_INLINE void StepLoop(Op& op, float* const* state, float* const* backup,
                             const void* grads_bytes, void* out_bytes, size_t begin, size_t end) {
  if (backup != nullptr) {
    if constexpr (O != 0 && kStreamOut) {
      if (OutHead<O>(out_bytes, begin) == 0) {
        StepLoopStores<K, G, O, true, true>(op, state, backup, grads_bytes, out_bytes, begin, end);
      } else {
        StepLoopStores<K, G, O, false, true>(op, state, backup, grads_bytes, out_bytes, begin, end);
      }
    } else {
      StepLoopStores<K, G, O, false, true>(op, state, backup, grads_bytes, out_bytes, begin, end);
    }
    StreamFence();
    return;
  }
  if constexpr (O == 0 || !kStreamOut) {
    StepLoopStores<K, G, O, false, false>(op, state, backup, grads_bytes, out_bytes, begin, end);
  } else {
    const size_t head = OutHead<O>(out_bytes, begin);
    const size_t mid = end - begin < head ? end : begin + head;
    StepLoopStores<K, G, O, false, false>(op, state, backup, grads_bytes, out_bytes, begin, mid);
    StepLoopStores<K, G, O, true, false>(op, state, backup, grads_bytes, out_bytes, mid, end);
    StreamFence();
  }
}

}  // namespace
}  // namespace tierflow::TIERFLOW_ISA_NS
