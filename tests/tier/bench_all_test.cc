// `tierflow bench all --out PROFILE.json` end to end (small sizes): the file
// it writes loads through LoadHardwareProfile with every measured rate, and
// without --nvme-path the NVMe rates keep the planner's defaults; the profile
// names the CPU optimizer's instruction-set level.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/cpu_isa.h"
#include "plan/hardware_profile.h"
#include "tests/common/run_command.h"
#include "tests/tier/tier_test_util.h"

namespace tierflow {
namespace {

int RunTierflow(const std::string& args) {
  const std::string cmd = std::string(TIERFLOW_BINARY) + " " + args + " > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

// Runs `env tierflow args`, returns its stdout and stderr together.
std::string RunTierflowOutput(const std::string& env, const std::string& args) {
  return testing_common::RunCommand(env + " " + std::string(TIERFLOW_BINARY) + " " + args + " 2>&1")
      .output;
}

TEST(BenchAll, WritesAProfileThePlannerLoads) {
  tier_test::TempDir dir;
  const std::string small =
      " --device cpu --copy-size 1MiB --adam-params 64Ki --nvme-size 8MiB --nvme-sweep-size 1MiB";
  ASSERT_EQ(
      RunTierflow("bench all --out " + (dir / "p.json") + small + " --nvme-path " + dir.path()), 0);
  const Bandwidths base = DefaultBandwidths(false, 2);
  auto b = LoadHardwareProfile(dir / "p.json", base);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (double rate : {b->rates.h2d_gb_per_second, b->rates.d2h_gb_per_second,
                      b->rates.host_memory_gb_per_second, b->rates.adam_params_per_second,
                      b->rates.nvme_read_gb_per_second, b->rates.nvme_write_gb_per_second}) {
    EXPECT_GT(rate, 0);
  }
  EXPECT_NE(b->rates.nvme_read_gb_per_second, base.nvme_read_gb_per_second);
  EXPECT_NE(b->rates.adam_params_per_second, base.adam_params_per_second);
  // The profile names the optimizer's instruction-set level.
  const nlohmann::json profile = nlohmann::json::parse(tier_test::ReadFile(dir / "p.json"));
  ASSERT_TRUE(profile.contains("cpu_isa")) << profile;
  EXPECT_TRUE(ParseIsa(profile["cpu_isa"].get<std::string>()).ok()) << profile["cpu_isa"];

  // The NVMe tune's choice is in the profile, where `train --profile` reads it.
  auto store = LoadHardwareProfile(dir / "p.json", Bandwidths{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(store->nvme_store.has_value());

  ASSERT_EQ(RunTierflow("bench all --out " + (dir / "q.json") + small), 0);
  auto q = LoadHardwareProfile(dir / "q.json", base);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->rates.nvme_read_gb_per_second, base.nvme_read_gb_per_second);
  EXPECT_EQ(q->rates.nvme_write_gb_per_second, base.nvme_write_gb_per_second);
}

// Without --out, bench all saves the profile where plan (and train) look for
// one by default, with the time it was measured; plan then says it uses
// that profile and how old it is, and without one, where it looked.
TEST(BenchAll, SavesTheDefaultProfileThatPlanUses) {
  tier_test::TempDir dir;
  const std::string env = "XDG_CACHE_HOME=" + dir.path();
  const std::string small = " --device cpu --copy-size 1MiB --adam-params 64Ki";
  const std::string out = RunTierflowOutput(env, "bench all" + small);
  const std::string path = dir / "tierflow/profile.json";
  ASSERT_NE(out.find("wrote " + path), std::string::npos) << out;
  const nlohmann::json profile = nlohmann::json::parse(tier_test::ReadFile(path));
  ASSERT_TRUE(profile.contains("measured_unix")) << profile;
  EXPECT_GT(profile["measured_unix"].get<int64_t>(), 1700000000);

  const std::string plan_args = "plan --model tiny-llama --device cpu --seq-len 32";
  const std::string plan = RunTierflowOutput(env, plan_args);
  EXPECT_NE(plan.find("(profile " + path), std::string::npos) << plan;
  EXPECT_NE(plan.find(" s ago"), std::string::npos) << plan;

  tier_test::TempDir empty;
  const std::string bare = RunTierflowOutput("XDG_CACHE_HOME=" + empty.path(), plan_args);
  EXPECT_NE(bare.find("(defaults; no profile at " + (empty / "tierflow/profile.json")),
            std::string::npos)
      << bare;
}

}  // namespace
}  // namespace tierflow
