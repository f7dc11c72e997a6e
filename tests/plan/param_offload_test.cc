// Parameter offload in the planner: which units' weights stream, from where,
// what the device, host and NVMe then hold, and what the streamed uploads
// cost per step. The Llama-2 configs are the published Hugging Face
// config.json files (tests/data/models).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "plan/hardware_profile.h"
#include "plan/param_placement.h"
#include "plan/plan_json.h"
#include "plan/plan_report.h"
#include "plan/planner.h"
#include "tests/plan/plan_test_util.h"

namespace tierflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

using plan_test::Gpu;

// `tierflow plan --model DIR`'s defaults: micro-batch 1, seq_len
// min(2048, the model's positions), accumulation 1, everything else auto.
PlanInput FromConfig(const std::string& name) {
  PlanInput in;
  auto model = LoadModelConfig(std::string(TIERFLOW_SOURCE_DIR) + "/tests/data/models/" + name +
                               "/config.json");
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  in.model = *model;
  in.seq_len = std::min<int64_t>(2048, in.model.max_seq_len);
  return in;
}

PlanInput Preset(const std::string& name, int64_t seq_len) {
  PlanInput in;
  in.model = *PresetModelConfig(name);
  in.seq_len = seq_len;
  return in;
}

using plan_test::MustPlan;

using plan_test::Stage;

// The published configs read as the Llama-2 shapes (the presets agree).
TEST(ParamOffload, Llama2ConfigsLoad) {
  const PlanInput b13 = FromConfig("llama-2-13b");
  EXPECT_EQ(ParameterCount(b13.model), 13015864320);
  EXPECT_EQ(ParameterCount(b13.model), ParameterCount(*PresetModelConfig("llama-13b")));
  EXPECT_FALSE(b13.model.tie_embeddings);
  EXPECT_EQ(b13.seq_len, 2048);
  const PlanInput b70 = FromConfig("llama-2-70b");
  EXPECT_EQ(ParameterCount(b70.model), 68976648192);
  EXPECT_EQ(b70.model.n_kv_heads, 8);
}

// Done-when: Llama-2-13B on a 24 GiB GPU, 64 GiB of RAM, 1 TiB of NVMe.
TEST(ParamOffload, Llama2Of13bFits24GiBByStreamingWeights) {
  const Hardware hw = Gpu(24 * kGiB, 64 * kGiB, kTiB);
  PlanInput in = FromConfig("llama-2-13b");
  const Plan plan = MustPlan(in, hw);
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  const ParamPlacement& w = plan.placement.params;
  EXPECT_NE(w.where, ParamOffload::kNone);
  EXPECT_FALSE(w.streamed_units.empty());
  EXPECT_TRUE(w.chosen_by_planner);
  EXPECT_EQ(w.device_slots, kDefaultParamSlots);
  EXPECT_EQ(w.prefetch_depth, kDefaultParamSlots - 1);
  // Within the device's margin, and only as much streamed as that needs:
  // one block fewer would not keep it.
  EXPECT_LE(static_cast<double>(plan.device.total_bytes()), kDeviceTargetFraction * 24 * kGiB);
  EXPECT_THAT(plan.explanation, HasSubstr("units' weights streamed from"));
  EXPECT_GT(Stage(plan, "h2d_params"), 0.0);

  // Kept resident, it does not fit, and the advice says streaming would.
  in.param_offload = ParamOffload::kNone;
  const Plan resident = MustPlan(in, hw);
  EXPECT_FALSE(resident.feasible);
  EXPECT_EQ(resident.binding_constraint, "device");
  EXPECT_THAT(resident.explanation, HasSubstr("--offload-param none keeps"));
  EXPECT_THAT(resident.explanation, HasSubstr("--offload-param auto streams"));
  EXPECT_THAT(resident.explanation, HasSubstr("--offload-param host or nvme"));
  EXPECT_EQ(resident.placement.params.where, ParamOffload::kNone);
  EXPECT_EQ(Stage(resident, "h2d_params"), 0.0);
}

