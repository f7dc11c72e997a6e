// ComputePlan: tier totals by hand for a small model, the placement it
// picks, infeasible budgets refused with the right constraint named, the
// step-time model, and the largest-model search growing with the budget.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan/bandwidth_profile.h"
#include "plan/planner.h"
#include "plan/step_time.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

Hardware Machine(uint64_t device, uint64_t host, uint64_t nvme, bool gpu = false) {
  Hardware hw;
  hw.device_is_gpu = gpu;
  hw.device_memory_bytes = device;
  hw.host_memory_bytes = host;
  hw.nvme_capacity_bytes = nvme;
  hw.cores = 8;
  hw.bandwidths = DefaultBandwidths(gpu, hw.cores);
  return hw;
}

PlanInput Input(const std::string& preset, int64_t seq_len) {
  PlanInput in;
  in.model = *PresetModelConfig(preset);
  in.seq_len = seq_len;
  return in;
}

Plan MustPlan(const PlanInput& in, const Hardware& hw) {
  auto plan = ComputePlan(in, hw);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return *plan;
}

TEST(Planner, TinyGpt2AccountingByHand) {
  PlanInput in = Input("tiny-gpt2", 64);
  in.micro_batch = 2;
  in.offload = OffloadChoice::kHost;
  Plan plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  const uint64_t P = 858880;
  const uint64_t largest_group = 12 * 128 * 128 + 13 * 128;  // a block
  ASSERT_EQ(plan.params, static_cast<int64_t>(P));
  EXPECT_EQ(plan.device.bytes_of("weights"), P * 2);
  EXPECT_EQ(plan.device.bytes_of("gradient_buckets"), largest_group * 2 * 2);
  EXPECT_EQ(plan.device.bytes_of("activations"), 1118208u);  // memory_model_test's sum
  EXPECT_EQ(plan.device.bytes_of("workspace"), 0u);          // no cuBLAS on the CPU device
  EXPECT_EQ(plan.device.total_bytes(), P * 2 + largest_group * 4 + 1118208u);

  EXPECT_EQ(plan.host.bytes_of("master_weights"), P * 4);
  EXPECT_EQ(plan.host.bytes_of("optimizer_moments"), P * 8);
  EXPECT_EQ(plan.host.bytes_of("gradient_accumulator"), P * 4);
  EXPECT_EQ(plan.host.bytes_of("pinned_gradient_staging"), largest_group * 2 * 2);
  EXPECT_EQ(plan.host.bytes_of("pinned_weight_staging"), 65536u * 2 * 2);
  EXPECT_EQ(plan.host.bytes_of("nvme_io_buffers"), 0u);
  EXPECT_EQ(plan.host.bytes_of("process_overhead"), kHostProcessOverheadBytes);
  EXPECT_EQ(plan.host.total_bytes(),
            P * 16 + largest_group * 4 + 65536u * 4 + kHostProcessOverheadBytes);
  EXPECT_EQ(plan.pinned_bytes, P * 4 + largest_group * 4 + 65536u * 4);
  EXPECT_EQ(plan.nvme.total_bytes(), 0u);
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(plan.placement.where(), "host");
  EXPECT_FALSE(plan.placement.chosen_by_planner);
  EXPECT_EQ(plan.tokens_per_step, 128);
}

TEST(Planner, NvmeTierHoldsTwelveBytesPerParamPlusMetadata) {
  PlanInput in = Input("tiny-llama", 64);
  in.offload = OffloadChoice::kNvme;
  Plan plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 1 * kGiB));
  const uint64_t P = 803968;
  EXPECT_EQ(plan.placement.where(), "nvme");
  EXPECT_EQ(plan.host.bytes_of("master_weights"), 0u);
  EXPECT_EQ(plan.host.bytes_of("optimizer_moments"), 0u);
  EXPECT_EQ(plan.host.bytes_of("nvme_io_buffers"), 65536u * 12 * 3);
  EXPECT_EQ(plan.nvme.bytes_of("state_files"), P * 12);
  // 1 + 4*9 + 2 tensors, 3 files each (master, m, v); blocks: ceil(9.2 MiB / 1 MiB) + one per file.
  const uint64_t files = (1 + 4 * 9 + 2) * 3;
  const uint64_t blocks = (P * 12 + (1 << 20) - 1) / (1 << 20) + files;
  EXPECT_EQ(plan.nvme.bytes_of("checksums_and_headers"), blocks * 8 + files * 8192);
}

