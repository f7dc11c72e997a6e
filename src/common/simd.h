// Vector operations for the host loops that are compiled once per
// instruction-set level (see common/cpu_isa.h): 16 fp32 lanes of AVX-512, 8
// of AVX2 or 4 of SSE2, chosen by the translation unit's own -march flags.
//
// Only those per-level translation units include this header, and everything
// in it lives in their level's namespace (TIERFLOW_ISA_NS, e.g.
// tierflow::isa_avx2) inside an anonymous namespace: internal linkage, so no
// inline function of one level can be merged with another level's copy by the
// linker (tests/common/isa_objects_test checks the objects). Intrinsics are
// always-inline and emit no symbols; no other header with inline functions
// may be included next to this one.
//
// Every operation gives the same bits at every level:
// - add, sub, mul, div and sqrt are single IEEE operations (the objects are
//   built with -ffp-contract=off: no FMA contraction); where both operands of
//   an add may be NaN, kernels use AddScaled so that the NaN is defined;
// - fp32 -> bf16 rounds to nearest even on the integer bits, so subnormals
//   are kept (AVX512-BF16's vcvtneps2bf16 would flush them); NaN becomes a
//   quiet NaN keeping the sign and the top mantissa bits, (bits >> 16) | 0x40;
// - fp16 <-> fp32 is what F16C's vcvtph2ps / vcvtps2ph do (round to nearest
//   even, subnormals kept, NaN quieted with the payload's top bits kept), and
//   SSE2 emulates exactly that on integers;
// - the 16-lane sum (SumTree16) adds in one fixed order at every width.
// common/half.h's scalar conversions follow the same rules.
#pragma once

#ifndef TIERFLOW_ISA_NS
#error "common/simd.h is only for the per-level objects (tierflow_isa_objects in CMakeLists.txt)"
#endif

// The objects' flags must match the level they are named for.
#if TIERFLOW_ISA_LEVEL == 2
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512VL__) || !defined(__F16C__)
#error "the avx512 objects need -march=x86-64-v4"
#endif
#elif TIERFLOW_ISA_LEVEL == 1
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || defined(__AVX512F__)
#error "the avx2 objects need -march=x86-64-v3 and no AVX-512"
#endif
#elif TIERFLOW_ISA_LEVEL == 0
#if !defined(__SSE2__) || defined(__AVX__)
#error "the baseline objects need -march=x86-64 and no AVX"
#endif
#else
#error "TIERFLOW_ISA_LEVEL must be 0 (baseline), 1 (avx2) or 2 (avx512)"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace tierflow::TIERFLOW_ISA_NS {
namespace {

#define TF_SIMD_INLINE inline __attribute__((always_inline))

// Element storage kinds, numbered as tierflow::DType (kF32, kBF16, kF16).
enum class Elem : int { kF32 = 0, kBF16 = 1, kF16 = 2 };
template <Elem E>
struct StorageOf {
  using type = uint16_t;
};
template <>
struct StorageOf<Elem::kF32> {
  using type = float;
};
template <Elem E>
using Storage = typename StorageOf<E>::type;

#if TIERFLOW_ISA_LEVEL == 2
// ---------------------------------------------------------------- AVX-512
using VF = __m512;
inline constexpr size_t kLanes = 16;

TF_SIMD_INLINE VF Set1(float x) { return _mm512_set1_ps(x); }
TF_SIMD_INLINE VF Zero() { return _mm512_setzero_ps(); }
TF_SIMD_INLINE VF Add(VF a, VF b) { return _mm512_add_ps(a, b); }
TF_SIMD_INLINE VF Sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
TF_SIMD_INLINE VF Mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
TF_SIMD_INLINE VF Div(VF a, VF b) { return _mm512_div_ps(a, b); }
TF_SIMD_INLINE VF Sqrt(VF a) { return _mm512_sqrt_ps(a); }
TF_SIMD_INLINE VF LoadF32(const float* p) { return _mm512_loadu_ps(p); }
TF_SIMD_INLINE void StoreF32(float* p, VF x) { _mm512_storeu_ps(p, x); }
TF_SIMD_INLINE void StreamF32(float* p, VF x) { _mm512_stream_ps(p, x); }

TF_SIMD_INLINE VF LoadBf16(const uint16_t* p) {
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}
TF_SIMD_INLINE VF LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// 16 narrowed lanes.
using VH = __m256i;
TF_SIMD_INLINE void Store16(uint16_t* p, VH h) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
}
TF_SIMD_INLINE void Stream16(uint16_t* p, VH h) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h);
}
TF_SIMD_INLINE VH NarrowBf16(VF x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}
TF_SIMD_INLINE VH NarrowF16(VF x) {
  return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Bits that are non-zero in some lane's magnitude.
TF_SIMD_INLINE bool AnyMagnitudeBits(VF x) {
  return _mm512_test_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)) != 0;
}
TF_SIMD_INLINE VF Or(VF a, VF b) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
// 1 where x > 0, -1 where x < 0, +0 where x is ±0, x itself where x is NaN.
TF_SIMD_INLINE VF Sign(VF x) {
  const VF zero = Zero();
  VF r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), zero, Set1(1.0f));
  r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), r, Set1(-1.0f));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
}
// Lanes i and i + 8 of one 16-lane register added: an 8-lane half.
TF_SIMD_INLINE __m128 FoldTo4(const VF* r) {
  const __m256 lo = _mm512_castps512_ps256(r[0]);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(r[0]), 1));
  const __m256 h = _mm256_add_ps(lo, hi);
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

