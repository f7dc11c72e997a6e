// The profile `bench all` writes is what the planner reads: every rate
// round-trips through ParseHardwareProfile, a missing bench keeps the
// defaults, and a bench output without its rate is refused. The NVMe tune's
// choice becomes the profile's nvme_store (through the profile's own reader),
// and `bench nvme --tune --profile` updates a profile file keeping the rest.
#include "plan/hardware_profile.h"

#include <fstream>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

namespace tierflow {
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
  auto p = MakeHardwareProfile(CopyOut(), AdamOut(), NvmeOut());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const Bandwidths base = DefaultBandwidths(/*device_is_gpu=*/true, 8);
  auto b = ParseHardwareProfile(p->dump(), "test", base);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // Each measured rate as the bench output gave it; device_tflops was not
  // measured, so the default stays.
  const std::pair<double Bandwidths::*, double> want[] = {
      {&Bandwidths::h2d_gb_per_second, 21.5},
      {&Bandwidths::d2h_gb_per_second, 19.25},
      {&Bandwidths::adam_params_per_second, 1.5e9},
      {&Bandwidths::host_memory_gb_per_second, 47.0},
      {&Bandwidths::nvme_read_gb_per_second, 6.5},
      {&Bandwidths::nvme_write_gb_per_second, 4.25},
      {&Bandwidths::device_tflops, base.device_tflops}};
  for (const auto& [rate, value] : want) EXPECT_EQ(b->rates.*rate, value);
}

TEST(BenchProfile, SkippedNvmeKeepsDefaults) {
  auto p = MakeHardwareProfile(CopyOut(), AdamOut(), nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->contains("nvme_read_gb_per_second"));
  const Bandwidths base = DefaultBandwidths(false, 2);
  auto b = ParseHardwareProfile(p->dump(), "test", base);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->rates.nvme_read_gb_per_second, base.nvme_read_gb_per_second);
  EXPECT_EQ(b->rates.h2d_gb_per_second, 21.5);
}

TEST(BenchProfile, OutputWithoutItsRateIsRefused) {
  nlohmann::json adam = AdamOut();
  adam.erase("params_per_second");
  auto p = MakeHardwareProfile(CopyOut(), adam, nullptr);
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("params_per_second"), std::string::npos);
  nlohmann::json copy = {{"results", nlohmann::json::array()}};
  EXPECT_FALSE(MakeHardwareProfile(copy, AdamOut(), nullptr).ok());
}

nlohmann::json TunedNvmeOut(uint32_t block) {
  nlohmann::json n = NvmeOut();
  n["tune"] = {{"chosen",
                {{"block_size_bytes", block},
                 {"queue_depth", 8},
                 {"num_rings", 1},
                 {"in_flight", 2},
                 {"write_gb_per_second", 4.25},
                 {"read_gb_per_second", 6.5}}}};
  return n;
}

TEST(BenchProfile, TheTunesChoiceBecomesTheProfilesNvmeStore) {
  auto p = MakeHardwareProfile(CopyOut(), AdamOut(), TunedNvmeOut(16u << 20));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto store = NvmeStoreProfileFromJson(*p, "test");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(store->has_value());
  EXPECT_EQ((*store)->io.block_size_bytes, 16u << 20);
  EXPECT_EQ((*store)->io.queue_depth, 8u);
  EXPECT_EQ((*store)->in_flight, 2u);
  // Without a tune there is no nvme_store: "not tuned".
  auto plain = MakeHardwareProfile(CopyOut(), AdamOut(), NvmeOut());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->contains("nvme_store"));
  // A choice out of bounds is refused, not written.
  auto bad = MakeHardwareProfile(CopyOut(), AdamOut(), TunedNvmeOut(1000));
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("nvme_store.block_size_bytes"));
}