// Done-when: Llama-2-70B on an 80 GiB GPU, 512 GiB of RAM, 4 TiB of NVMe.
TEST(ParamOffload, Llama2Of70bFits80GiBByStreamingWeights) {
  const Plan plan = MustPlan(FromConfig("llama-2-70b"), Gpu(80 * kGiB, 512 * kGiB, 4 * kTiB));
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  const ParamPlacement& w = plan.placement.params;
  EXPECT_NE(w.where, ParamOffload::kNone);
  EXPECT_FALSE(w.streamed_units.empty());
  EXPECT_GT(w.streamed_params, 0);
  EXPECT_EQ(w.resident_params + w.streamed_params, plan.params);
  EXPECT_LE(static_cast<double>(plan.device.total_bytes()), kDeviceTargetFraction * 80 * kGiB);
}

TEST(ParamOffload, AutoStreamsNothingWhenEverythingFits) {
  const Plan plan = MustPlan(Preset("gpt2", 1024), Gpu(8 * kGiB, 64 * kGiB, kTiB));
  ASSERT_TRUE(plan.feasible);
  const ParamPlacement& w = plan.placement.params;
  EXPECT_EQ(w.where, ParamOffload::kNone);
  EXPECT_TRUE(w.streamed_units.empty());
  EXPECT_EQ(w.device_slots, 0);
  EXPECT_EQ(w.resident_params, plan.params);
  EXPECT_EQ(w.fetch_bytes_per_micro_batch, 0u);
  EXPECT_TRUE(w.chosen_by_planner);
  EXPECT_EQ(plan.device.bytes_of("weights"), static_cast<uint64_t>(plan.params) * 2);
  EXPECT_EQ(plan.device.bytes_of("weight_slots"), 0u);
  EXPECT_EQ(plan.host.bytes_of("streamed_weights"), 0u);
  EXPECT_EQ(plan.nvme.bytes_of("streamed_weights"), 0u);
  EXPECT_EQ(Stage(plan, "h2d_params"), 0.0);
  EXPECT_EQ(Stage(plan, "nvme_params"), 0.0);
}

// --offload-param host on a model that fits: the least streaming there is,
// one block (the middle one), and its copy pinned on the host.
TEST(ParamOffload, ForcedHostStreamsAtLeastOneBlock) {
  PlanInput in = Preset("gpt2", 1024);
  in.param_offload = ParamOffload::kHost;
  const Plan plan = MustPlan(in, Gpu(8 * kGiB, 64 * kGiB, kTiB));
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  const ParamPlacement& w = plan.placement.params;
  const ModelUnits units = ModelUnitsOf(in.model);
  EXPECT_EQ(w.where, ParamOffload::kHost);
  EXPECT_FALSE(w.chosen_by_planner);
  EXPECT_THAT(w.streamed_units, ElementsAre(7));  // block 6 of 12: unit 7
  EXPECT_EQ(w.streamed_params, units.block);
  EXPECT_EQ(w.slot_params, units.block);
  EXPECT_EQ(w.fetch_bytes_per_micro_batch, static_cast<uint64_t>(units.block) * 2 * 2);
  EXPECT_EQ(plan.host.bytes_of("streamed_weights"), static_cast<uint64_t>(units.block) * 2);
  EXPECT_EQ(plan.host.bytes_of("weight_staging"), 0u);

  // The same copy counts as pinned memory.
  in.param_offload = ParamOffload::kAuto;
  const Plan resident = MustPlan(in, Gpu(8 * kGiB, 64 * kGiB, kTiB));
  EXPECT_EQ(plan.pinned_bytes - resident.pinned_bytes, static_cast<uint64_t>(units.block) * 2);
}

// --offload-param nvme: the copy on NVMe, each unit in whole blocks, read
// through pinned staging buffers of one slot each.
TEST(ParamOffload, ForcedNvmeKeepsTheCopyOnNvmeBehindStaging) {
  PlanInput in = Preset("gpt2", 1024);
  in.param_offload = ParamOffload::kNvme;
  const Plan plan = MustPlan(in, Gpu(8 * kGiB, 64 * kGiB, kTiB));
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  const ParamPlacement& w = plan.placement.params;
  const uint64_t block_bytes = static_cast<uint64_t>(ModelUnitsOf(in.model).block) * 2;
  EXPECT_EQ(w.where, ParamOffload::kNvme);
  EXPECT_EQ(w.nvme_staging, kDefaultNvmeStaging);
  EXPECT_EQ(plan.nvme.bytes_of("streamed_weights"),
            (block_bytes + kNvmeBlockBytes - 1) / kNvmeBlockBytes * kNvmeBlockBytes);
  EXPECT_EQ(plan.host.bytes_of("weight_staging"), 2 * block_bytes);
  EXPECT_EQ(plan.host.bytes_of("streamed_weights"), 0u);
  // Read every micro-batch, written once a step, at the drives' rates.
  const Bandwidths& b = Gpu(8 * kGiB, 64 * kGiB, kTiB).bandwidths;
  EXPECT_DOUBLE_EQ(Stage(plan, "nvme_params"),
                   2.0 * block_bytes / (b.nvme_read_gb_per_second * 1e9) +
                       block_bytes / (b.nvme_write_gb_per_second * 1e9));
}

