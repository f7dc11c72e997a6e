// bf16/fp16 conversions against exhaustive round trips and double-precision
// rounding computed independently.
#include "common/half.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace tierflow {
namespace {

// Reference: the representable neighbours of x in fp16 by brute force over all 65536 codes.
float NearestFp16Reference(float x) {
  double best = std::numeric_limits<double>::infinity();
  float best_v = 0;
  uint16_t best_bits = 0;
  for (uint32_t b = 0; b < 0x7c00; ++b) {  // finite non-negative codes
    float v = Fp16ToFloat(fp16{static_cast<uint16_t>(b)});
    double d = std::fabs(static_cast<double>(v) - std::fabs(static_cast<double>(x)));
    if (d < best || (d == best && (b & 1) == 0 && (best_bits & 1) == 1)) {
      best = d;
      best_v = v;
      best_bits = static_cast<uint16_t>(b);
    }
  }
  return std::signbit(x) ? -best_v : best_v;
}

TEST(Half, EveryFp16CodeRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    fp16 h{static_cast<uint16_t>(b)};
    float f = Fp16ToFloat(h);
    fp16 back = FloatToFp16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFloat(back)));
    } else {
      EXPECT_EQ(back.bits, h.bits) << "code " << b;
    }
  }
}

TEST(Half, EveryBf16CodeRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16 h{static_cast<uint16_t>(b)};
    float f = Bf16ToFloat(h);
    bf16 back = FloatToBf16(f);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(Bf16ToFloat(back)));
    else
      EXPECT_EQ(back.bits, h.bits) << "code " << b;
  }
}

TEST(Half, Fp16RoundsToNearestEvenLikeBruteForce) {
  const float samples[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 3.14159f, -2.71828f, 6.0e-8f,
                           2.9802322e-8f,      8.9406967e-8f,      1e-5f,    65519.0f,  0.1f,
                           -1234.5678f,        5.96e-8f,           3.0e-8f};
  for (float x : samples) {
    EXPECT_EQ(Fp16ToFloat(FloatToFp16(x)), NearestFp16Reference(x)) << x;
  }
  EXPECT_TRUE(std::isinf(Fp16ToFloat(FloatToFp16(65520.0f))));
  EXPECT_TRUE(std::isinf(Fp16ToFloat(FloatToFp16(1e9f))));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(std::nanf("")))));
}

TEST(Half, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even gives 1.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: even is 1+2^-6.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 1.0f / 256 + 1.0f / 4096)), 1.0f + 1.0f / 128);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(INFINITY))));
}

// NaN bits are defined (as x86's F16C instructions give them for fp16, and
// quiet with the top bits kept for bf16), and subnormals are kept, so that
// the scalar code and every vector level agree bit for bit.
TEST(Half, NanBitsAndSubnormalsAreDefined) {
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7f800001u)).bits, 0x7fc0);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0xff812345u)).bits, 0xffc1);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7fffffffu)).bits, 0x7fff);
  EXPECT_EQ(FloatToFp16(BitsToFloat(0x7f800001u)).bits, 0x7e00);
  EXPECT_EQ(FloatToFp16(BitsToFloat(0x7f802000u)).bits, 0x7e01);
  EXPECT_EQ(FloatToFp16(BitsToFloat(0xffbfffffu)).bits, 0xffff);
  EXPECT_EQ(FloatBits(Fp16ToFloat(fp16{0x7c01})), 0x7fc02000u);
  EXPECT_EQ(FloatBits(Fp16ToFloat(fp16{0xfe00})), 0xffc00000u);
  EXPECT_EQ(FloatBits(Fp16ToFloat(fp16{0x7c00})), 0x7f800000u);
  // An fp32 subnormal that bf16 represents exactly stays (vcvtneps2bf16 would flush it).
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x00400000u)).bits, 0x0040);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x80018000u)).bits, 0x8002);  // tie to even, upwards
  EXPECT_EQ(FloatToFp16(BitsToFloat(0x33c00000u)).bits, 0x0002);  // 1.5 * 2^-24: tie to even
}

TEST(Half, ConvertBufferMatchesScalarConversions) {
  float src[5] = {0.5f, -3.25f, 1e-3f, 70000.0f, 1.0f / 3};
  fp16 h[5];
  bf16 b[5];
  float back[5];
  ConvertBuffer(DType::kF32, src, DType::kF16, h, 5);
  ConvertBuffer(DType::kF16, h, DType::kBF16, b, 5);
  ConvertBuffer(DType::kBF16, b, DType::kF32, back, 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(h[i].bits, FloatToFp16(src[i]).bits);
    EXPECT_EQ(back[i], Bf16ToFloat(FloatToBf16(Fp16ToFloat(h[i]))));
  }
}

}  // namespace
}  // namespace tierflow
