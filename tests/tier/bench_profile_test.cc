// The profile `bench all` writes is what the planner reads: every rate
// round-trips through ParseBandwidthProfile, a missing bench keeps the
// defaults, and a bench output without its rate is refused.
#include "tier/bench_profile.h"

#include <gtest/gtest.h>

#include "plan/bandwidth_profile.h"

namespace tierflow::tier {
namespace {

nlohmann::json CopyOut() {
  return {{"results",
           {{{"direction", "h2d"},
             {"host_memory", "pinned"},
             {"best_gb_per_second", 21.5},
             {"median_gb_per_second", 20}},
            {{"direction", "h2d"},
             {"host_memory", "pageable"},
             {"best_gb_per_second", 9.0},
             {"median_gb_per_second", 8}},
            {{"direction", "d2h"},
             {"host_memory", "pinned"},
             {"best_gb_per_second", 19.25},
             {"median_gb_per_second", 19}}}}};
}
nlohmann::json AdamOut() {
  return {{"params_per_second", 1.5e9},
          {"bandwidth_limit_gb_per_second", 47.0},
          {"ratio_to_limit", 0.9}};
}
nlohmann::json NvmeOut() { return {{"read_gb_per_second", 6.5}, {"write_gb_per_second", 4.25}}; }

TEST(BenchProfile, RoundTripsThroughThePlannersReader) {
  auto p = MakeBandwidthProfile(CopyOut(), AdamOut(), NvmeOut());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const Bandwidths base = DefaultBandwidths(/*device_is_gpu=*/true, 8);
  auto b = ParseBandwidthProfile(p->dump(), "test", base);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->h2d_gb_per_second, 21.5);
  EXPECT_EQ(b->d2h_gb_per_second, 19.25);
  EXPECT_EQ(b->adam_params_per_second, 1.5e9);
  EXPECT_EQ(b->host_memory_gb_per_second, 47.0);
  EXPECT_EQ(b->nvme_read_gb_per_second, 6.5);
  EXPECT_EQ(b->nvme_write_gb_per_second, 4.25);
  EXPECT_EQ(b->device_tflops, base.device_tflops);  // not measured: the default stays
}

TEST(BenchProfile, SkippedNvmeKeepsDefaults) {
  auto p = MakeBandwidthProfile(CopyOut(), AdamOut(), nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->contains("nvme_read_gb_per_second"));
  const Bandwidths base = DefaultBandwidths(false, 2);
  auto b = ParseBandwidthProfile(p->dump(), "test", base);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->nvme_read_gb_per_second, base.nvme_read_gb_per_second);
  EXPECT_EQ(b->h2d_gb_per_second, 21.5);
}

TEST(BenchProfile, OutputWithoutItsRateIsRefused) {
  nlohmann::json adam = AdamOut();
  adam.erase("params_per_second");
  auto p = MakeBandwidthProfile(CopyOut(), adam, nullptr);
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("params_per_second"), std::string::npos);
  nlohmann::json copy = {{"results", nlohmann::json::array()}};
  EXPECT_FALSE(MakeBandwidthProfile(copy, AdamOut(), nullptr).ok());
}

}  // namespace
}  // namespace tierflow::tier