TEST(ParamOffload, StreamedBlocksAreSpreadOverTheDepth) {
  EXPECT_THAT(StreamedBlockIndices(40, 4), ElementsAre(5, 15, 25, 35));
  EXPECT_THAT(StreamedBlockIndices(10, 3), ElementsAre(1, 5, 8));
  EXPECT_THAT(StreamedBlockIndices(12, 1), ElementsAre(6));
  EXPECT_EQ(StreamedBlockIndices(7, 7).size(), 7u);
  EXPECT_EQ(StreamedBlockIndices(7, 7).back(), 6);
  EXPECT_EQ(FormatUnitList({0, 2, 3, 4, 7, 9, 10}), "0,2-4,7,9-10");
}

// Candidates come least traffic first: an untied Llama-2's embeddings and
// head (half a block each, fetched once) go before a second block (fetched
// twice); a tied model fetches its embeddings twice.
TEST(ParamOffload, CandidatesAreOrderedByTraffic) {
  const ModelUnits u = ModelUnitsOf(*PresetModelConfig("llama-13b"));
  const std::vector<StreamCandidate> c = StreamCandidates(u);
  ASSERT_EQ(c.size(), 4u * 40);
  for (size_t i = 1; i < c.size(); ++i) {
    EXPECT_LE(CostOf(u, c[i - 1]).fetched, CostOf(u, c[i]).fetched) << i;
  }
  EXPECT_EQ(c[0].blocks, 1);
  EXPECT_FALSE(c[0].embeddings || c[0].head);
  const ModelUnits tied = ModelUnitsOf(*PresetModelConfig("gpt2"));
  EXPECT_EQ(CostOf(tied, {1, true, false}).fetched, 2 * tied.block + 2 * tied.embeddings);
}

TEST(ParamOffload, DeviceTotalIsTheSumOfResidentSlotsAndTheRest) {
  const PlanInput in = FromConfig("llama-2-13b");
  const Plan plan = MustPlan(in, Gpu(24 * kGiB, 64 * kGiB, kTiB));
  const ParamPlacement& w = plan.placement.params;
  const ModelUnits u = ModelUnitsOf(in.model);
  ASSERT_NE(w.where, ParamOffload::kNone);
  EXPECT_EQ(w.resident_params + w.streamed_params, plan.params);
  EXPECT_TRUE(std::is_sorted(w.streamed_units.begin(), w.streamed_units.end()));
  // Parameters and fetches from the unit list, by hand.
  int64_t streamed = 0, slot = 0;
  uint64_t fetched = 0;
  for (int unit : w.streamed_units) {
    const int64_t n = unit == 0 ? u.embeddings : unit == u.layers + 1 ? u.head : u.block;
    const int64_t fetches = unit == 0 ? 1 : unit == u.layers + 1 ? 1 : 2;  // untied
    streamed += n;
    slot = std::max(slot, n);
    fetched += static_cast<uint64_t>(n * fetches) * 2;
  }
  EXPECT_EQ(streamed, w.streamed_params);
  EXPECT_EQ(slot, w.slot_params);
  EXPECT_EQ(fetched, w.fetch_bytes_per_micro_batch);
  EXPECT_EQ(plan.device.bytes_of("weights"), static_cast<uint64_t>(w.resident_params) * 2);
  EXPECT_EQ(plan.device.bytes_of("weight_slots"), 3u * static_cast<uint64_t>(w.slot_params) * 2);
  // 4 fixed allocations, 2 per gradient bucket, one per slot.
  EXPECT_EQ(plan.device.bytes_of("allocation_rounding"), (4u + 6 + 3) * (2u << 20));
  EXPECT_EQ(plan.device.total_bytes(),
            plan.device.bytes_of("weights") + plan.device.bytes_of("weight_slots") +
                plan.device.bytes_of("gradient_buckets") + plan.device.bytes_of("activations") +
                plan.device.bytes_of("workspace") + plan.device.bytes_of("allocation_rounding") +
                plan.device.bytes_of("cuda_context"));
  // The least traffic that fits: the next candidate down does not.
  const std::vector<StreamCandidate> candidates = StreamCandidates(u);
  size_t chosen = 0;
  while (chosen < candidates.size() &&
         CostOf(u, candidates[chosen]).fetched * 2 != static_cast<int64_t>(fetched)) {
    ++chosen;
  }
  ASSERT_LT(chosen, candidates.size());
  ASSERT_GT(chosen, 0u);
  // It failed with every bucket, so with this one too.
  const StreamCost previous = CostOf(u, candidates[chosen - 1]);
  const uint64_t previous_device =
      plan.device.total_bytes() +
      (static_cast<uint64_t>(previous.resident) - static_cast<uint64_t>(w.resident_params)) * 2 +
      3 * (static_cast<uint64_t>(previous.slot) - static_cast<uint64_t>(w.slot_params)) * 2;
  EXPECT_GT(static_cast<double>(previous_device), kDeviceTargetFraction * 24 * kGiB);
}

