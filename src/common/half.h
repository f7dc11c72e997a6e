// Conversions between fp32 and the 16-bit storage types, inline for hot loops.
//
// Both round to nearest, ties to even, keep subnormals, and keep NaN a NaN
// (quiet) and Inf an Inf, matching __float2bfloat16_rn / __float2half_rn on
// CUDA for every non-NaN value, so the CPU device is a bit-exact reference for
// the CUDA conversions. NaN bits are defined too, so that the scalar code here
// and every vector level of ConvertBuffer and the optimizers (common/simd.h)
// agree bit for bit: fp32 -> bf16 gives (bits >> 16) | 0x40 (sign and top
// mantissa bits kept, quiet bit set); fp16 <-> fp32 behave as the x86 F16C
// instructions (quiet bit set, payload truncated or shifted).
#pragma once

#include <cstdint>
#include <cstring>

#include "tierflow/dtype.h"

namespace tierflow {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float Bf16ToFloat(bf16 h) { return BitsToFloat(static_cast<uint32_t>(h.bits) << 16); }

inline bf16 FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding_bias) >> 16)};
}

inline float Fp16ToFloat(fp16 h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // Subnormal: value = mant * 2^-24, exact in fp32.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) {  // Inf, or NaN made quiet (as vcvtph2ps does)
    return BitsToFloat(sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u));
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline fp16 FloatToFp16(float f) {
  uint32_t u = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet, the payload's top 9 bits kept (as vcvtps2ph does)
    return fp16{static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};
  }
  if (abs >= 0x477ff000u) return fp16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): round abs * 2^24 to the nearest integer, ties to even.
    float scaled = BitsToFloat(abs) * 16777216.0f;  // exact: power-of-two scale
    uint32_t whole = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(whole);
    if (frac > 0.5f || (frac == 0.5f && (whole & 1u))) ++whole;
    return fp16{static_cast<uint16_t>(sign | whole)};
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits.
  uint32_t rebased = abs - (112u << 23);
  uint32_t rounding_bias = 0xfffu + ((rebased >> 13) & 1u);
  return fp16{static_cast<uint16_t>(sign | ((rebased + rounding_bias) >> 13))};
}

// Generic load/store so kernels can be written once over the storage type.
inline float ToFloat(float x) { return x; }
inline float ToFloat(bf16 x) { return Bf16ToFloat(x); }
inline float ToFloat(fp16 x) { return Fp16ToFloat(x); }

template <typename T>
inline T FromFloat(float x);
template <>
inline float FromFloat<float>(float x) {
  return x;
}
template <>
inline bf16 FromFloat<bf16>(float x) {
  return FloatToBf16(x);
}
template <>
inline fp16 FromFloat<fp16>(float x) {
  return FloatToFp16(x);
}

enum class Isa : uint8_t;  // common/cpu_isa.h

// Converts n elements between any two dtypes: element i becomes
// FromFloat<To>(ToFloat(src[i])) (fp32 to fp32 is a copy), on one thread,
// with the vector loops of the process's instruction-set level
// (SelectedIsaOrExit(), common/cpu_isa.h). REQUIRES: src and dst hold n
// elements and do not overlap.
void ConvertBuffer(DType from, const void* src, DType to, void* dst, size_t n);

// The same at an explicit level; every level gives the same bits.
// Errors: FailedPrecondition when this CPU cannot run `isa` (nothing runs).
Status ConvertBuffer(DType from, const void* src, DType to, void* dst, size_t n, Isa isa);

}  // namespace tierflow
