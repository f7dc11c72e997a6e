// common/checked_math.h: the overflow guards under parameter and byte counts
// (issue 18: counts wrapped and the planner said "fits").
#include "common/checked_math.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace tierflow {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

TEST(CheckedMath, CheckedMulAndAddReportOverflow) {
  int64_t r = 0;
  EXPECT_TRUE(CheckedMul<int64_t>(int64_t{1} << 31, int64_t{1} << 31, &r));
  EXPECT_EQ(r, int64_t{1} << 62);
  EXPECT_FALSE(CheckedMul<int64_t>(int64_t{1} << 32, int64_t{1} << 31, &r));
  EXPECT_FALSE(CheckedAdd<int64_t>(kI64Max, 1, &r));
  uint64_t u = 0;
  EXPECT_TRUE(CheckedAdd<uint64_t>(kU64Max - 1, 1, &u));
  EXPECT_EQ(u, kU64Max);
}

TEST(CheckedMath, SaturatingArithmeticClampsInsteadOfWrapping) {
  EXPECT_EQ(SaturatingMul(uint64_t{1} << 40, uint64_t{1} << 40), kU64Max);
  EXPECT_EQ(SaturatingAdd(kU64Max, uint64_t{1}), kU64Max);
  EXPECT_EQ(SaturatingMul(int64_t{1} << 40, int64_t{1} << 40), kI64Max);
  EXPECT_EQ(SaturatingAdd(kI64Max, int64_t{5}), kI64Max);
  EXPECT_EQ(SaturatingMul(int64_t{-3}, int64_t{5}), 0);  // negatives clamp to 0
  EXPECT_EQ(SaturatingProduct(1u << 20, 1u << 20, 1u << 20, 1u << 20), kU64Max);
  EXPECT_EQ(SaturatingProduct(2, 3, 7), 42u);
  EXPECT_EQ(SaturatingSum(kU64Max - 1, 1, 1), kU64Max);
  EXPECT_EQ(SaturatingSum(1, 2, 3), 6u);
}

TEST(CheckedMath, CheckedNarrowRefusesWhatDoesNotFit) {
  auto ok = CheckedNarrow<uint32_t>(uint64_t{4096}, "--block-size");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 4096u);
  auto big = CheckedNarrow<uint32_t>(uint64_t{1} << 32, "--block-size");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(),
              ::testing::HasSubstr("--block-size is 4294967296, which is outside 0..4294967295"));
  auto vocab = CheckedNarrow<int32_t>(int64_t{1} << 40, "vocab_size");
  ASSERT_FALSE(vocab.ok());
  EXPECT_THAT(vocab.status().message(), ::testing::HasSubstr("1099511627776"));
  EXPECT_FALSE(CheckedNarrow<uint32_t>(int64_t{-1}, "n").ok());
}

}  // namespace
}  // namespace tierflow