// The copy goes to NVMe when the host cannot hold it within its margin.
TEST(ParamOffload, HostTooSmallForTheCopyPutsItOnNvme) {
  PlanInput in = FromConfig("llama-2-13b");
  const Hardware roomy = Gpu(24 * kGiB, 64 * kGiB, kTiB);
  EXPECT_EQ(MustPlan(in, roomy).placement.params.where, ParamOffload::kHost);
  const Hardware small = Gpu(24 * kGiB, 36 * kGiB, kTiB);
  in.param_offload = ParamOffload::kHost;
  const Plan on_host = MustPlan(in, small);
  ASSERT_GT(static_cast<double>(on_host.host.total_bytes()),
            kHostAutoPlacementFraction * 36 * kGiB);
  in.param_offload = ParamOffload::kAuto;
  const Plan plan = MustPlan(in, small);
  EXPECT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.params.where, ParamOffload::kNvme);
  EXPECT_EQ(plan.host.bytes_of("streamed_weights"), 0u);
  EXPECT_GT(plan.nvme.bytes_of("streamed_weights"),
            static_cast<uint64_t>(plan.placement.params.streamed_params) * 2 - 1);
  EXPECT_GT(plan.host.bytes_of("weight_staging"), 0u);
  EXPECT_THAT(plan.explanation, HasSubstr("streamed from NVMe"));
  // The same units stream either way: the device does not depend on the copy.
  EXPECT_EQ(plan.placement.params.streamed_units, on_host.placement.params.streamed_units);
}

// Even with every unit streamed, the slots, buckets and activations overflow
// 4 GiB: infeasible, with the numbers and what to change.
TEST(ParamOffload, DeviceTooSmallEvenForTheSlotsIsRefusedWithNumbers) {
  const Plan plan = MustPlan(FromConfig("llama-2-13b"), Gpu(4 * kGiB, 64 * kGiB, kTiB));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "device");
  const ParamPlacement& w = plan.placement.params;
  EXPECT_EQ(w.where, ParamOffload::kHost);
  EXPECT_EQ(w.streamed_params, plan.params);  // the least device memory: all of it
  EXPECT_EQ(plan.device.bytes_of("weights"), 0u);
  EXPECT_THAT(plan.explanation, HasSubstr("3 weight slots take"));
  EXPECT_THAT(plan.explanation, HasSubstr("lower --param-slots (now 3; 2 is the least)"));
  EXPECT_THAT(plan.explanation, HasSubstr("--seq-len"));
  EXPECT_THAT(plan.explanation, HasSubstr("use a device with at least"));
  EXPECT_THAT(plan.explanation, HasSubstr("needs"));
  EXPECT_EQ(RequireFeasible(plan).code(), StatusCode::kOutOfMemory);
}

TEST(ParamOffload, SlotsAreGivenOrRefused) {
  PlanInput in = FromConfig("llama-2-13b");
  const Hardware hw = Gpu(24 * kGiB, 64 * kGiB, kTiB);
  in.param_slots = 2;
  const Plan two = MustPlan(in, hw);
  EXPECT_EQ(two.placement.params.device_slots, 2);
  EXPECT_EQ(two.placement.params.prefetch_depth, 1);
  EXPECT_EQ(two.device.bytes_of("weight_slots"),
            2u * static_cast<uint64_t>(two.placement.params.slot_params) * 2);
  in.param_slots = 1;
  auto refused = ComputePlan(in, hw);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--param-slots is 1"));
  EXPECT_THAT(refused.status().message(), HasSubstr("use 2 or more"));
  in.param_slots = 4;
  in.param_offload = ParamOffload::kNone;
  refused = ComputePlan(in, hw);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--offload-param none streams nothing"));
}