#elif TIERFLOW_ISA_LEVEL == 1
// ---------------------------------------------------------------- AVX2
using VF = __m256;
inline constexpr size_t kLanes = 8;

TF_SIMD_INLINE VF Set1(float x) { return _mm256_set1_ps(x); }
TF_SIMD_INLINE VF Zero() { return _mm256_setzero_ps(); }
TF_SIMD_INLINE VF Add(VF a, VF b) { return _mm256_add_ps(a, b); }
TF_SIMD_INLINE VF Sub(VF a, VF b) { return _mm256_sub_ps(a, b); }
TF_SIMD_INLINE VF Mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
TF_SIMD_INLINE VF Div(VF a, VF b) { return _mm256_div_ps(a, b); }
TF_SIMD_INLINE VF Sqrt(VF a) { return _mm256_sqrt_ps(a); }
TF_SIMD_INLINE VF LoadF32(const float* p) { return _mm256_loadu_ps(p); }
TF_SIMD_INLINE void StoreF32(float* p, VF x) { _mm256_storeu_ps(p, x); }
TF_SIMD_INLINE void StreamF32(float* p, VF x) { _mm256_stream_ps(p, x); }

TF_SIMD_INLINE VF LoadBf16(const uint16_t* p) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}
TF_SIMD_INLINE VF LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 8 narrowed lanes.
using VH = __m128i;
TF_SIMD_INLINE void Store16(uint16_t* p, VH h) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}
TF_SIMD_INLINE void Stream16(uint16_t* p, VH h) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), h);
}
TF_SIMD_INLINE VH NarrowBf16(VF x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i h = _mm256_blendv_epi8(rounded, quiet, nan);
  // Values are 0..0xffff, so the unsigned-saturating pack is exact.
  return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
TF_SIMD_INLINE VH NarrowF16(VF x) {
  return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// NarrowBf16 of a then b, 16 lanes in order, for vectors with no NaN lane (a
// NaN would lose NarrowBf16's quieting, or carry into the exponent): on 16-bit
// lanes, one instruction per step for both vectors. The fp32 bits split into
// their low halves L and high halves H, and H rounds up where
// L + (H & 1) > 0x8000, which is NarrowBf16's (bits + 0x7fff + lsb) >> 16.
TF_SIMD_INLINE __m256i NarrowBf16PairNoNaN(VF a, VF b) {
  // Per 128-bit lane: the 4 low halves, then the 4 high halves.
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i sa = _mm256_shuffle_epi8(_mm256_castps_si256(a), split);
  const __m256i sb = _mm256_shuffle_epi8(_mm256_castps_si256(b), split);
  // 64-bit quarters: a0-3, b0-3, a4-7, b4-7.
  const __m256i low = _mm256_unpacklo_epi64(sa, sb);
  const __m256i high = _mm256_unpackhi_epi64(sa, sb);
  // L + lsb saturates only at 0x10000, which is > 0x8000 either way; the
  // unsigned s > 0x8000 is the signed (s ^ 0x8000) > 0, -1 where H rounds up.
  const __m256i s = _mm256_adds_epu16(low, _mm256_and_si256(high, _mm256_set1_epi16(1)));
  const __m256i up =
      _mm256_cmpgt_epi16(_mm256_xor_si256(s, _mm256_set1_epi16(INT16_MIN)), _mm256_setzero_si256());
  return _mm256_permute4x64_epi64(_mm256_sub_epi16(high, up), 0xd8);  // a0-7, b0-7
}
TF_SIMD_INLINE bool AnyNaN(VF a, VF b) {
  const VF unordered = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
  return _mm256_testz_ps(unordered, unordered) == 0;
}

TF_SIMD_INLINE bool AnyMagnitudeBits(VF x) {
  return _mm256_testz_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff)) == 0;
}
TF_SIMD_INLINE VF Or(VF a, VF b) { return _mm256_or_ps(a, b); }
TF_SIMD_INLINE VF Sign(VF x) {
  const VF zero = Zero();
  const VF pos = _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_GT_OQ), Set1(1.0f));
  const VF neg = _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_LT_OQ), Set1(-1.0f));
  const VF nan = _mm256_and_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), x);
  return _mm256_or_ps(_mm256_or_ps(pos, neg), nan);
}
TF_SIMD_INLINE __m128 FoldTo4(const VF* r) {
  const __m256 h = _mm256_add_ps(r[0], r[1]);  // lanes i and i + 8
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

#else
// ---------------------------------------------------------------- SSE2
using VF = __m128;
inline constexpr size_t kLanes = 4;

TF_SIMD_INLINE VF Set1(float x) { return _mm_set1_ps(x); }
TF_SIMD_INLINE VF Zero() { return _mm_setzero_ps(); }
TF_SIMD_INLINE VF Add(VF a, VF b) { return _mm_add_ps(a, b); }
TF_SIMD_INLINE VF Sub(VF a, VF b) { return _mm_sub_ps(a, b); }
TF_SIMD_INLINE VF Mul(VF a, VF b) { return _mm_mul_ps(a, b); }
TF_SIMD_INLINE VF Div(VF a, VF b) { return _mm_div_ps(a, b); }
TF_SIMD_INLINE VF Sqrt(VF a) { return _mm_sqrt_ps(a); }
TF_SIMD_INLINE VF LoadF32(const float* p) { return _mm_loadu_ps(p); }
TF_SIMD_INLINE void StoreF32(float* p, VF x) { _mm_storeu_ps(p, x); }
TF_SIMD_INLINE void StreamF32(float* p, VF x) { _mm_stream_ps(p, x); }

TF_SIMD_INLINE __m128i I32(int32_t x) { return _mm_set1_epi32(x); }
TF_SIMD_INLINE __m128i Select(__m128i mask, __m128i if_set, __m128i if_clear) {
  return _mm_or_si128(_mm_and_si128(mask, if_set), _mm_andnot_si128(mask, if_clear));
}
// 4 narrowed lanes: four 32-bit lanes holding 0..0xffff, packed into the
// low 64 bits when stored.
using VH = __m128i;
TF_SIMD_INLINE __m128i PackLow16(__m128i h) {
  const __m128i sign_extended = _mm_srai_epi32(_mm_slli_epi32(h, 16), 16);
  return _mm_packs_epi32(sign_extended, sign_extended);
}
TF_SIMD_INLINE void Store16(uint16_t* p, VH h) {
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), PackLow16(h));
}
TF_SIMD_INLINE void Stream16(uint16_t* p, VH h) {
  _mm_stream_si64(reinterpret_cast<long long*>(p), _mm_cvtsi128_si64(PackLow16(h)));
}