TEST(Planner, AutoKeepsStateOnHostWhenItFits) {
  Plan plan = MustPlan(Input("gpt2", 1024), Machine(8 * kGiB, 64 * kGiB, kTiB, true));
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(plan.placement.where(), "host");
  EXPECT_TRUE(plan.placement.chosen_by_planner);
  EXPECT_EQ(plan.nvme.total_bytes(), 0u);
  EXPECT_EQ(plan.placement.nvme_io_buffers, 0);
}

TEST(Planner, AutoMovesStateToNvmeWhenHostIsTooSmall) {
  // llama-7b: 6.74e9 x 16 B = 108 GB of host state would be needed on host alone.
  Hardware hw = Machine(24 * kGiB, 64 * kGiB, kTiB, true);
  Plan plan = MustPlan(Input("llama-7b", 2048), hw);
  EXPECT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.where(), "split");
  EXPECT_GT(plan.placement.nvme_ratio, 0.3);
  EXPECT_LT(plan.placement.nvme_ratio, 1.0);
  EXPECT_LE(plan.host.total_bytes(), 64 * kGiB);
  // The planner leaves headroom on the host...
  EXPECT_LE(static_cast<double>(plan.host.total_bytes()),
            kHostAutoPlacementFraction * 64 * kGiB + 1);
  // ...but no more than 1% of the state beyond it.
  EXPECT_GT(static_cast<double>(plan.host.total_bytes()) + 0.011 * plan.params * 12,
            kHostAutoPlacementFraction * 64 * kGiB);
  EXPECT_EQ(plan.nvme.bytes_of("state_files"),
            static_cast<uint64_t>(plan.placement.nvme_state_params) * 12);

  hw.host_memory_bytes = 30 * kGiB;  // less host: all state to NVMe
  plan = MustPlan(Input("llama-7b", 2048), hw);
  EXPECT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.where(), "nvme");
}

TEST(Planner, UserRatioIsObeyed) {
  PlanInput in = Input("gpt2", 512);
  in.offload = OffloadChoice::kNvme;
  in.nvme_ratio = 0.25;
  Plan plan = MustPlan(in, Machine(8 * kGiB, 64 * kGiB, kTiB, true));
  EXPECT_FALSE(plan.placement.chosen_by_planner);
  EXPECT_EQ(plan.placement.where(), "split");
  EXPECT_NEAR(plan.placement.nvme_ratio, 0.25, 1e-6);
  EXPECT_EQ(plan.placement.host_state_params + plan.placement.nvme_state_params, plan.params);
}

TEST(Planner, DeviceTooSmallForWeightsIsRefusedNamingDevice) {
  Plan plan = MustPlan(Input("llama-13b", 2048), Machine(24 * kGiB, 64 * kGiB, kTiB, true));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "device");
  EXPECT_THAT(plan.explanation, HasSubstr("device memory"));
  EXPECT_THAT(plan.explanation, HasSubstr("weights alone"));
  Status s = RequireFeasible(plan);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(s.message(), HasSubstr("device memory"));
}

TEST(Planner, DeviceTooSmallForActivationsSuggestsCheckpointing) {
  PlanInput in = Input("gpt2", 1024);
  in.micro_batch = 8;
  in.checkpointing = false;
  Hardware hw = Machine(2 * kGiB, 64 * kGiB, kTiB, true);
  Plan plan = MustPlan(in, hw);
  ASSERT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "device");
  EXPECT_THAT(plan.explanation, HasSubstr("--checkpointing on"));
  EXPECT_THAT(plan.explanation, HasSubstr("--micro-batch"));
  EXPECT_LT(plan.activations_with_checkpointing_bytes, plan.activations_without_checkpointing_bytes);
  in.checkpointing = true;
  in.micro_batch = 1;
  EXPECT_TRUE(MustPlan(in, hw).feasible);
}

TEST(Planner, HostTooSmallWithStateOnHostIsRefusedNamingHost) {
  PlanInput in = Input("gpt2", 1024);
  in.offload = OffloadChoice::kHost;
  Plan plan = MustPlan(in, Machine(8 * kGiB, 2 * kGiB, kTiB, true));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "host");
  EXPECT_THAT(plan.explanation, HasSubstr("host memory"));
  EXPECT_THAT(plan.explanation, HasSubstr("--offload-optimizer nvme"));
  EXPECT_EQ(RequireFeasible(plan).code(), StatusCode::kOutOfMemory);
  // The same budget with auto placement fits by moving state to NVMe.
  in.offload = OffloadChoice::kAuto;
  plan = MustPlan(in, Machine(8 * kGiB, 2 * kGiB, kTiB, true));
  EXPECT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_NE(plan.placement.where(), "host");
}

