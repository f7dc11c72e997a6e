// fp32 bit patterns that take every branch of a conversion or an optimizer
// update: zeros, fp32 and fp16/bf16 subnormals, rounding ties, values near the
// fp16 and fp32 limits, infinities and NaNs (quiet, signalling, with
// payloads, both signs). For the tests that compare the instruction-set
// levels bit for bit (common/cpu_isa.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace tierflow::testing_common {

// Finite specials only (no Inf or NaN), both signs.
inline std::vector<uint32_t> FiniteSpecialFloatBits() {
  const uint32_t magnitudes[] = {
      0x00000000u,  // zero
      0x00000001u,  // smallest fp32 subnormal
      0x00400000u,  // fp32 subnormal, bf16-representable
      0x007fffffu,  // largest fp32 subnormal
      0x00800000u,  // smallest fp32 normal
      0x33000000u,  // 2^-25: half the smallest fp16 subnormal (tie to 0)
      0x33000001u,  // just above: rounds up to the smallest fp16 subnormal
      0x33c00000u,  // 1.5 * 2^-24: tie between fp16 subnormals 1 and 2
      0x387fe000u,  // just below the smallest fp16 normal
      0x38800000u,  // smallest fp16 normal
      0x3f800000u,  // 1
      0x3f808000u,  // 1 + 2^-8: bf16 tie to even (down)
      0x3f818000u,  // 1 + 3 * 2^-8: bf16 tie to even (up)
      0x3f801000u,  // 1 + 2^-11: fp16 tie to even (down)
      0x3f803000u,  // 1 + 3 * 2^-11: fp16 tie to even (up)
      0x477fe000u,  // 65504, the largest fp16
      0x477fefffu,  // just below 65520: rounds to 65504
      0x477ff000u,  // 65520: rounds to fp16 Inf
      0x501502f9u,  // 1e10
      0x7149f2cau,  // 1e30: its square overflows fp32
      0x7f7f8000u,  // near the largest fp32: bf16 rounds to Inf
      0x7f7fffffu,  // the largest fp32
  };
  std::vector<uint32_t> bits;
  for (uint32_t m : magnitudes) {
    bits.push_back(m);
    bits.push_back(m | 0x80000000u);
  }
  return bits;
}

// Infinities and NaNs, both signs, quiet and signalling, with payloads.
inline std::vector<uint32_t> NonFiniteFloatBits() {
  const uint32_t magnitudes[] = {0x7f800000u, 0x7f800001u, 0x7f802000u, 0x7fa00000u,
                                 0x7fbfffffu, 0x7fc00000u, 0x7fc00001u, 0x7fffffffu};
  std::vector<uint32_t> bits;
  for (uint32_t m : magnitudes) {
    bits.push_back(m);
    bits.push_back(m | 0x80000000u);
  }
  return bits;
}

// n fp32 bit patterns: mostly `normal(rng)` values of the given scale, every
// `every`-th from `specials` (cycling), from a fixed seed.
inline std::vector<uint32_t> MixedFloatBits(size_t n, uint32_t seed, float scale,
                                            const std::vector<uint32_t>& specials,
                                            size_t every = 5) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint32_t> bits(n);
  size_t next_special = seed % (specials.empty() ? 1 : specials.size());
  for (size_t i = 0; i < n; ++i) {
    if (!specials.empty() && i % every == every - 1) {
      bits[i] = specials[next_special++ % specials.size()];
    } else {
      const float x = normal(rng);
      std::memcpy(&bits[i], &x, 4);
    }
  }
  return bits;
}

}  // namespace tierflow::testing_common
