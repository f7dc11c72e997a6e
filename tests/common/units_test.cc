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

TEST(Units, ParsesCounts) {
  EXPECT_EQ(*ParseCount("64M"), 64ull << 20);
  EXPECT_EQ(*ParseCount("1e9"), 1000000000ull);
  EXPECT_FALSE(ParseCount("7B").ok());
}

TEST(Units, FormatsBytes) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.00 GiB");
}

}  // namespace
}  // namespace tierflow