TF_SIMD_INLINE VF LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));  // h << 16
}
// vcvtph2ps on integers: normals rebiased, subnormals renormalised by an
// exact float subtraction, Inf kept, NaN quieted (bit 22 set).
TF_SIMD_INLINE VF LoadF16(const uint16_t* p) {
  const __m128i h =
      _mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), _mm_setzero_si128());
  const __m128i magnitude = _mm_and_si128(h, I32(0x7fff));
  const __m128i sign = _mm_slli_epi32(_mm_and_si128(h, I32(0x8000)), 16);
  const __m128i shifted = _mm_slli_epi32(magnitude, 13);
  const __m128i exponent = _mm_and_si128(shifted, I32(0x0f800000));
  __m128i bits = _mm_add_epi32(shifted, I32(112 << 23));
  const __m128i inf_nan = _mm_cmpeq_epi32(exponent, I32(0x0f800000));
  bits = _mm_add_epi32(bits, _mm_and_si128(inf_nan, I32(112 << 23)));
  const __m128i nan = _mm_cmpgt_epi32(magnitude, I32(0x7c00));
  bits = _mm_or_si128(bits, _mm_and_si128(nan, I32(0x00400000)));
  const __m128i subnormal = _mm_cmpeq_epi32(exponent, _mm_setzero_si128());
  const __m128 renormalised = _mm_sub_ps(_mm_castsi128_ps(_mm_add_epi32(bits, I32(1 << 23))),
                                         _mm_castsi128_ps(I32(113 << 23)));
  bits = Select(subnormal, _mm_castps_si128(renormalised), bits);
  return _mm_castsi128_ps(_mm_or_si128(bits, sign));
}
TF_SIMD_INLINE VH NarrowBf16(VF x) {
  const __m128i u = _mm_castps_si128(x);
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), I32(1));
  const __m128i rounded = _mm_srli_epi32(_mm_add_epi32(u, _mm_add_epi32(lsb, I32(0x7fff))), 16);
  const __m128i quiet = _mm_or_si128(_mm_srli_epi32(u, 16), I32(0x40));
  const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, I32(0x7fffffff)), I32(0x7f800000));
  return Select(nan, quiet, rounded);
}
// vcvtps2ph on integers: normals rebiased and rounded to nearest even on the
// 13 dropped bits, results below 2^-14 rounded by the FPU in an exact float
// add (x + 0.5 puts the fp16 subnormal quantum 2^-24 at the last mantissa
// bit), >= 65520 to Inf, NaN quieted keeping the payload's top 9 bits.
TF_SIMD_INLINE VH NarrowF16(VF x) {
  const __m128i u = _mm_castps_si128(x);
  const __m128i sign = _mm_and_si128(_mm_srli_epi32(u, 16), I32(0x8000));
  const __m128i magnitude = _mm_and_si128(u, I32(0x7fffffff));
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(magnitude, 13), I32(1));
  const __m128i normal = _mm_srli_epi32(
      _mm_add_epi32(_mm_sub_epi32(magnitude, I32(112 << 23)), _mm_add_epi32(lsb, I32(0xfff))), 13);
  const __m128 half = _mm_set1_ps(0.5f);
  const __m128i small = _mm_sub_epi32(
      _mm_castps_si128(_mm_add_ps(_mm_castsi128_ps(magnitude), half)), _mm_castps_si128(half));
  const __m128i nan_bits =
      _mm_or_si128(I32(0x7e00), _mm_and_si128(_mm_srli_epi32(magnitude, 13), I32(0x3ff)));
  __m128i h = Select(_mm_cmplt_epi32(magnitude, I32(0x38800000)), small, normal);
  h = Select(_mm_cmpgt_epi32(magnitude, I32(0x477fefff)), I32(0x7c00), h);
  h = Select(_mm_cmpgt_epi32(magnitude, I32(0x7f800000)), nan_bits, h);
  return _mm_or_si128(h, sign);
}

