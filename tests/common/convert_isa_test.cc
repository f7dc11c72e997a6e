// ConvertBuffer at every instruction-set level this CPU runs: every (from,
// to) pair, every 16-bit code, fp32 specials (subnormals, ties, limits, Inf,
// NaN payloads) and random bit patterns, every length 0..200 at several
// misalignments: each element is exactly the scalar FromFloat<To>(ToFloat(x))
// of common/half.h, so every level gives the same bits as every other.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/cpu_isa.h"
#include "common/half.h"
#include "tests/common/special_floats.h"

namespace tierflow {
namespace {

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// The scalar conversion of one element, as raw bits.
uint32_t ScalarConvert(DType from, const unsigned char* src, DType to) {
  float x = 0;
  switch (from) {
    case DType::kF32:
      std::memcpy(&x, src, 4);
      break;
    case DType::kBF16: {
      bf16 h;
      std::memcpy(&h, src, 2);
      x = ToFloat(h);
      break;
    }
    case DType::kF16: {
      fp16 h;
      std::memcpy(&h, src, 2);
      x = ToFloat(h);
      break;
    }
  }
  switch (to) {
    case DType::kF32: {
      if (from == DType::kF32) {  // fp32 -> fp32 is a copy, NaN payloads included
        uint32_t u;
        std::memcpy(&u, src, 4);
        return u;
      }
      return FloatBits(x);
    }
    case DType::kBF16:
      return FloatToBf16(x).bits;
    case DType::kF16:
      return FloatToFp16(x).bits;
  }
  return 0;
}

// Source elements of `from`: all 65536 codes for 16-bit types; fp32 specials
// and random bit patterns for fp32.
std::vector<unsigned char> Sources(DType from) {
  std::vector<unsigned char> bytes;
  if (from != DType::kF32) {
    for (uint32_t c = 0; c < 65536; ++c) {
      const uint16_t h = static_cast<uint16_t>(c);
      bytes.insert(bytes.end(), reinterpret_cast<const unsigned char*>(&h),
                   reinterpret_cast<const unsigned char*>(&h) + 2);
    }
    return bytes;
  }
  std::vector<uint32_t> bits = testing_common::FiniteSpecialFloatBits();
  for (uint32_t b : testing_common::NonFiniteFloatBits()) bits.push_back(b);
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  // Every fp16 and bf16 rounding boundary region: codes widened, +- a few ulps.
  for (uint32_t c = 0; c < 65536; c += 7) {
    const uint32_t from_bf16 = c << 16;
    const uint32_t from_fp16 = FloatBits(Fp16ToFloat(fp16{static_cast<uint16_t>(c)}));
    for (uint32_t base : {from_bf16, from_fp16}) {
      for (uint32_t d :
           {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
        bits.push_back(base + d);
      }
    }
  }
  bytes.resize(bits.size() * 4);
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  return bytes;
}

// Checks dst (n elements of `to`) against the scalar conversion of src.
void ExpectScalarBits(DType from, const unsigned char* src, DType to, const unsigned char* dst,
                      size_t n, const char* what) {
  int failures = 0;
  for (size_t i = 0; i < n && failures < 5; ++i) {
    const uint32_t want = ScalarConvert(from, src + i * DTypeSize(from), to);
    uint32_t got = 0;
    std::memcpy(&got, dst + i * DTypeSize(to), DTypeSize(to));
    if (got != want) {
      uint32_t in = 0;
      std::memcpy(&in, src + i * DTypeSize(from), DTypeSize(from));
      ADD_FAILURE() << what << " " << DTypeName(from) << "->" << DTypeName(to) << " element " << i
                    << " (input bits 0x" << std::hex << in << "): got 0x" << got << ", scalar 0x"
                    << want;
      ++failures;
    }
  }
}

TEST(ConvertIsa, EveryLevelMatchesTheScalarConversionsOnEveryCodeAndSpecial) {
  for (Isa isa : SupportedIsas()) {
    for (DType from : kDtypes) {
      const std::vector<unsigned char> src = Sources(from);
      const size_t n = src.size() / DTypeSize(from);
      for (DType to : kDtypes) {
        SCOPED_TRACE(IsaName(isa));
        std::vector<unsigned char> dst(n * DTypeSize(to), 0xab);
        ASSERT_TRUE(ConvertBuffer(from, src.data(), to, dst.data(), n, isa).ok());
        ExpectScalarBits(from, src.data(), to, dst.data(), n, "bulk");
      }
    }
  }
}

TEST(ConvertIsa, EveryLengthAndMisalignmentGoesThroughTheSameRounding) {
  for (Isa isa : SupportedIsas()) {
    for (DType from : kDtypes) {
      const std::vector<unsigned char> all = Sources(from);
      for (DType to : kDtypes) {
        for (size_t n = 0; n <= 200; ++n) {
          const size_t offset = n % 4;
          // Source and destination misaligned by `offset` elements; a guard
          // byte pattern after the destination must stay untouched.
          std::vector<unsigned char> src((n + offset + 8) * DTypeSize(from));
          std::memcpy(src.data() + offset * DTypeSize(from),
                      all.data() + (n * 37 % 1000) * DTypeSize(from), n * DTypeSize(from));
          std::vector<unsigned char> dst((n + offset + 8) * DTypeSize(to), 0xab);
          unsigned char* out = dst.data() + offset * DTypeSize(to);
          ASSERT_TRUE(
              ConvertBuffer(from, src.data() + offset * DTypeSize(from), to, out, n, isa).ok());
          ExpectScalarBits(from, src.data() + offset * DTypeSize(from), to, out, n, "ragged");
          for (size_t b = (n + offset) * DTypeSize(to); b < dst.size(); ++b) {
            ASSERT_EQ(dst[b], 0xab) << IsaName(isa) << " wrote past element " << n;
          }
        }
      }
    }
  }
}

TEST(ConvertIsa, SelectedLevelOverloadAgreesWithExplicitOne) {
  const std::vector<unsigned char> src = Sources(DType::kF32);
  const size_t n = src.size() / 4;
  std::vector<unsigned char> implicit(n * 2), explicit_level(n * 2);
  ConvertBuffer(DType::kF32, src.data(), DType::kBF16, implicit.data(), n);
  ASSERT_TRUE(
      ConvertBuffer(DType::kF32, src.data(), DType::kBF16, explicit_level.data(), n, *SelectedIsa())
          .ok());
  EXPECT_EQ(implicit, explicit_level);
}

TEST(ConvertIsa, UnsupportedLevelRunsNothing) {
  if (CpuSupportsIsa(Isa::kAvx512)) GTEST_SKIP() << "this CPU runs every level";
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (CpuSupportsIsa(isa)) continue;
    float src[4] = {1, 2, 3, 4};
    uint16_t dst[4] = {7, 7, 7, 7};
    Status s = ConvertBuffer(DType::kF32, src, DType::kBF16, dst, 4, isa);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(dst[0], 7);
  }
}

}  // namespace
}  // namespace tierflow
