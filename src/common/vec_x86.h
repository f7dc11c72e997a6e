// fp32 vector operations for code that chooses its instruction set at run
// time through target attributes, in a translation unit built with the
// build's own flags: the stream probe (optim/stream_probe.cc) and the peer
// AdamW (bench/adam_peer.cc). Each level is a namespace, vec_avx2 (8 lanes,
// with FMA and F16C) and vec_avx512 (16 lanes), whose functions carry that
// level's TF_VEC_*_TARGET attribute; a caller's own functions that use them
// carry the same attribute.
//
// Not for the per-level objects of the optimizer kernels: those are compiled
// with their level's -march and use common/simd.h, whose functions have
// internal linkage (common/cpu_isa.h says why).
//
// Conversions: bf16 rounds to nearest even on the bits (as FloatToBf16,
// subnormals kept) and NaN becomes a quiet NaN; fp16 is F16C's vcvtps2ph.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "tierflow/dtype.h"

#define TF_VEC_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define TF_VEC_AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))

namespace tierflow::vec_avx2 {

using Vec = __m256;
inline constexpr size_t kLanes = 8;
// Non-temporal stores need their address aligned to the store's width: 16 B
// for 16-bit elements, 32 B for fp32; kStreamAlign covers both.
inline constexpr size_t kStreamAlign = 32;

TF_VEC_AVX2_TARGET inline Vec Splat(float x) { return _mm256_set1_ps(x); }
TF_VEC_AVX2_TARGET inline Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
TF_VEC_AVX2_TARGET inline Vec Mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
TF_VEC_AVX2_TARGET inline Vec Div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
TF_VEC_AVX2_TARGET inline Vec Sqrt(Vec a) { return _mm256_sqrt_ps(a); }
// a * b + c, rounded once.
TF_VEC_AVX2_TARGET inline Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
TF_VEC_AVX2_TARGET inline Vec Load(const float* p) { return _mm256_loadu_ps(p); }
TF_VEC_AVX2_TARGET inline Vec Load(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
TF_VEC_AVX2_TARGET inline Vec Load(const fp16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TF_VEC_AVX2_TARGET inline __m128i ToBf16(Vec x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i h = _mm256_blendv_epi8(rounded, quiet, nan);
  // Values are 0..0xffff, so the unsigned-saturating pack is exact.
  return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
TF_VEC_AVX2_TARGET inline __m128i ToFp16(Vec x) {
  return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
TF_VEC_AVX2_TARGET inline void Store(float* p, Vec x) { _mm256_storeu_ps(p, x); }
TF_VEC_AVX2_TARGET inline void Store(bf16* p, Vec x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), ToBf16(x));
}
TF_VEC_AVX2_TARGET inline void Store(fp16* p, Vec x) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), ToFp16(x));
}
// Store with a non-temporal store (p aligned to the store's width); Fence()
// orders them before another thread may read.
TF_VEC_AVX2_TARGET inline void StoreStreaming(float* p, Vec x) { _mm256_stream_ps(p, x); }
TF_VEC_AVX2_TARGET inline void StoreStreaming(bf16* p, Vec x) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), ToBf16(x));
}
TF_VEC_AVX2_TARGET inline void StoreStreaming(fp16* p, Vec x) {
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), ToFp16(x));
}
inline void Fence() { _mm_sfence(); }

}  // namespace tierflow::vec_avx2

// GCC 12 flags the self-initialised _mm512_undefined_*() inside its AVX-512
// intrinsics as uninitialised once inlined: a false positive in its own header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace tierflow::vec_avx512 {

using Vec = __m512;
inline constexpr size_t kLanes = 16;
// 32 B for 16-bit elements, 64 B for fp32.
inline constexpr size_t kStreamAlign = 64;

TF_VEC_AVX512_TARGET inline Vec Splat(float x) { return _mm512_set1_ps(x); }
TF_VEC_AVX512_TARGET inline Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
TF_VEC_AVX512_TARGET inline Vec Mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
TF_VEC_AVX512_TARGET inline Vec Div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
TF_VEC_AVX512_TARGET inline Vec Sqrt(Vec a) { return _mm512_sqrt_ps(a); }
TF_VEC_AVX512_TARGET inline Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
TF_VEC_AVX512_TARGET inline Vec Load(const float* p) { return _mm512_loadu_ps(p); }
TF_VEC_AVX512_TARGET inline Vec Load(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
TF_VEC_AVX512_TARGET inline Vec Load(const fp16* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
TF_VEC_AVX512_TARGET inline __m256i ToBf16(Vec x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}
TF_VEC_AVX512_TARGET inline __m256i ToFp16(Vec x) {
  return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
TF_VEC_AVX512_TARGET inline void Store(float* p, Vec x) { _mm512_storeu_ps(p, x); }
TF_VEC_AVX512_TARGET inline void Store(bf16* p, Vec x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), ToBf16(x));
}
TF_VEC_AVX512_TARGET inline void Store(fp16* p, Vec x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), ToFp16(x));
}
TF_VEC_AVX512_TARGET inline void StoreStreaming(float* p, Vec x) { _mm512_stream_ps(p, x); }
TF_VEC_AVX512_TARGET inline void StoreStreaming(bf16* p, Vec x) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), ToBf16(x));
}
TF_VEC_AVX512_TARGET inline void StoreStreaming(fp16* p, Vec x) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), ToFp16(x));
}
inline void Fence() { _mm_sfence(); }

}  // namespace tierflow::vec_avx512
#pragma GCC diagnostic pop