TF_SIMD_INLINE bool AnyMagnitudeBits(VF x) {
  const __m128i magnitude = _mm_and_si128(_mm_castps_si128(x), I32(0x7fffffff));
  return _mm_movemask_epi8(_mm_cmpeq_epi32(magnitude, _mm_setzero_si128())) != 0xffff;
}
TF_SIMD_INLINE VF Or(VF a, VF b) { return _mm_or_ps(a, b); }
TF_SIMD_INLINE VF Sign(VF x) {
  const VF zero = Zero();
  const VF pos = _mm_and_ps(_mm_cmpgt_ps(x, zero), Set1(1.0f));
  const VF neg = _mm_and_ps(_mm_cmplt_ps(x, zero), Set1(-1.0f));
  const VF nan = _mm_and_ps(_mm_cmpunord_ps(x, x), x);
  return _mm_or_ps(_mm_or_ps(pos, neg), nan);
}
TF_SIMD_INLINE __m128 FoldTo4(const VF* r) {
  // Lanes i and i + 8, then i and i + 4: (r0 + r2) + (r1 + r3).
  return _mm_add_ps(_mm_add_ps(r[0], r[2]), _mm_add_ps(r[1], r[3]));
}
#endif

// ---------------------------------------------------------------- all levels

// Registers that hold 16 lanes.
inline constexpr size_t kRegsPer16 = 16 / kLanes;

