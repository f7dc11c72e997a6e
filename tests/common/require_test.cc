// TIERFLOW_REQUIRE turns a capability skip into a failure (tests/common/require.h).
#include "tests/common/require.h"

#include <stdlib.h>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

namespace tierflow::testing_common {
namespace {

class RequireEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("TIERFLOW_REQUIRE");
    had_ = old != nullptr;
    if (had_) old_ = old;
  }
  void TearDown() override {
    if (had_) {
      ::setenv("TIERFLOW_REQUIRE", old_.c_str(), 1);
    } else {
      ::unsetenv("TIERFLOW_REQUIRE");
    }
  }
  bool had_ = false;
  std::string old_;
};

TEST_F(RequireEnv, ParsesACommaSeparatedList) {
  EXPECT_EQ(ParseRequiredCapabilities(" gpu, memlock ,,tmpfs"),
            (std::set<std::string>{"gpu", "memlock", "tmpfs"}));
  EXPECT_TRUE(ParseRequiredCapabilities("").empty());
}

TEST_F(RequireEnv, OnlyNamedCapabilitiesAreRequired) {
  ::unsetenv("TIERFLOW_REQUIRE");
  EXPECT_FALSE(CapabilityRequired("gpu"));
  ::setenv("TIERFLOW_REQUIRE", "memlock,gpu", 1);
  EXPECT_TRUE(CapabilityRequired("gpu"));
  EXPECT_TRUE(CapabilityRequired("memlock"));
  EXPECT_FALSE(CapabilityRequired("tmpfs"));
}

TEST_F(RequireEnv, AnUnknownNameRequiresEverything) {
  ::setenv("TIERFLOW_REQUIRE", "gpus", 1);  // a typo must not require nothing
  EXPECT_TRUE(CapabilityRequired("gpu"));
  EXPECT_TRUE(CapabilityRequired("tmpfs"));
}

void SkipForGpu() { TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: test"; }

TEST_F(RequireEnv, ARequiredCapabilityFailsInsteadOfSkipping) {
  ::setenv("TIERFLOW_REQUIRE", "gpu", 1);
  EXPECT_FATAL_FAILURE(SkipForGpu(), "no GPU: test");
}

}  // namespace
}  // namespace tierflow::testing_common