TEST(Planner, HostTooSmallEvenWithEverythingOnNvme) {
  Plan plan = MustPlan(Input("llama-7b", 2048), Machine(24 * kGiB, 16 * kGiB, kTiB, true));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "host");
  EXPECT_EQ(plan.placement.where(), "nvme");
  EXPECT_THAT(plan.explanation, HasSubstr("even with all optimizer state on NVMe"));
  EXPECT_THAT(plan.explanation, HasSubstr("gradient accumulator"));
}

TEST(Planner, NvmeTooSmallIsRefusedNamingNvme) {
  Plan plan = MustPlan(Input("llama-7b", 2048), Machine(24 * kGiB, 40 * kGiB, 20 * kGiB, true));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "nvme");
  EXPECT_THAT(plan.explanation, HasSubstr("NVMe capacity"));
  EXPECT_THAT(plan.explanation, HasSubstr("--nvme-path"));
  EXPECT_EQ(RequireFeasible(plan).code(), StatusCode::kResourceExhausted);

  plan = MustPlan(Input("llama-7b", 2048), Machine(24 * kGiB, 40 * kGiB, 0, true));
  EXPECT_EQ(plan.binding_constraint, "nvme");
  EXPECT_THAT(plan.explanation, HasSubstr("no NVMe path"));
}

TEST(Planner, EmulatedDeviceMemoryCountsOnTheHost) {
  PlanInput in = Input("gpt2", 512);
  Hardware hw = Machine(16 * kGiB, 16 * kGiB, kTiB, false);
  Plan separate = MustPlan(in, hw);
  hw.device_memory_is_host_memory = true;
  Plan shared = MustPlan(in, hw);
  EXPECT_EQ(shared.host.bytes_of("emulated_device_memory"), shared.device.total_bytes());
  EXPECT_EQ(shared.host.total_bytes(), separate.host.total_bytes() + shared.device.total_bytes());
}

TEST(Planner, CudaContextReserveIsOnTheDevice) {
  Hardware hw = Machine(24 * kGiB, 64 * kGiB, kTiB, true);
  hw.device_reserved_bytes = kCudaContextBytes;
  Plan plan = MustPlan(Input("gpt2", 1024), hw);
  EXPECT_EQ(plan.device.bytes_of("cuda_context"), kCudaContextBytes);
  EXPECT_EQ(plan.device.bytes_of("workspace"), kGemmWorkspaceBytesPerStream * kGemmStreams);
}

TEST(Planner, InvalidInputsAreErrors) {
  Hardware hw = Machine(8 * kGiB, 64 * kGiB, kTiB, true);
  PlanInput in = Input("gpt2", 2048);  // GPT-2 has 1024 positions
  auto plan = ComputePlan(in, hw);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("1024"));
  in = Input("gpt2", 512);
  in.offload = OffloadChoice::kHost;
  in.nvme_ratio = 0.5;
  EXPECT_EQ(ComputePlan(in, hw).status().code(), StatusCode::kInvalidArgument);
  in.offload = OffloadChoice::kNvme;
  in.nvme_ratio = 1.5;
  EXPECT_EQ(ComputePlan(in, hw).status().code(), StatusCode::kInvalidArgument);
  in.nvme_ratio = -1;
  in.micro_batch = 0;
  EXPECT_EQ(ComputePlan(in, hw).status().code(), StatusCode::kInvalidArgument);
}

TEST(StepTime, FlopsFollowTheStandardFormula) {
  ModelConfig m = *PresetModelConfig("llama-7b");
  const double matmul_params = 6738415616.0 - 32000.0 * 4096;  // input embedding is a lookup
  const double per_token = 6 * matmul_params + 12.0 * 32 * 2048 * 4096;
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(m, 2048, false), per_token);
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(m, 2048, true), per_token * 4 / 3);
  // GPT-2's tied head multiplies by wte, so only wpe is a pure lookup.
  ModelConfig g = *PresetModelConfig("gpt2");
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(g, 1024, false),
                   6 * (124439808.0 - 1024 * 768) + 12.0 * 12 * 1024 * 768);
}

