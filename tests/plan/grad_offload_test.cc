// The planner and the gradients on NVMe (issue 45): what the host and the
// drives hold with the gradients in host memory or spilled (one micro-batch
// and several), the NVMe traffic they add to the step, what auto chooses,
// the targets, the verdict when the host is forced to hold them and
// cannot, the refusals where the engine cannot spill them, the JSON and the
// report, and the compute-bound advice that counts their traffic.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/units.h"
#include "plan/plan_json.h"
#include "plan/plan_report.h"
#include "plan/planner.h"
#include "tests/plan/plan_test_util.h"

namespace tierflow {
namespace {

using plan_test::Gpu;
using plan_test::MustPlan;
using plan_test::Stage;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

uint64_t RoundUpTo(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// As `tierflow plan --device cuda --device-tflops 165 --cores 16` sees it.
Hardware Target(uint64_t device, uint64_t host, uint64_t nvme) {
  Hardware hw = Gpu(device, host, nvme, 16);
  hw.bandwidths.device_tflops = 165;
  return hw;
}

PlanInput Preset(const std::string& name, int64_t seq_len = 2048) {
  PlanInput in;
  in.model = *PresetModelConfig(name);
  in.seq_len = seq_len;
  return in;
}

// Llama-2-7B, its whole state on NVMe, no speculation (which fills what the
// host has free, so the two placements' host tiers differ only by the
// gradients).
PlanInput SevenB(GradOffload where, int64_t grad_accum) {
  PlanInput in = Preset("llama-7b");
  in.offload = OffloadPlacement::kNvme;
  in.speculation_params = 0;
  in.grad_accum = grad_accum;
  in.offload_gradients = where;
  return in;
}

// The largest sub-group with the state wholly on NVMe (the spill slots' size).
int64_t LargestSubGroup(const PlanInput& in) {
  return SummarizeSubGroups(in.model, in.sub_group_params, 1.0, 12).max_group_params;
}

// What each tier holds, host against NVMe, with `k` micro-batches: bytes
// per parameter of what waits (the transfer dtype alone, else fp32).
void ExpectCounted(int64_t k) {
  SCOPED_TRACE("micro-batches " + std::to_string(k));
  const Hardware hw = Target(24 * kGiB, 256 * kGiB, 2 * kTiB);
  const Plan host = MustPlan(SevenB(GradOffload::kHost, k), hw);
  const Plan nvme = MustPlan(SevenB(GradOffload::kNvme, k), hw);
  ASSERT_TRUE(host.feasible) << host.explanation;
  ASSERT_TRUE(nvme.feasible) << nvme.explanation;
  ASSERT_EQ(host.placement.gradients, GradOffload::kHost);
  ASSERT_EQ(nvme.placement.gradients, GradOffload::kNvme);
  const auto P = static_cast<uint64_t>(host.params);
  const uint64_t wire = 2;  // bf16 weights: the gradients cross in bf16
  const uint64_t waits = k > 1 ? 4 : wire;
  const uint64_t staging = 3 * static_cast<uint64_t>(nvme.placement.grad_bucket_params) * wire;
  const auto max_group = static_cast<uint64_t>(LargestSubGroup(SevenB(GradOffload::kNvme, k)));
  const uint64_t slots = 4 * RoundUpTo(max_group * waits, 4096);

  // Host: the whole model's landing (k = 1, pinned, no staging) or fp32
  // accumulator (pageable, beside the staging), against staging and slots.
  EXPECT_EQ(host.host.bytes_of("gradient_accumulator"), P * waits);
  EXPECT_EQ(host.host.bytes_of("pinned_gradient_staging"), k > 1 ? staging : 0);
  EXPECT_EQ(host.host.bytes_of("gradient_spill_slots"), 0u);
  EXPECT_EQ(nvme.host.bytes_of("gradient_accumulator"), 0u);
  EXPECT_EQ(nvme.host.bytes_of("pinned_gradient_staging"), staging);
  EXPECT_EQ(nvme.host.bytes_of("gradient_spill_slots"), slots);
  EXPECT_EQ(nvme.host.total_bytes() + P * waits,
            host.host.total_bytes() + staging + slots - (k > 1 ? staging : 0));
  // Pinned: the landing is (k = 1); the accumulator is not; staging and
  // slots always are.
  EXPECT_EQ(nvme.pinned_bytes + (k > 1 ? 0 : P * waits),
            host.pinned_bytes + slots + (k > 1 ? 0 : staging));
  EXPECT_EQ(nvme.gradients.host_bytes, staging + slots);
  EXPECT_EQ(host.gradients.host_bytes, P * waits + (k > 1 ? staging : 0));

  // NVMe: a tensor per sub-group in whole 1 MiB blocks (at least the
  // gradient, less than a block more per sub-group), and 4 of the largest
  // more spare blocks per directory, rounded with the state's.
  EXPECT_EQ(host.nvme.bytes_of("gradient_files"), 0u);
  EXPECT_EQ(host.nvme.bytes_of("gradient_spare_blocks"), 0u);
  const uint64_t files = nvme.nvme.bytes_of("gradient_files");
  EXPECT_EQ(files % kMiB, 0u);
  EXPECT_GE(files, P * waits);
  EXPECT_LT(files, P * waits + static_cast<uint64_t>(nvme.placement.num_sub_groups) * kMiB);
  const uint64_t state_spare = 5 * max_group * 12;
  EXPECT_EQ(nvme.nvme.bytes_of("gradient_spare_blocks"),
            RoundUpTo(state_spare + 4 * max_group * waits, kMiB) - RoundUpTo(state_spare, kMiB));
  EXPECT_EQ(nvme.nvme.bytes_of("state_files"), host.nvme.bytes_of("state_files"));
  EXPECT_EQ(nvme.gradients.nvme_bytes, files + nvme.nvme.bytes_of("gradient_spare_blocks"));

  // The step: each micro-batch's fp32 sum written and read back (k > 1),
  // or the one gradient in the transfer dtype; on the drives the state uses.
  const uint64_t traffic = k > 1 ? static_cast<uint64_t>(k) * 4 * P : P * wire;
  EXPECT_EQ(nvme.gradients.nvme_write_bytes_per_step, traffic);
  EXPECT_EQ(nvme.gradients.nvme_read_bytes_per_step, traffic);
  EXPECT_EQ(host.gradients.nvme_write_bytes_per_step, 0u);
  const double seconds =
      static_cast<double>(traffic) / (hw.bandwidths.nvme_read_gb_per_second * 1e9) +
      static_cast<double>(traffic) / (hw.bandwidths.nvme_write_gb_per_second * 1e9);
  EXPECT_NEAR(nvme.gradients.nvme_seconds_per_step, seconds, 1e-9 * seconds);
  EXPECT_NEAR(Stage(nvme, "nvme_io") - Stage(host, "nvme_io"), seconds, 1e-6 * seconds);
  EXPECT_GT(nvme.predicted_step_seconds, host.predicted_step_seconds);
}

TEST(GradOffload, OneMicroBatchCountsTheLandingOrTheSlots) { ExpectCounted(1); }
TEST(GradOffload, SeveralMicroBatchesCountTheAccumulatorOrFp32Slots) { ExpectCounted(3); }

// Auto: the host while the host holds them; else the drives, the state
// moved wholly to NVMe with them.
TEST(GradOffload, AutoKeepsThemOnTheHostWhileItHoldsThemElseSpills) {
  PlanInput in = Preset("llama-7b");
  const Plan roomy = MustPlan(in, Target(24 * kGiB, 256 * kGiB, kTiB));
  ASSERT_TRUE(roomy.feasible);
  EXPECT_EQ(roomy.placement.gradients, GradOffload::kHost);
  EXPECT_TRUE(roomy.placement.gradients_chosen);
  EXPECT_EQ(roomy.nvme.bytes_of("gradient_files"), 0u);

  const Hardware small = Target(24 * kGiB, 12 * kGiB, kTiB);
  in.offload_gradients = GradOffload::kHost;
  const Plan held = MustPlan(in, small);
  EXPECT_FALSE(held.feasible);
  EXPECT_EQ(held.binding_constraint, "host");
  EXPECT_FALSE(held.placement.gradients_chosen);

  in.offload_gradients = GradOffload::kAuto;
  const Plan spilled = MustPlan(in, small);
  ASSERT_TRUE(spilled.feasible) << spilled.explanation;
  EXPECT_EQ(spilled.placement.gradients, GradOffload::kNvme);
  EXPECT_TRUE(spilled.placement.gradients_chosen);
  EXPECT_EQ(spilled.placement.where(), "nvme");
  EXPECT_EQ(spilled.placement.nvme_ratio, 1.0);
  EXPECT_EQ(spilled.placement.grad_spill_slots, kDefaultGradSpillSlots);
  EXPECT_THAT(spilled.explanation, HasSubstr("gradients on NVMe"));
  EXPECT_LE(spilled.host.total_bytes(), small.host_memory_bytes);
}

// Auto where the engine cannot spill: they stay on the host, and the
// verdict says why they could not move.
TEST(GradOffload, AutoStaysOnTheHostWhereTheEngineCannotSpill) {
  const Hardware small = Target(24 * kGiB, 12 * kGiB, kTiB);
  PlanInput in = Preset("llama-7b");
  in.offload = OffloadPlacement::kHost;
  Plan plan = MustPlan(in, small);
  EXPECT_EQ(plan.placement.gradients, GradOffload::kHost);
  EXPECT_FALSE(plan.feasible);
  EXPECT_THAT(plan.explanation, HasSubstr("--offload-optimizer host keeps it in host memory"));

  in = Preset("llama-7b");
  in.gpus_per_node = 2;
  in.device_collectives = true;
  plan = MustPlan(in, small);
  EXPECT_EQ(plan.placement.gradients, GradOffload::kHost);
  EXPECT_THAT(plan.explanation, HasSubstr("device collectives"));

  in = Preset("llama-7b");
  in.nvme_ratio = 0.5;
  plan = MustPlan(in, small);
  EXPECT_EQ(plan.placement.gradients, GradOffload::kHost);
}

// Data parallelism (host collectives): each rank spills its parts' fp32
// running sum; the host holds three whole units gathered for the ranks' sum
// and one unit's part, never the model's gradient or a rank's whole part.
TEST(GradOffload, DataParallelRanksSpillTheirPartsRunningSum) {
  const Hardware hw = Target(24 * kGiB, 64 * kGiB, 4 * kTiB);
  PlanInput in = Preset("llama-7b");
  in.gpus_per_node = 2;
  in.offload_gradients = GradOffload::kNvme;
  const Plan plan = MustPlan(in, hw);
  ASSERT_EQ(plan.placement.gradients, GradOffload::kNvme);
  const uint64_t rank_params = static_cast<uint64_t>(plan.data_parallel.rank_params);
  const uint64_t summed = plan.host.bytes_of("summed_gradient_part");
  EXPECT_GT(summed, 0u);
  EXPECT_LT(summed, 2 * rank_params * 4 / 4);  // one unit's part per rank, not the rank's
  const uint64_t gathers = plan.host.bytes_of("unit_gradient_gathers");
  EXPECT_GT(gathers, 0u);
  EXPECT_EQ(plan.host.bytes_of("gradient_accumulator"), 0u);
  // Each rank writes and reads its parts' fp32 sum once a micro-batch.
  EXPECT_EQ(plan.gradients.nvme_write_bytes_per_step, rank_params * 4);
  // The host side with the gradients at home holds each rank's whole part
  // (the node's two).
  in.offload_gradients = GradOffload::kHost;
  const Plan at_home = MustPlan(in, hw);
  EXPECT_EQ(at_home.host.bytes_of("summed_gradient_part"), 2 * rank_params * 4);
  EXPECT_EQ(at_home.host.bytes_of("unit_gradient_gathers"), 0u);
}

// The targets: each fits with the gradients on NVMe.
void ExpectFitsOnNvme(const PlanInput& in, const Hardware& hw) {
  const Plan plan = MustPlan(in, hw);
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.gradients, GradOffload::kNvme);
  EXPECT_TRUE(plan.placement.gradients_chosen);
  EXPECT_THAT(plan.explanation, HasSubstr("gradients on NVMe"));
  EXPECT_GT(plan.gradients.nvme_bytes, static_cast<uint64_t>(plan.params));
  // Forced onto the host, none of them fits.
  PlanInput held = in;
  held.offload_gradients = GradOffload::kHost;
  EXPECT_FALSE(MustPlan(held, hw).feasible);
}

TEST(GradOffload, Llama70bOn24GiB32GiB2TiB) {
  ExpectFitsOnNvme(Preset("llama-70b"), Target(24 * kGiB, 32 * kGiB, 2 * kTiB));
}

TEST(GradOffload, Llama70bAccumulating32On24GiB32GiB2TiB) {
  PlanInput in = Preset("llama-70b");
  in.grad_accum = 32;
  ExpectFitsOnNvme(in, Target(24 * kGiB, 32 * kGiB, 2 * kTiB));
}

TEST(GradOffload, A123bLlamaOn24GiB64GiB4TiB) {
  ModelDimensions d;
  d.family = ModelFamily::kLlama;
  d.n_layers = 88;
  d.d_model = 12288;
  d.n_heads = 96;
  d.n_kv_heads = 8;
  d.d_ff = 28672;
  d.vocab_size = 32768;
  d.max_seq_len = 4096;
  PlanInput in;
  in.model = *MakeModelConfig(d);
  in.seq_len = 2048;
  ExpectFitsOnNvme(in, Target(24 * kGiB, 64 * kGiB, 4 * kTiB));
}

TEST(GradOffload, LargestLlamaOn24GiB64GiB4TiBIsPast140B) {
  const Hardware hw = Target(24 * kGiB, 64 * kGiB, 4 * kTiB);
  auto largest = LargestFittingModel(Preset("llama-70b"), hw);
  ASSERT_TRUE(largest.ok()) << largest.status().ToString();
  EXPECT_GE(largest->params, 140'000'000'000);
  PlanInput found = Preset("llama-70b");
  found.model = largest->config;
  const Plan plan = MustPlan(found, hw);
  ASSERT_TRUE(plan.feasible);
  EXPECT_EQ(plan.placement.gradients, GradOffload::kNvme);
  // The gradients held on the host, the largest is far smaller.
  PlanInput held = Preset("llama-70b");
  held.offload_gradients = GradOffload::kHost;
  auto on_host = LargestFittingModel(held, hw);
  ASSERT_TRUE(on_host.ok());
  EXPECT_LT(on_host->params, largest->params / 2);
}

// --offload-gradients host on a host that cannot hold them: the verdict
// names their share and what to change.
TEST(GradOffload, HostThatCannotHoldThemNamesTheirShare) {
  PlanInput in = Preset("llama-70b");
  in.offload_gradients = GradOffload::kHost;
  const Plan plan = MustPlan(in, Target(24 * kGiB, 32 * kGiB, 2 * kTiB));
  ASSERT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "host");
  const uint64_t share = plan.host.bytes_of("gradient_accumulator");
  EXPECT_EQ(share, static_cast<uint64_t>(plan.params) * 2);
  EXPECT_EQ(plan.gradients.host_bytes, share);
  const std::string named = FormatBytes(share);
  EXPECT_THAT(named, HasSubstr("GiB"));
  EXPECT_THAT(plan.explanation,
              HasSubstr("the gradient waiting for the step's decision takes " + named));
  EXPECT_THAT(plan.explanation, HasSubstr("--offload-gradients nvme"));
  EXPECT_THAT(plan.explanation, HasSubstr("a host with at least"));
}

// nvme where the engine cannot do it: refused, naming why.
TEST(GradOffload, NvmeWhereTheEngineCannotIsRefused) {
  const Hardware hw = Target(24 * kGiB, 256 * kGiB, 2 * kTiB);
  struct Case {
    std::string why;
    PlanInput in;
    Hardware hw;
  };
  PlanInput base = Preset("llama-7b");
  base.offload_gradients = GradOffload::kNvme;
  std::vector<Case> cases;
  cases.push_back({"--offload-optimizer host", base, hw});
  cases.back().in.offload = OffloadPlacement::kHost;
  cases.push_back({"--ratio", base, hw});
  cases.back().in.nvme_ratio = 0.5;
  cases.push_back({"device collectives", base, hw});
  cases.back().in.device_collectives = true;
  cases.push_back({"no NVMe path", base, Target(24 * kGiB, 256 * kGiB, 0)});
  for (const Case& c : cases) {
    auto plan = ComputePlan(c.in, c.hw);
    ASSERT_FALSE(plan.ok()) << c.why;
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr("--offload-gradients nvme cannot run here"));
    EXPECT_THAT(plan.status().message(), HasSubstr(c.why));
  }
  // Each alone is what is refused: the base input plans.
  EXPECT_TRUE(MustPlan(base, hw).feasible);
  base.grad_spill_slots = 1;
  EXPECT_FALSE(ComputePlan(base, hw).ok());
}

TEST(GradOffload, JsonAndReportSayWhereAndWhatTheyAdd) {
  const Hardware hw = Target(24 * kGiB, 32 * kGiB, 2 * kTiB);
  const PlanInput in = Preset("llama-70b");
  const Plan plan = MustPlan(in, hw);
  ASSERT_EQ(plan.placement.gradients, GradOffload::kNvme);
  const nlohmann::json j = PlanToJson(in, hw, plan, nullptr);
  EXPECT_EQ(j["input"]["offload_gradients"], "auto");
  const nlohmann::json& g = j["placement"]["gradients"];
  EXPECT_EQ(g["where"], "nvme");
  EXPECT_EQ(g["chosen_by"], "planner");
  EXPECT_EQ(g["spill_slots"], kDefaultGradSpillSlots);
  EXPECT_EQ(g["host_bytes"], plan.gradients.host_bytes);
  EXPECT_EQ(g["nvme_bytes"],
            plan.nvme.bytes_of("gradient_files") + plan.nvme.bytes_of("gradient_spare_blocks"));
  EXPECT_EQ(g["nvme_write_bytes_per_step"], static_cast<uint64_t>(plan.params) * 2);
  EXPECT_EQ(g["nvme_read_bytes_per_step"], static_cast<uint64_t>(plan.params) * 2);
  EXPECT_GT(g["nvme_seconds_per_step"].get<double>(), 0);
  EXPECT_EQ(j["tiers"]["nvme"]["components"]["gradient_files"],
            plan.nvme.bytes_of("gradient_files"));

  const std::string text = FormatPlanReport(in, hw, plan, nullptr, {});
  EXPECT_THAT(text, HasSubstr("gradients: nvme ("));
  EXPECT_THAT(text, HasSubstr(FormatBytes(plan.gradients.nvme_bytes) + " on the drives"));
  EXPECT_THAT(text, HasSubstr("grad_offload=nvme grad_spill_slots=4"));
  EXPECT_THAT(text, HasSubstr("chosen by the planner"));

  PlanInput held = Preset("llama-7b");
  held.offload_gradients = GradOffload::kHost;
  const Hardware roomy = Target(24 * kGiB, 256 * kGiB, kTiB);
  const Plan on_host = MustPlan(held, roomy);
  const nlohmann::json h = PlanToJson(held, roomy, on_host, nullptr);
  EXPECT_EQ(h["placement"]["gradients"]["where"], "host");
  EXPECT_EQ(h["placement"]["gradients"]["chosen_by"], "user");
  EXPECT_EQ(h["placement"]["gradients"]["nvme_bytes"], 0u);
  EXPECT_THAT(FormatPlanReport(held, roomy, on_host, nullptr, {}),
              AllOf(HasSubstr("gradients: host ("), HasSubstr("grad_offload=host"),
                    Not(HasSubstr("grad_spill_slots="))));
}

// The compute-bound advice: by predicted time, not accumulation by
// default. Where the device holds the sequences in one micro-batch that is
// faster, and with the gradients on NVMe accumulating costs their traffic.
TEST(GradOffload, ComputeBoundAdviceWeighsAccumulationsTraffic) {
  PlanInput in = SevenB(GradOffload::kNvme, 1);
  const Plan big = MustPlan(in, Target(80 * kGiB, 256 * kGiB, 2 * kTiB));
  ASSERT_FALSE(big.compute_bound.advice.empty());
  EXPECT_EQ(big.compute_bound.grad_accum, 1);
  EXPECT_THAT(big.compute_bound.advice, HasSubstr("--grad-accum 1,"));

  // On 24 GiB the device holds only small micro-batches: accumulating is
  // advised, and on NVMe its traffic makes that step slower than on the host.
  const Hardware small = Target(24 * kGiB, 256 * kGiB, 2 * kTiB);
  const Plan spilled = MustPlan(in, small);
  in.offload_gradients = GradOffload::kHost;
  const Plan held = MustPlan(in, small);
  ASSERT_GT(spilled.compute_bound.grad_accum, 1);
  ASSERT_GT(held.compute_bound.grad_accum, 1);
  const double per_token_spilled = spilled.compute_bound.step_seconds /
                                   static_cast<double>(spilled.compute_bound.tokens_per_step);
  const double per_token_held =
      held.compute_bound.step_seconds / static_cast<double>(held.compute_bound.tokens_per_step);
  EXPECT_GT(per_token_spilled, 1.5 * per_token_held);
  EXPECT_THAT(spilled.compute_bound.advice, HasSubstr("writes and reads"));
}

}  // namespace
}  // namespace tierflow
