// Bandwidth profiles: a full profile replaces the defaults, a partial one
// keeps the rest, and bad files are refused naming the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/hardware_profile.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;

TEST(BandwidthProfile, DefaultsAreStatedAndPositive) {
  for (bool gpu : {false, true}) {
    Bandwidths b = DefaultBandwidths(gpu, 4);
    EXPECT_EQ(b.source, "defaults");
    for (double v : {b.h2d_gb_per_second, b.d2h_gb_per_second, b.host_memory_gb_per_second,
                     b.adam_params_per_second, b.nvme_read_gb_per_second,
                     b.nvme_write_gb_per_second, b.device_tflops, b.device_efficiency}) {
      EXPECT_GT(v, 0);
    }
  }
  // The CPU optimizer never beats host memory at 30 B per parameter.
  Bandwidths many = DefaultBandwidths(true, 256);
  EXPECT_LE(many.adam_params_per_second, many.host_memory_gb_per_second * 1e9 / 30 + 1);
  EXPECT_GT(DefaultBandwidths(true, 8).device_tflops, DefaultBandwidths(false, 8).device_tflops);
}

TEST(BandwidthProfile, FullProfileReplacesEveryRate) {
  auto b = ParseHardwareProfile(R"({"version": 1, "h2d_gb_per_second": 51.5,
      "d2h_gb_per_second": 50.0, "host_memory_gb_per_second": 80, "adam_params_per_second": 2e9,
      "nvme_read_gb_per_second": 12, "nvme_write_gb_per_second": 9, "device_tflops": 700,
      "device_efficiency": 0.5, "intra_node_busbw_gb_per_second": 21.5,
      "inter_node_busbw_gb_per_second": 23, "machine": "ignored"})",
                                "bench.json", DefaultBandwidths(true, 8));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_DOUBLE_EQ(b->rates.h2d_gb_per_second, 51.5);
  EXPECT_DOUBLE_EQ(b->rates.adam_params_per_second, 2e9);
  EXPECT_DOUBLE_EQ(b->rates.device_tflops, 700);
  EXPECT_DOUBLE_EQ(b->rates.device_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(b->rates.intra_node_busbw_gb_per_second, 21.5);
  EXPECT_DOUBLE_EQ(b->rates.inter_node_busbw_gb_per_second, 23);
  EXPECT_THAT(b->rates.source, HasSubstr("bench.json"));
  EXPECT_THAT(b->rates.source, HasSubstr("10 of 10"));
}

TEST(BandwidthProfile, PartialProfileKeepsTheBase) {
  Bandwidths base = DefaultBandwidths(true, 8);
  auto b = ParseHardwareProfile(R"({"version": 1, "nvme_read_gb_per_second": 7})", "p.json", base);
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(b->rates.nvme_read_gb_per_second, 7);
  EXPECT_DOUBLE_EQ(b->rates.h2d_gb_per_second, base.h2d_gb_per_second);
  EXPECT_DOUBLE_EQ(b->rates.intra_node_busbw_gb_per_second, base.intra_node_busbw_gb_per_second);
  EXPECT_THAT(b->rates.source, HasSubstr("1 of 10"));
  EXPECT_THAT(b->rates.source, HasSubstr("defaults"));
}

TEST(BandwidthProfile, BadProfilesAreRefusedNamingTheKey) {
  Bandwidths base = DefaultBandwidths(false, 2);
  auto no_version = ParseHardwareProfile(R"({"h2d_gb_per_second": 5})", "p.json", base);
  ASSERT_FALSE(no_version.ok());
  EXPECT_THAT(no_version.status().message(), HasSubstr("version: must be 1"));
  auto negative =
      ParseHardwareProfile(R"({"version": 1, "d2h_gb_per_second": -3})", "p.json", base);
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(),
              HasSubstr("d2h_gb_per_second: expected a positive number, got -3"));
  auto text = ParseHardwareProfile(R"({"version": 1, "device_tflops": "fast"})", "p.json", base);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr("device_tflops:"));
  auto efficiency =
      ParseHardwareProfile(R"({"version": 1, "device_efficiency": 2})", "p.json", base);
  EXPECT_FALSE(efficiency.ok());
  auto broken = ParseHardwareProfile("{", "p.json", base);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("p.json"));
  auto missing = LoadHardwareProfile("/nonexistent/profile.json", base);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(BandwidthProfile, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  const Bandwidths base = DefaultBandwidths(false, 4);
  auto b = ParseHardwareProfile(
      "{\"version\": 1, \"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
      "deep.json", base);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("deep.json"));
  EXPECT_THAT(b.status().message(), HasSubstr("nested deeper than 64"));
}

TEST(BandwidthProfile, DuplicateRatesAndWrappingVersionsAreRefused) {
  const Bandwidths base = DefaultBandwidths(false, 4);
  auto dup = ParseHardwareProfile(
      R"({"version": 1, "nvme_read_gb_per_second": 7, "nvme_read_gb_per_second": 70})", "p.json",
      base);
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("nvme_read_gb_per_second"));
  // 2^32 + 1 narrowed to int was 1.
  auto wrapped = ParseHardwareProfile(R"({"version": 4294967297})", "p.json", base);
  ASSERT_FALSE(wrapped.ok());
  EXPECT_THAT(wrapped.status().message(), HasSubstr("version: must be 1"));
}

}  // namespace
}  // namespace tierflow
