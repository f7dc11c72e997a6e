// `tierflow bench all --out PROFILE.json` end to end (small sizes): the file
// it writes loads through LoadBandwidthProfile with every measured rate, and
// without --nvme-path the NVMe rates keep the planner's defaults; the profile
// names the CPU optimizer's instruction-set level.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "common/cpu_isa.h"
#include "plan/bandwidth_profile.h"
#include "plan/nvme_profile.h"
#include "tests/tier/tier_test_util.h"

namespace tierflow {
namespace {

int RunTierflow(const std::string& args) {
  const std::string cmd = std::string(TIERFLOW_BINARY) + " " + args + " > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

TEST(BenchAll, WritesAProfileThePlannerLoads) {
  tier_test::TempDir dir;
  const std::string small =
      " --device cpu --copy-size 1MiB --adam-params 64Ki --nvme-size 8MiB --nvme-sweep-size 1MiB";
  ASSERT_EQ(
      RunTierflow("bench all --out " + (dir / "p.json") + small + " --nvme-path " + dir.path()), 0);
  const Bandwidths base = DefaultBandwidths(false, 2);
  auto b = LoadBandwidthProfile(dir / "p.json", base);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (double rate :
       {b->h2d_gb_per_second, b->d2h_gb_per_second, b->host_memory_gb_per_second,
        b->adam_params_per_second, b->nvme_read_gb_per_second, b->nvme_write_gb_per_second}) {
    EXPECT_GT(rate, 0);
  }
  EXPECT_NE(b->nvme_read_gb_per_second, base.nvme_read_gb_per_second);
  EXPECT_NE(b->adam_params_per_second, base.adam_params_per_second);
  // The profile names the optimizer's instruction-set level.
  const nlohmann::json profile = nlohmann::json::parse(tier_test::ReadFile(dir / "p.json"));
  ASSERT_TRUE(profile.contains("cpu_isa")) << profile;
  EXPECT_TRUE(ParseIsa(profile["cpu_isa"].get<std::string>()).ok()) << profile["cpu_isa"];

  // The NVMe tune's choice is in the profile, where `train --profile` reads it.
  auto store = LoadNvmeStoreProfile(dir / "p.json");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(store->has_value());

  ASSERT_EQ(RunTierflow("bench all --out " + (dir / "q.json") + small), 0);
  auto q = LoadBandwidthProfile(dir / "q.json", base);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->nvme_read_gb_per_second, base.nvme_read_gb_per_second);
  EXPECT_EQ(q->nvme_write_gb_per_second, base.nvme_write_gb_per_second);
}

}  // namespace
}  // namespace tierflow
