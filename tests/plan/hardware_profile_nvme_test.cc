// The profile's "nvme_store" settings: they round-trip, a profile without
// them (every one written before the tune) reads as "not tuned" and still
// loads its rates, and every out-of-bounds or missing field is refused with
// the file and the field named. Also the planner's rounding to the NVMe
// tier's block size.
#include "plan/hardware_profile.h"

#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/memory_model.h"
#include "plan/planner.h"
#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

NvmeStoreProfile Tuned() {
  NvmeStoreProfile p;
  p.io = {16u << 20, 8, 2};
  p.in_flight = 4;
  p.write_gb_per_second = 1.9;
  p.read_gb_per_second = 1.25;
  return p;
}

nlohmann::json WithStore(const nlohmann::json& store) {
  return {{"version", 1}, {"nvme_read_gb_per_second", 3.0}, {"nvme_store", store}};
}

TEST(NvmeProfile, RoundTrips) {
  auto back = NvmeStoreProfileFromJson(WithStore(NvmeStoreProfileToJson(Tuned())), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->io, Tuned().io);
  EXPECT_EQ((*back)->in_flight, 4u);
  EXPECT_EQ((*back)->write_gb_per_second, 1.9);
  EXPECT_EQ((*back)->read_gb_per_second, 1.25);
}

TEST(NvmeProfile, AnOldProfileIsNotTunedAndItsRatesStillLoad) {
  testing_common::ScratchDir dir;
  const std::string old = dir / "old.json";
  std::ofstream(old) << R"({"version": 1, "nvme_read_gb_per_second": 3.5})";
  auto store = LoadHardwareProfile(old, Bandwidths{});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_FALSE(store->nvme_store.has_value());
  // A tuned profile still loads in the planner's reader (the section is one
  // of the keys it does not know).
  const std::string tuned = dir / "tuned.json";
  std::ofstream(tuned) << WithStore(NvmeStoreProfileToJson(Tuned())).dump();
  auto rates = LoadHardwareProfile(tuned, DefaultBandwidths(false, 2));
  ASSERT_TRUE(rates.ok()) << rates.status().ToString();
  EXPECT_EQ(rates->rates.nvme_read_gb_per_second, 3.0);
  auto loaded = LoadHardwareProfile(tuned, Bandwidths{});
  ASSERT_TRUE(loaded.ok() && loaded->nvme_store.has_value()) << loaded.status().ToString();
  EXPECT_EQ(loaded->nvme_store->io, Tuned().io);
}

TEST(NvmeProfile, RefusesBadFieldsNamingFileAndField) {
  struct Case {
    const char* field;
    nlohmann::json value;  // null: remove the field
    const char* says;
  };
  const Case cases[] = {
      {"block_size_bytes", 1000, "multiple of 4096"},
      {"block_size_bytes", 0, "block_size_bytes"},
      {"block_size_bytes", 512u << 20, "block_size_bytes"},
      {"block_size_bytes", "16MiB", "expected an integer"},
      {"block_size_bytes", nullptr, "missing"},
      {"queue_depth", 0, "queue_depth"},
      {"queue_depth", 5000, "queue_depth"},
      {"queue_depth", 2.5, "queue_depth"},
      {"num_rings", 65, "num_rings"},
      {"num_rings", -1, "num_rings"},
      {"in_flight", 0, "in_flight"},
      {"in_flight", 65, "in_flight"},
      {"in_flight", nullptr, "missing"},
      {"write_gb_per_second", 0, "write_gb_per_second"},
      {"read_gb_per_second", "fast", "read_gb_per_second"},
  };
  for (const Case& c : cases) {
    nlohmann::json store = NvmeStoreProfileToJson(Tuned());
    if (c.value.is_null()) {
      store.erase(c.field);
    } else {
      store[c.field] = c.value;
    }
    auto r = NvmeStoreProfileFromJson(WithStore(store), "lab/p.json");
    ASSERT_FALSE(r.ok()) << c.field << " = " << c.value;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(),
                AllOf(HasSubstr("profile 'lab/p.json'"),
                      HasSubstr(std::string("nvme_store.") + c.field), HasSubstr(c.says)))
        << c.field << " = " << c.value;
  }
  auto not_object = NvmeStoreProfileFromJson(WithStore(16), "p.json");
  EXPECT_THAT(not_object.status().message(), HasSubstr("nvme_store"));
}

TEST(NvmeProfile, LoadNamesAMissingOrForeignFile) {
  testing_common::ScratchDir dir;
  auto missing = LoadHardwareProfile(dir / "none.json", Bandwidths{});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().ToString(), HasSubstr("none.json"));
  std::ofstream(dir / "v2.json") << R"({"version": 2})";
  EXPECT_THAT(LoadHardwareProfile(dir / "v2.json").status().message(),
              AllOf(HasSubstr("v2.json"), HasSubstr("version")));
  std::ofstream(dir / "list.json") << "[1, 2]";
  EXPECT_THAT(LoadHardwareProfile(dir / "list.json").status().message(), HasSubstr("JSON object"));
}

TEST(NvmeBlockInThePlan, SubGroupStateRoundsToTheTiersBlock) {
  const ModelConfig m = *PresetModelConfig("tiny-llama");
  const uint64_t block = 16u << 20;
  const SubGroupSummary small = SummarizeSubGroups(m, 40000, 1.0, 12);
  const SubGroupSummary big = SummarizeSubGroups(m, 40000, 1.0, 12, block);
  EXPECT_EQ(big.nvme_sub_groups, small.nvme_sub_groups);
  EXPECT_EQ(big.nvme_block_bytes % block, 0u);
  // Every sub-group here is under one block: one block each.
  EXPECT_EQ(big.nvme_block_bytes, static_cast<uint64_t>(big.nvme_sub_groups) * block);
}

}  // namespace
}  // namespace tierflow