template <Elem E>
TF_SIMD_INLINE VF Load(const Storage<E>* p) {
  if constexpr (E == Elem::kF32) {
    return LoadF32(p);
  } else if constexpr (E == Elem::kBF16) {
    return LoadBf16(p);
  } else {
    return LoadF16(p);
  }
}
TF_SIMD_INLINE void StoreBf16(uint16_t* p, VF x) { Store16(p, NarrowBf16(x)); }
TF_SIMD_INLINE void StoreF16(uint16_t* p, VF x) { Store16(p, NarrowF16(x)); }
template <Elem E>
TF_SIMD_INLINE void Store(Storage<E>* p, VF x) {
  if constexpr (E == Elem::kF32) {
    StoreF32(p, x);
  } else if constexpr (E == Elem::kBF16) {
    StoreBf16(p, x);
  } else {
    StoreF16(p, x);
  }
}

// Bytes one vector of E occupies, the alignment StoreStreaming needs.
template <Elem E>
inline constexpr size_t kVectorBytes = kLanes * sizeof(Storage<E>);

// Store<E> with a non-temporal store: no read for ownership of the line, and
// the line is not kept in cache (for a copy nothing on this core reads
// again). REQUIRES: p is kVectorBytes<E>-aligned. Weakly ordered: the
// function that issues them ends with StreamFence() before its stores may be
// seen by another thread or a DMA engine.
template <Elem E>
TF_SIMD_INLINE void StoreStreaming(Storage<E>* p, VF x) {
  if constexpr (E == Elem::kF32) {
    StreamF32(p, x);
  } else if constexpr (E == Elem::kBF16) {
    Stream16(p, NarrowBf16(x));
  } else {
    Stream16(p, NarrowF16(x));
  }
}
TF_SIMD_INLINE void StreamFence() { _mm_sfence(); }

// The alignment StorePair<E, true> needs: a pair of AVX2 bf16 vectors is one
// 32-byte store, everything else a vector's bytes.
template <Elem E>
inline constexpr size_t kPairStreamBytes = (TIERFLOW_ISA_LEVEL == 1 && E == Elem::kBF16)
                                               ? 2 * kVectorBytes<E>
                                               : kVectorBytes<E>;

// Store<E> of a at p and of b after it; with kStream, StoreStreaming<E>
// (REQUIRES: p is kPairStreamBytes<E>-aligned). Same bits either way. At AVX2
// a bf16 pair without NaN is narrowed 16 lanes at a time and written in one
// store: NarrowBf16's 8-lane integer rounding costs about 10 instructions per
// vector, which on a core with much DRAM bandwidth to itself slowed the whole
// AdamW step to 0.84 of the bandwidth limit (docs/MEASUREMENTS.md).
template <Elem E, bool kStream>
TF_SIMD_INLINE void StorePair(Storage<E>* p, VF a, VF b) {
#if TIERFLOW_ISA_LEVEL == 1
  if constexpr (E == Elem::kBF16) {
    if (__builtin_expect(!AnyNaN(a, b), 1)) {
      const __m256i h = NarrowBf16PairNoNaN(a, b);
      if constexpr (kStream) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
      }
      return;
    }
  }
#endif
  if constexpr (kStream) {
    StoreStreaming<E>(p, a);
    StoreStreaming<E>(p + kLanes, b);
  } else {
    Store<E>(p, a);
    Store<E>(p + kLanes, b);
  }
}

// a + c * x, each operation rounded as written, given neg_c = -c. Written as
// a - (neg_c * x), which is the same IEEE operation for every non-NaN value
// ((-c) * x is -(c * x) exactly), because of NaN payloads: when both a and
// c * x are NaN, x86 returns the first operand's NaN, and the compiler may
// swap the operands of a commutative add (differently at each level) but not
// of a subtraction. So the NaN that comes out is a's, at every level. (A NaN
// x comes through the multiply unchanged, sign included.)
TF_SIMD_INLINE VF AddScaled(VF a, VF neg_c, VF x) { return Sub(a, Mul(neg_c, x)); }