TEST(BenchProfile, TheTuneUpdatesAProfileFileKeepingTheRest) {
  testing_common::ScratchDir dir("tierflow-profile-");
  // No file yet: a new version-1 profile.
  ASSERT_TRUE(WriteNvmeToProfileFile(dir / "new.json", TunedNvmeOut(4u << 20)).ok());
  auto made = LoadHardwareProfile(dir / "new.json", Bandwidths{});
  ASSERT_TRUE(made.ok() && made->nvme_store.has_value()) << made.status().ToString();
  EXPECT_EQ(made->nvme_store->io.block_size_bytes, 4u << 20);
  // A `bench all` profile: its other rates survive.
  auto full = MakeHardwareProfile(CopyOut(), AdamOut(), NvmeOut());
  ASSERT_TRUE(full.ok());
  std::ofstream(dir / "all.json") << full->dump();
  ASSERT_TRUE(WriteNvmeToProfileFile(dir / "all.json", TunedNvmeOut(64u << 20)).ok());
  auto rates = LoadHardwareProfile(dir / "all.json", DefaultBandwidths(true, 8));
  ASSERT_TRUE(rates.ok()) << rates.status().ToString();
  EXPECT_EQ(rates->rates.h2d_gb_per_second, 21.5);
  EXPECT_EQ(rates->rates.adam_params_per_second, 1.5e9);
  auto tuned = LoadHardwareProfile(dir / "all.json", Bandwidths{});
  ASSERT_TRUE(tuned.ok() && tuned->nvme_store.has_value());
  EXPECT_EQ(tuned->nvme_store->io.block_size_bytes, 64u << 20);
  // Something that is not a profile is left alone.
  std::ofstream(dir / "other.json") << R"({"model": "x"})";
  Status s = WriteNvmeToProfileFile(dir / "other.json", TunedNvmeOut(4u << 20));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("not a version-1 tierflow profile"));
  EXPECT_EQ(testing_common::ReadWholeFile(dir / "other.json"), R"({"model": "x"})");
}

// `bench comm --profile`: the slower of reduce-scatter and all-gather at
// the largest size becomes the within-node (one node) or between-node bus
// bandwidth the planner reads; the rest of the profile is kept.
nlohmann::json CommOut(int nodes, double rs_large, double ag_large) {
  auto row = [](const char* op, uint64_t bytes, double busbw) {
    return nlohmann::json{{"op", op}, {"bytes", bytes}, {"busbw_gb_per_second", busbw}};
  };
  return {{"backend", "mpi"},
          {"world_size", 4},
          {"nodes", nodes},
          {"rows",
           {row("all_reduce", 64u << 20, 0.5), row("reduce_scatter", 1u << 20, 0.1),
            row("all_gather", 1u << 20, 0.2), row("reduce_scatter", 64u << 20, rs_large),
            row("all_gather", 64u << 20, ag_large)}}};
}

TEST(BenchProfile, TheCollectivesBusBandwidthGoesWhereTheRanksRan) {
  testing_common::ScratchDir dir("tierflow-profile-");
  auto full = MakeHardwareProfile(CopyOut(), AdamOut(), NvmeOut());
  ASSERT_TRUE(full.ok());
  std::ofstream(dir / "p.json") << full->dump();
  ASSERT_TRUE(WriteCommToProfileFile(dir / "p.json", CommOut(1, 3.5, 2.25)).ok());
  ASSERT_TRUE(WriteCommToProfileFile(dir / "p.json", CommOut(2, 1.5, 4.0)).ok());
  const Bandwidths base = DefaultBandwidths(true, 8);
  auto rates = LoadHardwareProfile(dir / "p.json", base);
  ASSERT_TRUE(rates.ok()) << rates.status().ToString();
  EXPECT_EQ(rates->rates.intra_node_busbw_gb_per_second, 2.25);
  EXPECT_EQ(rates->rates.inter_node_busbw_gb_per_second, 1.5);
  EXPECT_EQ(rates->rates.h2d_gb_per_second, 21.5);  // kept
  // Without both collectives at the largest size, nothing is written.
  nlohmann::json partial = CommOut(1, 3.5, 2.25);
  partial["rows"].erase(partial["rows"].size() - 1);
  auto refused = SetCommInProfile(*full, partial);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("reduce_scatter and all_gather"));
}

}  // namespace
}  // namespace tierflow
