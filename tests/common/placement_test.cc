#include "tierflow/placement.h"

#include <gtest/gtest.h>

#include <string>

namespace tierflow {
namespace {

TEST(OffloadPlacement, NamesRoundTripThroughParse) {
  for (OffloadPlacement p :
       {OffloadPlacement::kAuto, OffloadPlacement::kHost, OffloadPlacement::kNvme}) {
    auto parsed = ParseOffloadPlacement("--offload-optimizer", OffloadPlacementName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(OffloadPlacementName(OffloadPlacement::kHost), "host");
  EXPECT_EQ(OffloadPlacementName(OffloadPlacement::kNvme), "nvme");
  EXPECT_EQ(OffloadPlacementName(OffloadPlacement::kAuto), "auto");
}

TEST(OffloadPlacement, CpuIsDeepSpeedsSpellingOfHost) {
  EXPECT_EQ(*ParseOffloadPlacement("x", "cpu"), OffloadPlacement::kHost);
}

TEST(OffloadPlacement, ErrorNamesTheSourceTheValueAndTheChoices) {
  for (const char* bad : {"gpu", "", "Host", "nvme0"}) {
    auto r = ParseOffloadPlacement("--offload-optimizer", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("--offload-optimizer"), std::string::npos) << m;
    std::string quoted = "'";  // (built by appends: GCC 12 warns falsely on "'" + string)
    quoted.append(bad).append("'");
    EXPECT_NE(m.find(quoted), std::string::npos) << m;
    EXPECT_NE(m.find("auto, host (or cpu) or nvme"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace tierflow
