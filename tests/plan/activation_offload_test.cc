// The planner and the activation checkpoints in host memory: what it counts
// (a ring of three residuals on the device instead of L + 1, the pinned host
// store, the transfers each micro-batch), what auto chooses (the device
// while the run fits there without streaming weights; host where only it
// fits), what it refuses, the JSON it writes, and the longest context.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/plan_json.h"
#include "plan/planner.h"
#include "tests/plan/plan_test_util.h"

namespace tierflow {
namespace {

using plan_test::Gpu;
using plan_test::MustPlan;
using plan_test::Stage;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

PlanInput Llama8b(int64_t seq_len) {
  PlanInput in;
  in.model = *PresetModelConfig("llama-8b");
  in.seq_len = seq_len;
  return in;
}

// Llama-3-8B at 64K tokens on 24 GiB: the 33 residuals alone are 16.5 GiB.
TEST(ActivationOffload, AutoMovesTheCheckpointsWhereOnlyThatFits) {
  const Hardware hw = Gpu(24 * kGiB, 256 * kGiB, 2 * kTiB);
  PlanInput in = Llama8b(65536);
  in.mlp_tile_rows = 0;  // the checkpoints alone; tiles below
  in.offload_activations = ActivationOffload::kNone;
  const Plan kept = MustPlan(in, hw);
  EXPECT_FALSE(kept.feasible);
  EXPECT_EQ(kept.binding_constraint, "device");

  in.offload_activations = ActivationOffload::kAuto;
  const Plan plan = MustPlan(in, hw);
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.activations, ActivationOffload::kHost);
  EXPECT_TRUE(plan.placement.activations_chosen);
  // (N, C) bf16 residuals: 32 blocks + the output = 33; three stay.
  const uint64_t residual = 65536ull * 4096 * 2;
  EXPECT_EQ(plan.activations.residual, 3 * residual);
  EXPECT_EQ(plan.activations.host_checkpoints, 30 * residual);
  EXPECT_EQ(plan.activations.checkpoint_transfer, 30 * residual);
  EXPECT_EQ(plan.host.bytes_of("activation_checkpoints"), 30 * residual);
  EXPECT_EQ(kept.activations.total() - plan.activations.total(), 30 * residual);
  EXPECT_GE(plan.pinned_bytes, 30 * residual);
  // Down in forward and up in backward, at the default 25 GB/s each way.
  EXPECT_DOUBLE_EQ(Stage(plan, "activation_checkpoints"), 2.0 * 30 * residual / 25e9);
  EXPECT_EQ(Stage(kept, "activation_checkpoints"), 0.0);
  EXPECT_EQ(plan.placement.mlp_tile_rows, 0);
}

// Llama-3-8B at 128K on 24 GiB (the target): only with the
// checkpoints in host memory and the MLP in row tiles; auto finds that, and
// the buckets then hold a block's MLP weights.
TEST(ActivationOffload, AutoTilesTheMlpAt128K) {
  const Hardware hw = Gpu(24 * kGiB, 256 * kGiB, 2 * kTiB);
  PlanInput in = Llama8b(131072);
  const Plan plan = MustPlan(in, hw);
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.activations, ActivationOffload::kHost);
  EXPECT_EQ(plan.placement.mlp_tile_rows, kAutoMlpTileRows);
  EXPECT_GE(plan.placement.grad_bucket_params, GradBucketSizesOf(in.model).mlp);
  EXPECT_EQ(GradBucketSizesOf(in.model).mlp, 3 * 4096 * 14336);
  for (auto [where, tile] : {std::pair{ActivationOffload::kNone, int64_t{kAutoMlpTileRows}},
                             std::pair{ActivationOffload::kHost, int64_t{0}}}) {
    in.offload_activations = where;
    in.mlp_tile_rows = tile;
    EXPECT_FALSE(MustPlan(in, hw).feasible) << ChoiceName(where) << " tile " << tile;
  }
  // The verdict says where the checkpoints are and how many units stream.
  EXPECT_THAT(plan.explanation, HasSubstr("activation checkpoints in host memory"));
  EXPECT_THAT(plan.explanation, HasSubstr("units' weights streamed"));
  // A tile off the quantum, and buckets below the MLP's weights, are refused.
  in.mlp_tile_rows = 1000;
  EXPECT_FALSE(ComputePlan(in, hw).ok());
  in.mlp_tile_rows = 4096;
  in.grad_bucket_params = GradBucketSizesOf(in.model).tensors;
  auto small = ComputePlan(in, hw);
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(small.status().message(), HasSubstr("MLP weights"));
}

