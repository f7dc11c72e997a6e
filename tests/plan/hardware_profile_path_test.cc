// The default profile location (XDG cache), the choice between --profile,
// the default file and the defaults, and the line that says which rates a
// run uses and how old they are.
#include "plan/hardware_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;

// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DefaultProfile, FollowsTheXdgCacheConvention) {
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/var/cache/me");
    ScopedEnv home("HOME", "/home/me");
    auto p = DefaultProfilePath();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p, "/var/cache/me/tierflow/profile.json");
  }
  {
    // A relative XDG_CACHE_HOME is invalid by the convention: ignored.
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/cache");
    ScopedEnv home("HOME", "/home/me");
    auto p = DefaultProfilePath();
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, "/home/me/.cache/tierflow/profile.json");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", nullptr);
    auto p = DefaultProfilePath();
    EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(p.status().message(), HasSubstr("--profile"));
  }
}

TEST(DefaultProfile, GivenThenDefaultFileThenNone) {
  testing_common::ScratchDir dir("tierflow-profile-");
  ScopedEnv xdg("XDG_CACHE_HOME", dir.path().c_str());
  std::string looked_at;
  auto given = ResolveProfilePath("/some/where.json", &looked_at);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->value_or(""), "/some/where.json");
  EXPECT_TRUE(looked_at.empty());

  const std::string path = dir.path() + "/tierflow/profile.json";
  auto none = ResolveProfilePath("", &looked_at);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(looked_at, path);

  std::filesystem::create_directories(dir.path() + "/tierflow");
  std::ofstream(path) << R"({"version": 1, "adam_params_per_second": 5e8})";
  auto found = ResolveProfilePath("", &looked_at);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->value_or(""), path);
}

// Finding 12: a corrupt cached profile blocked every plan and train without
// saying how to recover. Nobody named that file, so the error names it and
// says what to do: measure again, delete it, or name another.
TEST(DefaultProfile, ACorruptCachedProfileNamesTheFileAndHowToRecover) {
  testing_common::ScratchDir dir("tierflow-profile-");
  ScopedEnv xdg("XDG_CACHE_HOME", dir.path().c_str());
  const std::string path = dir.path() + "/tierflow/profile.json";
  std::filesystem::create_directories(dir.path() + "/tierflow");
  for (const char* text :
       {R"({"version": 1, "h2d_gb_per_)",  // cut short by a crash
        R"({"version": 2, "h2d_gb_per_second": 20})", R"({"version": 1, "device_tflops": -3})",
        R"({"version": 1, "nvme_store": {"block_size_bytes": "big"}})"}) {
    std::ofstream(path, std::ios::trunc) << text;
    std::string looked_at;
    auto resolved = ResolveProfilePath("", &looked_at);
    ASSERT_FALSE(resolved.ok()) << text;
    EXPECT_EQ(resolved.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = resolved.status().message();
    EXPECT_THAT(m, HasSubstr("cached hardware profile " + path)) << text;
    EXPECT_THAT(m, HasSubstr("Re-run `tierflow bench all`")) << text;
    EXPECT_THAT(m, HasSubstr("delete it")) << text;
    EXPECT_THAT(m, HasSubstr("--profile FILE")) << text;
  }
  // A profile given by name is the user's own: its load names it (unchanged).
  std::string looked_at;
  EXPECT_TRUE(ResolveProfilePath(path, &looked_at).ok());
}

TEST(DefaultProfile, SaysWhichRatesAndHowOld) {
  const Bandwidths defaults = DefaultBandwidths(false, 2);
  EXPECT_EQ(DescribeRates(defaults, 1000, "/c/tierflow/profile.json"),
            "defaults; no profile at /c/tierflow/profile.json: `tierflow bench all` measures this "
            "machine and writes one there");

  auto b = ParseHardwareProfile(R"({"version": 1, "measured_unix": 1000000})", "p.json", defaults);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->rates.measured_unix, 1000000);
  EXPECT_THAT(DescribeRates(b->rates, 1000000 + 30, ""), HasSubstr("measured 30 s ago"));
  EXPECT_THAT(DescribeRates(b->rates, 1000000 + 3 * 3600 + 5, ""), HasSubstr("measured 3 h ago"));
  EXPECT_THAT(DescribeRates(b->rates, 1000000 + 40 * 86400, ""), HasSubstr("measured 40 days ago"));
  EXPECT_THAT(DescribeRates(b->rates, 1000000 - 50, ""), HasSubstr("in the future"));
  EXPECT_THAT(DescribeRates(b->rates, 1000000, ""), HasSubstr("profile p.json"));

  auto old = ParseHardwareProfile(R"({"version": 1})", "old.json", defaults);
  ASSERT_TRUE(old.ok());
  EXPECT_THAT(DescribeRates(old->rates, 1000, ""), HasSubstr("unknown age"));

  for (const char* bad :
       {R"({"version": 1, "measured_unix": -5})", R"({"version": 1, "measured_unix": "yesterday"})",
        R"({"version": 1, "measured_unix": 1.5})"}) {
    auto r = ParseHardwareProfile(bad, "bad.json", defaults);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("measured_unix")) << bad;
  }
}

}  // namespace
}  // namespace tierflow
