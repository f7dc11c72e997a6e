// `tierflow bench adam` end to end on a tiny span: the flags that are refused
// (bad --threads forms, an unknown or missing --isa level, --sweep with a
// dtype flag) exit non-zero naming the flag; --sweep --json prints one row
// per level x grad dtype x out dtype; a --threads range one row per count;
// the single-case JSON keeps the keys `bench all`'s profile reads and names
// the instruction-set levels that ran. No timing is asserted.
#include <tbb/info.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/run_command.h"

#include "common/cpu_isa.h"

namespace tierflow {
namespace {

using Run = testing_common::CommandOutput;

Run Tierflow(const std::string& args, bool with_stderr) {
  return testing_common::RunCommand(std::string(TIERFLOW_BINARY) + " " + args +
                                    (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

const char kSmall[] = " --params 4Ki --iterations 1 --rounds 1";

nlohmann::json Json(const std::string& args) {
  Run r = Tierflow("bench adam --json" + std::string(kSmall) + " " + args, false);
  EXPECT_EQ(r.exit_code, 0) << args;
  return nlohmann::json::parse(r.output, nullptr, false);
}

void ExpectRefused(const std::string& args, const std::string& named) {
  Run r = Tierflow("bench adam" + std::string(kSmall) + " " + args, true);
  EXPECT_NE(r.exit_code, 0) << args << " was accepted";
  EXPECT_NE(r.output.find(named), std::string::npos) << args << ": " << r.output;
}

TEST(BenchAdamCli, RefusesBadThreadRangesLevelsAndFlagMixes) {
  const std::string too_many = std::to_string(tbb::info::default_concurrency() + 1);
  for (const std::string& bad : {std::string("2..1"), std::string("0..1"), std::string("1..x"),
                                 std::string("-1"), "1.." + too_many, too_many}) {
    ExpectRefused("--threads " + bad, "--threads '" + bad + "'");
  }
  ExpectRefused("--isa avx9", "--isa");
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!CpuSupportsIsa(isa)) ExpectRefused("--isa " + std::string(IsaName(isa)), "lacks");
  }
  ExpectRefused("--sweep --grad-dtype bf16", "--grad-dtype");
  ExpectRefused("--sweep --out-dtype f16", "--out-dtype");
  ExpectRefused("--out-dtype f8", "--out-dtype");
}

TEST(BenchAdamCli, SweepPrintsEveryLevelAndDtypeCombination) {
  nlohmann::json j = Json("--sweep --threads 1");
  ASSERT_TRUE(j.is_object()) << j;
  ASSERT_TRUE(j["results"].is_array());
  const auto levels = SupportedIsas();
  EXPECT_EQ(j["results"].size(), 12 * levels.size());
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (const auto& row : j["results"]) {
    seen.insert({row["isa"].get<std::string>(), row["grad_dtype"].get<std::string>(),
                 row["out_dtype"].get<std::string>()});
    EXPECT_EQ(row["threads"], 1);
    EXPECT_GT(row["params_per_second"].get<double>(), 0);
    EXPECT_GT(row["ratio_to_limit"].get<double>(), 0);
    EXPECT_GT(row["probes"]["blocked"]["params_per_second"].get<double>(), 0);
    EXPECT_GT(row["probes"]["static"]["params_per_second"].get<double>(), 0);
    EXPECT_EQ(row["ratio_to_peer"].is_number(), !j["peer_isa"].is_null());
  }
  for (Isa isa : levels) {
    for (const char* grad : {"f32", "bf16", "f16"}) {
      for (const char* out : {"none", "f32", "bf16", "f16"}) {
        EXPECT_EQ(seen.count({std::string(IsaName(isa)), grad, out}), 1u)
            << IsaName(isa) << " " << grad << " " << out;
      }
    }
  }
}

TEST(BenchAdamCli, AThreadRangePrintsOneRowPerCount) {
  const int last = std::min(2, tbb::info::default_concurrency());
  nlohmann::json j = Json("--threads 1.." + std::to_string(last) + " --grad-dtype bf16");
  ASSERT_TRUE(j["results"].is_array()) << j;
  ASSERT_EQ(j["results"].size(), static_cast<size_t>(last));
  for (int t = 1; t <= last; ++t) {
    EXPECT_EQ(j["results"][t - 1]["threads"], t);
    EXPECT_EQ(j["results"][t - 1]["grad_dtype"], "bf16");
  }
}

TEST(BenchAdamCli, OneCaseKeepsTheProfileKeysAndNamesTheLevels) {
  const auto levels = SupportedIsas();
  const std::string lowest(IsaName(*std::min_element(levels.begin(), levels.end())));
  nlohmann::json j = Json("--threads 1 --isa " + lowest + " --out-dtype bf16");
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_FALSE(j.contains("results"));
  EXPECT_GT(j["params_per_second"].get<double>(), 0);
  EXPECT_GT(j["bandwidth_limit_gb_per_second"].get<double>(), 0);
  EXPECT_EQ(j["isa"], lowest);
  EXPECT_EQ(j["probe_isa"], IsaName(*std::max_element(levels.begin(), levels.end())));
  EXPECT_EQ(j["bytes_per_param"], 30);
  EXPECT_EQ(j["out_dtype"], "bf16");
}

}  // namespace
}  // namespace tierflow