// The second target: 512K tokens on 80 GiB / 512 GiB / 4 TiB, past
// the model's positions (the verdict says so); and a host too small for the
// checkpoints is named with what to change.
TEST(ActivationOffload, HalfAMillionTokensOn80GiBAndAShortHostIsNamed) {
  PlanInput in = Llama8b(524288);
  const Plan plan = MustPlan(in, Gpu(80 * kGiB, 512 * kGiB, 4 * kTiB));
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.activations, ActivationOffload::kHost);
  EXPECT_THAT(plan.explanation, HasSubstr("longer than the model's 131072 positions"));
  in = Llama8b(131072);
  in.offload_activations = ActivationOffload::kHost;
  // The gradients held in host memory too (auto would move them to the drives).
  in.offload_gradients = GradOffload::kHost;
  const Plan short_host = MustPlan(in, Gpu(24 * kGiB, 48 * kGiB, 2 * kTiB));
  ASSERT_FALSE(short_host.feasible);
  EXPECT_EQ(short_host.binding_constraint, "host");
  EXPECT_THAT(short_host.explanation, HasSubstr("activation checkpoints in host memory take"));
  EXPECT_THAT(short_host.explanation, HasSubstr("--offload-activations none"));
}

TEST(ActivationOffload, AutoKeepsThemOnTheDeviceWhenEverythingFits) {
  PlanInput in;
  in.model = *PresetModelConfig("small-llama");
  in.seq_len = 512;
  const Plan plan = MustPlan(in, Gpu(24 * kGiB, 64 * kGiB, kTiB));
  ASSERT_TRUE(plan.feasible);
  EXPECT_EQ(plan.placement.activations, ActivationOffload::kNone);
  EXPECT_EQ(plan.activations.host_checkpoints, 0u);
  EXPECT_EQ(plan.host.bytes_of("activation_checkpoints"), 0u);
  // Forced: the ring, and the store, even where it is not needed.
  in.offload_activations = ActivationOffload::kHost;
  in.mlp_tile_rows = 0;
  const Plan forced = MustPlan(in, Gpu(24 * kGiB, 64 * kGiB, kTiB));
  EXPECT_EQ(forced.placement.activations, ActivationOffload::kHost);
  EXPECT_FALSE(forced.placement.activations_chosen);
  EXPECT_EQ(forced.activations.host_checkpoints, 2ull * 512 * 256 * 2);  // 4 blocks: 5 - 3
}

TEST(ActivationOffload, HostNeedsCheckpointingAndAutoThenKeepsThem) {
  PlanInput in = Llama8b(4096);
  in.checkpointing = false;
  in.offload_activations = ActivationOffload::kHost;
  auto refused = ComputePlan(in, Gpu(80 * kGiB, 256 * kGiB, kTiB));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--activation-checkpointing"));
  in.offload_activations = ActivationOffload::kAuto;
  EXPECT_EQ(MustPlan(in, Gpu(80 * kGiB, 256 * kGiB, kTiB)).placement.activations,
            ActivationOffload::kNone);
}

TEST(ActivationOffload, JsonSaysWhereAndHowMuch) {
  const Hardware hw = Gpu(24 * kGiB, 256 * kGiB, 2 * kTiB);
  const PlanInput in = Llama8b(65536);
  const Plan plan = MustPlan(in, hw);
  const nlohmann::json j = PlanToJson(in, hw, plan, nullptr);
  EXPECT_EQ(j["input"]["offload_activations"], "auto");
  EXPECT_EQ(j["placement"]["activations"]["where"], "host");
  EXPECT_EQ(j["placement"]["activations"]["chosen_by"], "planner");
  EXPECT_EQ(j["placement"]["activations"]["host_bytes"], plan.activations.host_checkpoints);
}

// The longest context is where the plan stops fitting, and the offload
// reaches further.
TEST(ActivationOffload, LongestContextIsTheEdgeOfFitting) {
  const Hardware hw = Gpu(24 * kGiB, 256 * kGiB, 2 * kTiB);
  PlanInput in = Llama8b(2048);
  auto longest = LongestFittingContext(in, hw);
  ASSERT_TRUE(longest.ok()) << longest.status().ToString();
  EXPECT_GT(longest->on_device, 2048);
  EXPECT_GT(longest->offloaded, longest->on_device);
  for (auto [where, edge] : {std::pair{ActivationOffload::kNone, longest->on_device},
                             std::pair{ActivationOffload::kHost, longest->offloaded}}) {
    in.offload_activations = where;
    in.seq_len = edge;
    EXPECT_TRUE(MustPlan(in, hw).feasible) << edge;
    if (edge < in.model.max_seq_len) {
      in.seq_len = edge + 1;
      EXPECT_FALSE(MustPlan(in, hw).feasible) << edge + 1;
    }
  }
  in.checkpointing = false;
  in.offload_activations = ActivationOffload::kAuto;
  auto without = LongestFittingContext(in, hw);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->offloaded, 0);
  EXPECT_LT(without->on_device, longest->on_device);
}

}  // namespace
}  // namespace tierflow
