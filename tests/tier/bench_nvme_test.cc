// `tierflow bench nvme` end to end on small sizes in a temporary directory:
// --tune's JSON (both stages, the best each way, the choice, the raw loop's
// best and both ratios), the choice written into --profile, a second run
// that measures the profile's settings, refused flag combinations, and
// nothing left in the directory but the profile. No timing is asserted.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "plan/hardware_profile.h"
#include "tests/tier/tier_test_util.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;

struct CommandRun {
  int exit_code = -1;
  std::string out, err;
};

CommandRun Tierflow(const std::string& args) {
  testing_common::ScratchDir logs("tierflow-bench-nvme-logs-");
  const std::string cmd =
      std::string(TIERFLOW_BINARY) + " " + args + " > " + (logs / "out") + " 2> " + (logs / "err");
  CommandRun r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = tier_test::ReadFile(logs / "out");
  r.err = tier_test::ReadFile(logs / "err");
  return r;
}

void ExpectSettings(const nlohmann::json& j) {
  for (const char* k : {"block_size_bytes", "queue_depth", "num_rings", "in_flight"}) {
    ASSERT_TRUE(j.contains(k) && j[k].is_number_unsigned()) << k << " in " << j;
  }
}

TEST(BenchNvme, TuneReportsTheSweepAndWritesItsChoiceIntoTheProfile) {
  tier_test::TempDir dir;
  const std::string profile = dir / "profile.json";
  const std::string small = " --path " + dir.path() + " --size 2MiB --chunk 512KiB";
  CommandRun tune =
      Tierflow("bench nvme" + small + " --tune --sweep-size 1MiB --json --profile " + profile);
  ASSERT_EQ(tune.exit_code, 0) << tune.err;
  const nlohmann::json j = nlohmann::json::parse(tune.out);
  ASSERT_TRUE(j.contains("tune")) << j;
  const nlohmann::json& t = j["tune"];
  // Stage 1: {1,4,16,64} MiB x queue depths {2,8,32}; stage 2: rings {1,2} x
  // in flight {1,2,4,8} less the point stage 1 measured.
  ASSERT_EQ(t["points"].size(), 12u + 7u);
  for (size_t i = 0; i < t["points"].size(); ++i) {
    const nlohmann::json& p = t["points"][i];
    ExpectSettings(p);
    EXPECT_GT(p["write_gb_per_second"].get<double>(), 0);
    EXPECT_GT(p["read_gb_per_second"].get<double>(), 0);
    EXPECT_EQ(p.contains("raw_write_gb_per_second"), i < 12) << "the raw loop runs in stage 1";
  }
  ExpectSettings(t["best_write"]);
  ExpectSettings(t["best_read"]);
  ExpectSettings(t["chosen"]);
  EXPECT_THAT(t["chosen_by"].get<std::string>(), HasSubstr("write and then read"));
  // The main run measured the choice.
  EXPECT_EQ(j["block_size_bytes"], t["chosen"]["block_size_bytes"]);
  EXPECT_EQ(j["in_flight"], t["chosen"]["in_flight"]);
  for (const char* ratio : {"ratio_to_raw_same_setting", "ratio_to_raw_best"}) {
    EXPECT_GT(j[ratio]["write"].get<double>(), 0) << ratio;
    EXPECT_GT(j[ratio]["read"].get<double>(), 0) << ratio;
  }
  // The best raw figure is at least the raw figure at the store's own setting.
  EXPECT_GE(j["raw_best"]["write_gb_per_second"].get<double>(),
            j["raw_write_gb_per_second"].get<double>());
  EXPECT_GE(j["raw_best"]["read_gb_per_second"].get<double>(),
            j["raw_read_gb_per_second"].get<double>());

  auto stored = LoadHardwareProfile(profile, Bandwidths{});
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(stored->nvme_store.has_value());
  EXPECT_EQ(stored->nvme_store->io.block_size_bytes,
            t["chosen"]["block_size_bytes"].get<uint32_t>());
  EXPECT_EQ(stored->nvme_store->io.queue_depth, t["chosen"]["queue_depth"].get<uint32_t>());
  EXPECT_EQ(stored->nvme_store->io.num_rings, t["chosen"]["num_rings"].get<uint32_t>());
  EXPECT_EQ(stored->nvme_store->in_flight, t["chosen"]["in_flight"].get<uint32_t>());

  // Without --tune, --profile names the settings measured; a flag given overrides one.
  CommandRun again = Tierflow("bench nvme" + small + " --json --profile " + profile);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const nlohmann::json a = nlohmann::json::parse(again.out);
  EXPECT_EQ(a["block_size_bytes"].get<uint32_t>(), stored->nvme_store->io.block_size_bytes);
  EXPECT_THAT(a["settings_source"].get<std::string>(), HasSubstr(profile));
  EXPECT_FALSE(a.contains("tune"));
  ASSERT_EQ(a["raw_scan"].size(), 4u) << "the raw loop at each block size";
  CommandRun flag = Tierflow("bench nvme" + small + " --json --queue-depth 3 --profile " + profile);
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(nlohmann::json::parse(flag.out)["queue_depth"], 3);

  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_THAT(left, ::testing::ElementsAre("profile.json")) << "only the profile is left";
}

TEST(BenchNvme, RefusesContradictionsAndUntunedProfiles) {
  tier_test::TempDir dir;
  CommandRun both = Tierflow("bench nvme --path " + dir.path() + " --tune --block-size 1MiB");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_THAT(both.err, HasSubstr("--tune chooses the block size"));
  const std::string untuned = dir / "old.json";
  std::ofstream(untuned) << R"({"version": 1, "nvme_read_gb_per_second": 3})";
  CommandRun old =
      Tierflow("bench nvme --path " + dir.path() + " --size 1MiB --profile " + untuned);
  EXPECT_NE(old.exit_code, 0);
  EXPECT_THAT(old.err, HasSubstr("has no nvme_store settings (not tuned)"));
  std::ofstream(dir / "bad.json") << R"({"version": 1, "nvme_store": {"block_size_bytes": 1000,
      "queue_depth": 8, "num_rings": 1, "in_flight": 2}})";
  CommandRun bad =
      Tierflow("bench nvme --path " + dir.path() + " --size 1MiB --profile " + (dir / "bad.json"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("nvme_store.block_size_bytes is 1000"));
}

}  // namespace
}  // namespace tierflow