TEST(StepTime, StagesByHandAndOverlapBound) {
  PlanInput in = Input("llama-7b", 2048);
  in.offload = OffloadChoice::kNvme;
  in.grad_accum = 4;
  Hardware hw = Machine(24 * kGiB, 64 * kGiB, kTiB, true);
  Bandwidths& b = hw.bandwidths;
  b.h2d_gb_per_second = b.d2h_gb_per_second = 20;
  b.host_memory_gb_per_second = 40;
  b.adam_params_per_second = 1e9;
  b.nvme_read_gb_per_second = 6;
  b.nvme_write_gb_per_second = 4;
  b.device_tflops = 100;
  b.device_efficiency = 0.5;
  Plan plan = MustPlan(in, hw);
  const double P = 6738415616.0;
  auto stage = [&](const std::string& name) {
    for (const StageTime& s : plan.stages) {
      if (s.name == name) return s.seconds;
    }
    ADD_FAILURE() << "no stage " << name;
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(stage("compute"), plan.flops_per_step / 50e12);
  EXPECT_DOUBLE_EQ(stage("d2h_gradients"), 4 * P * 2 / 20e9);
  EXPECT_DOUBLE_EQ(stage("host_accumulate"), 4 * P * 10 / 40e9);
  EXPECT_DOUBLE_EQ(stage("optimizer"), P / 1e9);
  EXPECT_DOUBLE_EQ(stage("nvme_io"), P * 12 / 6e9 + P * 12 / 4e9);
  EXPECT_DOUBLE_EQ(stage("h2d_weights"), P * 2 / 20e9);
  double serial = 0;
  for (const StageTime& s : plan.stages) serial += s.seconds;
  EXPECT_DOUBLE_EQ(plan.serial_step_seconds, serial);
  EXPECT_LT(plan.predicted_step_seconds, plan.serial_step_seconds);
  EXPECT_GE(plan.predicted_step_seconds,
            std::max({stage("compute"), stage("d2h_gradients"), stage("host_accumulate")}) +
                stage("nvme_io"));
}

TEST(LargestModel, GrowsWithHostMemoryAndNvme) {
  PlanInput in = Input("llama-7b", 2048);
  int64_t previous = 0;
  for (uint64_t host_gib : {16, 32, 64, 128, 256}) {
    auto largest = LargestFittingModel(in, Machine(80 * kGiB, host_gib * kGiB, 4 * kTiB, true));
    ASSERT_TRUE(largest.ok()) << largest.status().ToString();
    EXPECT_GE(largest->params, previous) << host_gib << " GiB host";
    previous = largest->params;
  }
  EXPECT_GT(previous, 10'000'000'000);

  previous = 0;
  for (uint64_t nvme_gib : {50, 100, 200, 400}) {
    auto largest = LargestFittingModel(in, Machine(80 * kGiB, 64 * kGiB, nvme_gib * kGiB, true));
    ASSERT_TRUE(largest.ok());
    EXPECT_GE(largest->params, previous) << nvme_gib << " GiB NVMe";
    previous = largest->params;
  }
}

TEST(LargestModel, DeepestFitIsFeasibleAndOneLayerMoreIsNot) {
  PlanInput in = Input("llama-7b", 2048);
  Hardware hw = Machine(24 * kGiB, 64 * kGiB, kTiB, true);
  auto layers = DeepestFittingLayers(in, hw, 1000);
  ASSERT_TRUE(layers.ok()) << layers.status().ToString();
  ASSERT_GT(*layers, 32);  // llama-7b itself fits this machine
  ASSERT_LT(*layers, 1000);
  in.model.n_layers = *layers;
  EXPECT_TRUE(ComputePlan(in, hw)->feasible);
  in.model.n_layers = *layers + 1;
  EXPECT_FALSE(ComputePlan(in, hw)->feasible);
  EXPECT_EQ(*DeepestFittingLayers(in, hw, 10), 10);  // capped
}

TEST(LargestModel, IsFeasibleAtLeastAsBigAsFittingPresetsAndRealisticallyShaped) {
  PlanInput in = Input("llama-13b", 2048);
  Hardware hw = Machine(24 * kGiB, 64 * kGiB, kTiB, true);
  auto largest = LargestFittingModel(in, hw);
  ASSERT_TRUE(largest.ok());
  ASSERT_GT(largest->params, 0);
  EXPECT_EQ(ParameterCount(largest->config), largest->params);
  EXPECT_LE(largest->config.n_layers * kMinWidthPerLayer,
            std::max<int64_t>(largest->config.d_model, 32 * kMinWidthPerLayer));
  PlanInput check = in;
  check.model = largest->config;
  check.seq_len = std::min(in.seq_len, largest->config.max_seq_len);
  EXPECT_TRUE(ComputePlan(check, hw)->feasible);
  for (const ModelConfig& preset : FamilyPresetLadder(ModelFamily::kLlama)) {
    check.model = preset;
    check.seq_len = std::min<int64_t>(2048, preset.max_seq_len);
    if (ComputePlan(check, hw)->feasible) EXPECT_GE(largest->params, ParameterCount(preset));
  }
}

TEST(LargestModel, NothingFitsATinyBudget) {
  auto largest = LargestFittingModel(Input("llama-7b", 2048), Machine(1 << 20, 1 << 20, 0, true));
  ASSERT_TRUE(largest.ok());
  EXPECT_EQ(largest->params, 0);
}

}  // namespace
}  // namespace tierflow
