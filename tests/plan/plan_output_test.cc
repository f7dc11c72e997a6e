// The plan as JSON (the keys scripts rely on) and as text (the verdict,
// tiers, placement and times a person reads).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/hardware_profile.h"
#include "plan/plan_json.h"
#include "plan/plan_report.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  PlanInput input;
  Hardware hw;
  Plan plan;
  LargestModel largest;
};

Fixture Make(const std::string& preset, uint64_t device_gib, uint64_t host_gib,
             ParamOffload params = ParamOffload::kAuto) {
  Fixture f;
  f.input.model = *PresetModelConfig(preset);
  f.input.seq_len = 1024;
  f.input.param_offload = params;
  f.hw.device_is_gpu = true;
  f.hw.device_memory_bytes = device_gib << 30;
  f.hw.host_memory_bytes = host_gib << 30;
  f.hw.nvme_capacity_bytes = 1ull << 40;
  f.hw.cores = 16;
  f.hw.bandwidths = DefaultBandwidths(true, 16);
  f.plan = *ComputePlan(f.input, f.hw);
  f.largest = *LargestFittingModel(f.input, f.hw);
  return f;
}

TEST(PlanJson, HasTheDocumentedKeys) {
  Fixture f = Make("llama-7b", 24, 64);
  nlohmann::json j = PlanToJson(f.input, f.hw, f.plan, &f.largest);
  for (const char* key : {"params", "feasible", "binding_constraint", "explanation", "tiers",
                          "placement", "stages", "predicted_step_seconds", "serial_step_seconds",
                          "max_params", "max_model", "model", "input", "hardware", "activations"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["params"], 6738415616);
  EXPECT_EQ(j["max_params"], f.largest.params);
  for (const char* tier : {"device", "host", "nvme"}) {
    ASSERT_TRUE(j["tiers"].contains(tier)) << tier;
    for (const char* key : {"total_bytes", "capacity_bytes", "components"}) {
      EXPECT_TRUE(j["tiers"][tier].contains(key)) << tier << "." << key;
    }
    uint64_t sum = 0;
    for (const auto& [name, bytes] : j["tiers"][tier]["components"].items())
      sum += bytes.get<uint64_t>();
    EXPECT_EQ(sum, j["tiers"][tier]["total_bytes"].get<uint64_t>()) << tier;
  }
  EXPECT_EQ(j["tiers"]["device"]["components"]["weights"], 6738415616ull * 2);
  EXPECT_TRUE(j["placement"].contains("nvme_ratio"));
  EXPECT_TRUE(j["placement"].contains("sub_group_params"));
  EXPECT_TRUE(j["stages"].contains("optimizer"));
  EXPECT_EQ(j["feasible"], f.plan.feasible);
  // Host memory, pinned and pageable apart: together the host tier.
  EXPECT_EQ(j["tiers"]["host"]["pinned_bytes"].get<uint64_t>() +
                j["tiers"]["host"]["pageable_bytes"].get<uint64_t>(),
            j["tiers"]["host"]["total_bytes"].get<uint64_t>());
  EXPECT_GT(j["tiers"]["host"]["pinned_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["tiers"]["host"]["pageable_bytes"].get<uint64_t>(), 0u);
}

TEST(PlanReport, SaysTheVerdictTiersPlacementAndTime) {
  Fixture f = Make("llama-13b", 24, 64, ParamOffload::kNone);
  std::string text = FormatPlanReport(f.input, f.hw, f.plan, &f.largest, {"device: test GPU"});
  EXPECT_THAT(text, HasSubstr("llama-13b"));
  EXPECT_THAT(text, HasSubstr("device: test GPU"));
  EXPECT_THAT(text, HasSubstr("verdict: does not fit: the binding constraint is device memory"));
  EXPECT_THAT(text, HasSubstr("<-- OVER"));
  EXPECT_THAT(text, HasSubstr("gradient_accumulator"));
  EXPECT_THAT(text, HasSubstr("(pinned: "));
  EXPECT_THAT(text, HasSubstr("; pageable: "));
  EXPECT_THAT(text, HasSubstr("placement (planner)"));
  EXPECT_THAT(text, HasSubstr("step:"));
  EXPECT_THAT(text, HasSubstr("largest llama that fits"));

  Fixture small = Make("gpt2", 24, 64);
  text = FormatPlanReport(small.input, small.hw, small.plan, nullptr, {});
  EXPECT_THAT(text, HasSubstr("verdict: fits"));
  EXPECT_THAT(text, Not(HasSubstr("that fits with this setup")));
}

TEST(PlanReport, FormatsCountsAndSeconds) {
  EXPECT_EQ(FormatParamCount(6738415616), "6.74 B");
  EXPECT_EQ(FormatParamCount(124439808), "124.4 M");
  EXPECT_EQ(FormatParamCount(512), "512");
  EXPECT_EQ(FormatSeconds(0.25), "250 ms");
  EXPECT_EQ(FormatSeconds(12.34), "12.3 s");
  EXPECT_EQ(FormatSeconds(7200), "120.0 min");
  EXPECT_EQ(FormatSeconds(72000), "20.0 h");
}

}  // namespace
}  // namespace tierflow