// x, hidden from the optimizer: AddScaled with a constant neg_c such as -1
// must stay a multiply and a subtraction (GCC would fold a - (-1 * x) into
// the commutative a + x).
TF_SIMD_INLINE VF Opaque(VF x) {
#if TIERFLOW_ISA_LEVEL == 2
  __asm__("" : "+v"(x));
#else
  __asm__("" : "+x"(x));
#endif
  return x;
}

// Marks non-finite lanes of x in `seen`: x * 0 is ±0 for finite x and NaN
// for Inf or NaN, so the OR of those bits has magnitude bits exactly when
// some x was not finite.
TF_SIMD_INLINE VF MarkNonFinite(VF seen, VF x) { return Or(seen, Mul(x, Zero())); }
TF_SIMD_INLINE bool SawNonFinite(VF seen) { return AnyMagnitudeBits(seen); }

// The same for squares (x * x for some x: +0 or more, +Inf, or NaN), in one
// instruction where the level has an unsigned 32-bit max: the bits of such a
// value are >= 0x7f800000 exactly when it is not finite, so the largest bits
// seen tell. SSE2 has no such max and keeps MarkNonFinite.
TF_SIMD_INLINE VF MarkNonFiniteSquare(VF seen, VF square) {
#if TIERFLOW_ISA_LEVEL == 2
  return _mm512_castsi512_ps(
      _mm512_max_epu32(_mm512_castps_si512(seen), _mm512_castps_si512(square)));
#elif TIERFLOW_ISA_LEVEL == 1
  return _mm256_castsi256_ps(
      _mm256_max_epu32(_mm256_castps_si256(seen), _mm256_castps_si256(square)));
#else
  return MarkNonFinite(seen, square);
#endif
}
TF_SIMD_INLINE bool SawNonFiniteSquare(VF seen) {
#if TIERFLOW_ISA_LEVEL == 2
  return _mm512_cmpge_epu32_mask(_mm512_castps_si512(seen), _mm512_set1_epi32(0x7f800000)) != 0;
#elif TIERFLOW_ISA_LEVEL == 1
  // Unsigned x >= 0x7f800000 as max(x, 0x7f800000) == x.
  const __m256i bits = _mm256_castps_si256(seen);
  const __m256i at_least =
      _mm256_cmpeq_epi32(_mm256_max_epu32(bits, _mm256_set1_epi32(0x7f800000)), bits);
  return _mm256_testz_si256(at_least, at_least) == 0;
#else
  return SawNonFinite(seen);
#endif
}

// The sum of 16 lanes (r[0..kRegsPer16) in lane order) in one fixed order:
// s[i] = l[i] + l[i+8] (i < 8), then s[i] + s[i+4], then + s[i+2], + s[i+1].
TF_SIMD_INLINE float SumTree16(const VF* r) {
  const __m128 q = FoldTo4(r);
  const __m128 pair = _mm_add_ps(q, _mm_movehl_ps(q, q));  // lanes 0+2, 1+3
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}

// One element read or written at any alignment: spans may start off their
// element size (a copy out at an odd byte offset), where a plain access
// through T* is undefined behaviour. Compiles to one move.
template <typename T>
TF_SIMD_INLINE T LoadOne(const T* p) {
  T x;
  __builtin_memcpy(&x, p, sizeof(T));
  return x;
}
template <typename T>
TF_SIMD_INLINE void StoreOne(T* p, T x) {
  __builtin_memcpy(p, &x, sizeof(T));
}

// A partial vector: `len` (< kLanes) elements copied into zero-filled lanes,
// so the last few elements of a span go through exactly the vector code.
template <typename T>
struct PartialLanes {
  T v[kLanes];
  TF_SIMD_INLINE void Fill(const T* src, size_t len) {
    for (size_t i = 0; i < kLanes; ++i) v[i] = i < len ? LoadOne(src + i) : T{};
  }
  TF_SIMD_INLINE void CopyOut(T* dst, size_t len) const {
    for (size_t i = 0; i < len; ++i) StoreOne(dst + i, v[i]);
  }
};

}  // namespace
}  // namespace tierflow::TIERFLOW_ISA_NS
