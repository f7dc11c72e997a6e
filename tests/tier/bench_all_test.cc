// `tierflow bench all --out PROFILE.json` end to end (small sizes): the file
// it writes loads through LoadBandwidthProfile with every measured rate, and
// without --nvme-path the NVMe rates keep the planner's defaults.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "plan/bandwidth_profile.h"
#include "tests/tier/tier_test_util.h"

namespace tierflow {
namespace {

int RunTierflow(const std::string& args) {
  const std::string cmd = std::string(TIERFLOW_BINARY) + " " + args + " > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

TEST(BenchAll, WritesAProfileThePlannerLoads) {
  tier_test::TempDir dir;
  const std::string small = " --device cpu --copy-size 1MiB --adam-params 64Ki --nvme-size 8MiB";
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

  ASSERT_EQ(RunTierflow("bench all --out " + (dir / "q.json") + small), 0);
  auto q = LoadBandwidthProfile(dir / "q.json", base);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->nvme_read_gb_per_second, base.nvme_read_gb_per_second);
  EXPECT_EQ(q->nvme_write_gb_per_second, base.nvme_write_gb_per_second);
}

}  // namespace
}  // namespace tierflow
