#include "common/units.h"

#include <gtest/gtest.h>

namespace tierflow {
namespace {

TEST(Units, ParsesBinaryAndDecimalSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1TB"), 1000000000000ull);
  EXPECT_EQ(*ParseByteSize("64GB"), 64000000000ull);
  EXPECT_EQ(*ParseByteSize("1.5KiB"), 1536u);
}

TEST(Units, RejectsMalformedSizesNamingTheText) {
  for (const char* bad : {"", "GiB", "-1G", "12XB", "nan", "1e30"}) {
    auto r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos);
  }
}

// Counts read K/M/B/G/T as powers of ten, as "a 7B model" does; the binary
// multiples are spelled out (Ki/Mi/Gi/Ti).
TEST(Units, ParsesCountsWithDecimalSuffixes) {
  EXPECT_EQ(*ParseCount("1000"), 1000u);
  EXPECT_EQ(*ParseCount("1e9"), 1000000000ull);
  EXPECT_EQ(*ParseCount("64K"), 64000u);
  EXPECT_EQ(*ParseCount("64M"), 64000000u);
  EXPECT_EQ(*ParseCount("64m"), 64000000u);
  EXPECT_EQ(*ParseCount("1.5M"), 1500000u);
  EXPECT_EQ(*ParseCount("7B"), 7000000000ull);
  EXPECT_EQ(*ParseCount("7G"), 7000000000ull);
  EXPECT_EQ(*ParseCount("2T"), 2000000000000ull);
}

TEST(Units, ParsesCountsWithBinarySuffixes) {
  EXPECT_EQ(*ParseCount("64Ki"), 64u << 10);
  EXPECT_EQ(*ParseCount("4Mi"), 4u << 20);
  EXPECT_EQ(*ParseCount("256Mi"), 256ull << 20);
  EXPECT_EQ(*ParseCount("1gi"), 1ull << 30);
  EXPECT_EQ(*ParseCount("1Ti"), 1ull << 40);
}

TEST(Units, RejectsMalformedCountsNamingTheText) {
  // Byte-size spellings are not counts: "MiB" and "MB" are refused, not
  // silently read as a multiplier.
  for (const char* bad : {"", "M", "-1", "64MB", "64MiB", "64 M", "7X", "1e30", "nan"}) {
    auto r = ParseCount(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("4Mi"), std::string::npos) << r.status().message();
  }
}

TEST(Units, FormatsBytes) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.00 GiB");
}

}  // namespace
}  // namespace tierflow