// More streamed bytes, more uploads: the stage grows with them, and once the
// uploads outlast compute (a slow link) so does the step.
TEST(ParamOffload, StepTimeGrowsWithStreamedBytes) {
  const PlanInput in = FromConfig("llama-2-13b");
  Hardware hw = Gpu(24 * kGiB, 64 * kGiB, kTiB);
  hw.bandwidths.h2d_gb_per_second = 2;
  double previous_stage = 0, previous_step = 0;
  int64_t previous_streamed = 0;
  for (uint64_t gib : {30, 24, 20, 16}) {
    hw.device_memory_bytes = gib * kGiB;
    const Plan plan = MustPlan(in, hw);
    ASSERT_TRUE(plan.feasible) << gib << " GiB: " << plan.explanation;
    const ParamPlacement& w = plan.placement.params;
    ASSERT_GT(w.streamed_params, previous_streamed) << gib << " GiB";
    const double stage = Stage(plan, "h2d_params");
    EXPECT_DOUBLE_EQ(stage, static_cast<double>(w.fetch_bytes_per_micro_batch) / 2e9);
    EXPECT_DOUBLE_EQ(Stage(plan, "h2d_weights"), static_cast<double>(w.resident_params) * 2 / 2e9);
    EXPECT_GT(stage, previous_stage);
    EXPECT_GT(plan.predicted_step_seconds, previous_step) << gib << " GiB";
    EXPECT_GE(plan.predicted_step_seconds, stage + Stage(plan, "h2d_weights"));
    double serial = 0;
    for (const StageTime& s : plan.stages) serial += s.seconds;
    EXPECT_DOUBLE_EQ(plan.serial_step_seconds, serial);
    previous_stage = stage;
    previous_step = plan.predicted_step_seconds;
    previous_streamed = w.streamed_params;
  }
}

TEST(ParamOffload, JsonAndReportShowTheWeightsPlacement) {
  PlanInput in = FromConfig("llama-2-13b");
  const Hardware hw = Gpu(24 * kGiB, 64 * kGiB, kTiB);
  const Plan plan = MustPlan(in, hw);
  const nlohmann::json j = PlanToJson(in, hw, plan, nullptr);
  const nlohmann::json& w = j["placement"]["params"];
  EXPECT_EQ(w["where"], "host");
  EXPECT_EQ(w["units"], 42);
  EXPECT_EQ(w["streamed_units"].size(), plan.placement.params.streamed_units.size());
  EXPECT_EQ(w["device_slots"], 3);
  EXPECT_EQ(w["prefetch_depth"], 2);
  EXPECT_EQ(w["fetch_bytes_per_micro_batch"], plan.placement.params.fetch_bytes_per_micro_batch);
  EXPECT_EQ(w["chosen_by"], "planner");
  EXPECT_EQ(j["input"]["offload_param"], "auto");
  EXPECT_TRUE(j["stages"].contains("h2d_params"));
  EXPECT_TRUE(j["stages"].contains("nvme_params"));
  EXPECT_TRUE(j["tiers"]["device"]["components"].contains("weight_slots"));
  const std::string text = FormatPlanReport(in, hw, plan, nullptr, {});
  EXPECT_THAT(text, HasSubstr("weights (planner): "));
  EXPECT_THAT(text, HasSubstr("units streamed from pinned host memory"));
  EXPECT_THAT(text, HasSubstr("fetched per micro-batch"));
  EXPECT_THAT(text, HasSubstr("params.where=host streamed_units="));
  EXPECT_THAT(text, HasSubstr("h2d_params"));

  const Plan small = MustPlan(Preset("gpt2", 1024), hw);
  const std::string resident = FormatPlanReport(in, hw, small, nullptr, {});
  EXPECT_THAT(resident, HasSubstr("resident on the device"));
  EXPECT_THAT(resident, Not(HasSubstr("streamed_units=")));
}

}  // namespace
}  // namespace tierflow
