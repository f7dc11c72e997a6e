// ComputePlan: tier totals by hand for a small model, the placement it
// picks, infeasible budgets refused with the right constraint named, the
// step-time model, and the largest-model search growing with the budget.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <limits>
#include <thread>

#include "common/cancel.h"
#include "plan/hardware_profile.h"
#include "plan/planner.h"
#include "plan/step_time.h"
#include "tests/plan/plan_test_util.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

using plan_test::MustPlan;

TEST(Planner, TinyGpt2AccountingByHand) {
  PlanInput in = Input("tiny-gpt2", 64);
  in.micro_batch = 2;
  in.offload = OffloadPlacement::kHost;
  Plan plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  const uint64_t P = 858880;
  const uint64_t unit = 12 * 128 * 128 + 13 * 128;  // a block: the largest unit and sub-group
  ASSERT_EQ(plan.params, static_cast<int64_t>(P));
  EXPECT_EQ(plan.device.bytes_of("weights"), P * 2);
  // fp32 buckets and, for the bf16 transfer (the default with bf16 weights),
  // each bucket's bf16 cast.
  EXPECT_EQ(plan.grad_transfer_dtype, DType::kBF16);
  EXPECT_EQ(plan.device.bytes_of("gradient_buckets"), 3 * unit * (4 + 2));
  EXPECT_EQ(plan.device.bytes_of("activations"), 1089792u);  // memory_model_test's sum
  EXPECT_EQ(plan.device.bytes_of("workspace"), 0u);          // no cuBLAS on the CPU device
  EXPECT_EQ(plan.device.total_bytes(), P * 2 + 18 * unit + 1089792u);

  EXPECT_EQ(plan.host.bytes_of("master_weights"), P * 4);
  EXPECT_EQ(plan.host.bytes_of("optimizer_moments"), P * 8);
  // 8 GiB leave room to speculate on all of P.
  EXPECT_EQ(plan.placement.speculation_params, static_cast<int64_t>(P));
  EXPECT_EQ(plan.placement.speculation_from, "free host memory");
  EXPECT_EQ(plan.host.bytes_of("speculation_backup"), P * 12);
  // One micro-batch: the gradients land, bf16, in one pinned buffer; no staging.
  EXPECT_EQ(plan.host.bytes_of("gradient_accumulator"), P * 2);
  EXPECT_EQ(plan.host.bytes_of("pinned_gradient_staging"), 0u);
  EXPECT_EQ(plan.host.bytes_of("pinned_weight_staging"), 4 * unit * 2);
  EXPECT_EQ(plan.host.bytes_of("pinned_speculative_weights"), P * 2);
  EXPECT_EQ(plan.host.bytes_of("nvme_io_buffers"), 0u);
  EXPECT_EQ(plan.host.bytes_of("process_overhead"), kHostProcessOverheadBytes);
  // A checkpoint streams: one sub-group's fp32 state (12 x unit), then the
  // larger of the writer's buffer and fp32 scratch (4 + 4 x unit) and the
  // checksum buffer (the largest file: a block's optimizer file, 12 x unit).
  EXPECT_EQ(plan.host.bytes_of("checkpoint_buffers"), 24 * unit);
  EXPECT_EQ(plan.host.total_bytes(), P * 28 + 8 * unit + 24 * unit + kHostProcessOverheadBytes);
  EXPECT_EQ(plan.pinned_bytes, P * 2 + 8 * unit + P * 2);
  EXPECT_EQ(plan.nvme.total_bytes(), 0u);
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(plan.placement.where(), "host");
  EXPECT_EQ(plan.placement.offload(), OffloadPlacement::kHost);
  EXPECT_EQ(plan.placement.num_sub_groups, 6);
  EXPECT_FALSE(plan.placement.chosen_by_planner);
  EXPECT_EQ(plan.tokens_per_step, 128);

  // fp32 transfer: no cast on the device, 4 B/param landing.
  in.grad_transfer_dtype = DType::kF32;
  plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  EXPECT_EQ(plan.device.bytes_of("gradient_buckets"), 3 * unit * 4);
  EXPECT_EQ(plan.host.bytes_of("gradient_accumulator"), P * 4);
  EXPECT_EQ(plan.host.bytes_of("pinned_gradient_staging"), 0u);
  EXPECT_EQ(plan.pinned_bytes, P * 4 + 8 * unit + P * 2);
  in.grad_transfer_dtype.reset();

  // Several micro-batches: bf16 staging buckets are the landing, and the
  // fp32 accumulator is pageable (host memory, but not pinned).
  in.grad_accum = 2;
  plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  EXPECT_EQ(plan.host.bytes_of("gradient_accumulator"), P * 4);
  EXPECT_EQ(plan.host.bytes_of("pinned_gradient_staging"), 3 * unit * 2);
  EXPECT_EQ(plan.host.total_bytes(),
            P * 30 + 6 * unit + 8 * unit + 24 * unit + kHostProcessOverheadBytes);
  EXPECT_EQ(plan.pinned_bytes, 6 * unit + 8 * unit + P * 2);
  in.grad_accum = 1;

  // The synchronous pipeline keeps no speculation buffers.
  in.pipeline = PipelineKind::kSynchronous;
  plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  EXPECT_EQ(plan.placement.speculation_params, 0);
  EXPECT_EQ(plan.placement.speculation_from, "none: synchronous pipeline");
  EXPECT_EQ(plan.host.bytes_of("speculation_backup"), 0u);
  EXPECT_EQ(plan.host.bytes_of("pinned_speculative_weights"), 0u);
}

// Speculation takes what host memory has left, up to the fraction auto
// placement fills, after everything else: here room for 100000 parameters'
// backup (12 B) and new weights (2 B), and 13 bytes, too few for another.
TEST(Planner, SpeculationBudgetComesFromFreeHostMemory) {
  PlanInput in = Input("tiny-gpt2", 64);
  in.offload = OffloadPlacement::kHost;
  in.pipeline = PipelineKind::kSynchronous;  // everything but speculation
  const uint64_t others = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0)).host.total_bytes();
  in.pipeline = PipelineKind::kOverlapped;
  const uint64_t target = others + 100000 * 14 + 13;
  // The smallest capacity whose 90% reaches the target.
  uint64_t capacity = static_cast<uint64_t>(static_cast<double>(target) / 0.9);
  while (static_cast<uint64_t>(static_cast<double>(capacity) * kHostAutoPlacementFraction) <
         target) {
    ++capacity;
  }
  Plan plan = MustPlan(in, Machine(1 * kGiB, capacity, 0));
  EXPECT_EQ(plan.placement.speculation_params, 100000);
  EXPECT_EQ(plan.placement.speculation_from, "free host memory");
  EXPECT_EQ(plan.host.bytes_of("speculation_backup"), 100000u * 12);
  EXPECT_EQ(plan.host.bytes_of("pinned_speculative_weights"), 100000u * 2);
  EXPECT_LE(plan.host.total_bytes(), target);
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(plan.placement.where(), "host");  // speculation never displaces state

  // No room at all: no speculation (the run itself still fits).
  plan = MustPlan(in, Machine(1 * kGiB, others + (others / 9) + 1, 0));
  EXPECT_EQ(plan.placement.speculation_params, 0);
  EXPECT_EQ(plan.host.bytes_of("speculation_backup"), 0u);

  // An explicit budget wins over the free memory, even beyond it.
  in.speculation_params = 300000;
  plan = MustPlan(in, Machine(1 * kGiB, capacity, 0));
  EXPECT_EQ(plan.placement.speculation_params, 300000);
  EXPECT_EQ(plan.placement.speculation_from, "input");
  EXPECT_EQ(plan.host.bytes_of("speculation_backup"), 300000u * 12);
  in.speculation_params = int64_t{1} << 30;  // more than the model: all of it
  plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  EXPECT_EQ(plan.placement.speculation_params, plan.params);

  // All state on NVMe: no backup (two copies there), only the new weights.
  in.speculation_params.reset();
  in.offload = OffloadPlacement::kNvme;
  plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, kTiB));
  EXPECT_EQ(plan.placement.speculation_params, plan.params);
  EXPECT_EQ(plan.host.bytes_of("speculation_backup"), 0u);
  EXPECT_EQ(plan.host.bytes_of("pinned_speculative_weights"),
            static_cast<uint64_t>(plan.params) * 2);
}

TEST(Planner, RefusesWhatTheEngineWouldRefuse) {
  PlanInput in = Input("tiny-gpt2", 64);
  in.pipeline = PipelineKind::kSynchronous;
  in.speculation_params = 1000;
  auto plan = ComputePlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("overlapped pipeline only"));
  in = Input("tiny-gpt2", 64);
  in.grad_transfer_dtype = DType::kF16;  // bf16 weights: unscaled gradients
  plan = ComputePlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("fp16 gradient transfer needs fp16 weights"));
}

TEST(Planner, NvmeTierBytesByHand) {
  PlanInput in = Input("tiny-llama", 64);
  in.offload = OffloadPlacement::kNvme;
  in.sub_group_params = 65536;
  // Units: embeddings 32768 (1 slice), 4 blocks of 184576 (3 slices), head 32896 (1):
  // 14 sub-groups, each 12 B/param in one or more whole 1 MiB blocks: 14 MiB.
  Plan plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 1 * kGiB));
  const uint64_t P = 803968;
  EXPECT_EQ(plan.placement.where(), "nvme");
  EXPECT_EQ(plan.placement.nvme_sub_groups, 14);
  EXPECT_EQ(plan.host.bytes_of("master_weights"), 0u);
  EXPECT_EQ(plan.host.bytes_of("optimizer_moments"), 0u);
  EXPECT_EQ(plan.host.bytes_of("speculation_backup"), 0u);  // no host state to back up
  EXPECT_EQ(plan.host.bytes_of("nvme_io_buffers"), 4u * 65536 * 12);
  EXPECT_EQ(plan.nvme.bytes_of("state_files"), 2u * (14u << 20));  // two copies (overlapped)
  EXPECT_EQ(plan.nvme.bytes_of("spare_blocks"), 4u << 20);         // 5 x 768 KiB -> 4 MiB
  // Header (256 + 64 x 28 tensors -> 4 KiB) and block tables (2 x (32 + 8 x 29) -> 2 x 4 KiB),
  // padded to the first 1 MiB data block.
  EXPECT_EQ(plan.nvme.bytes_of("headers_and_block_tables"), 1u << 20);
  EXPECT_EQ(plan.host.bytes_of("gradient_accumulator"), P * 2);  // one micro-batch, bf16

  in.pipeline = PipelineKind::kSynchronous;
  plan = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 1 * kGiB));
  EXPECT_EQ(plan.nvme.bytes_of("state_files"), 14u << 20);
}

TEST(Planner, AutoKeepsStateOnHostWhenItFits) {
  Plan plan = MustPlan(Input("gpt2", 1024), Machine(8 * kGiB, 64 * kGiB, kTiB, true));
  EXPECT_TRUE(plan.feasible);
  EXPECT_EQ(plan.placement.where(), "host");
  EXPECT_TRUE(plan.placement.chosen_by_planner);
  EXPECT_EQ(plan.nvme.total_bytes(), 0u);
  EXPECT_EQ(plan.placement.nvme_sub_groups, 0);
  EXPECT_EQ(plan.host.bytes_of("nvme_io_buffers"), 0u);
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
  // Two copies (overlapped pipeline) of 12 B/param; 4Mi sub-groups fill whole 1 MiB blocks
  // but the last slice of each unit is rounded up.
  const double state = 2.0 * 12 * static_cast<double>(plan.placement.nvme_state_params);
  EXPECT_GE(static_cast<double>(plan.nvme.bytes_of("state_files")), state);
  EXPECT_LE(static_cast<double>(plan.nvme.bytes_of("state_files")),
            state + 2.0 * plan.placement.nvme_sub_groups * (1 << 20));

  // Less host (90% of it is 13.5 GiB, under the 13.8 GiB the host needs with
  // no state at all): all state to NVMe.
  hw.host_memory_bytes = 15 * kGiB;
  plan = MustPlan(Input("llama-7b", 2048), hw);
  EXPECT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.placement.where(), "nvme");
}

TEST(Planner, UserRatioIsObeyed) {
  PlanInput in = Input("gpt2", 512);
  in.offload = OffloadPlacement::kNvme;
  in.nvme_ratio = 0.25;
  Plan plan = MustPlan(in, Machine(8 * kGiB, 64 * kGiB, kTiB, true));
  EXPECT_FALSE(plan.placement.chosen_by_planner);
  EXPECT_EQ(plan.placement.where(), "split");
  EXPECT_NEAR(plan.placement.nvme_ratio, 0.25, 1e-6);
  EXPECT_EQ(plan.placement.host_state_params + plan.placement.nvme_state_params, plan.params);
}

// With every weight kept resident (--offload-param none); param_offload_test.cc
// has the same budget fitting by streaming some of them.
TEST(Planner, DeviceTooSmallForWeightsIsRefusedNamingDevice) {
  PlanInput in = Input("llama-13b", 2048);
  in.param_offload = ParamOffload::kNone;
  Plan plan = MustPlan(in, Machine(24 * kGiB, 64 * kGiB, kTiB, true));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "device");
  EXPECT_THAT(plan.explanation, HasSubstr("device memory"));
  EXPECT_THAT(plan.explanation, HasSubstr("weights alone"));
  Status s = RequireFeasible(plan);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(s.message(), HasSubstr("device memory"));
}

// Llama-3-8B on 23 GiB: the weights (14.96 GiB) fit, the three gradient
// buckets sized to the 128K x 4096 head (8.81 GiB) do not fit beside them;
// the advice names the buckets, not the weights. (`tierflow plan` on a
// 24 GiB card says the same: it reserves 768 MiB for the CUDA context.)
// Every weight resident (--offload-param none): auto would stream some.
TEST(Planner, DeviceTooSmallForGradientBucketsNamesThem) {
  // 14.96 GiB of weights and 32 MiB of workspace: even the smallest buckets
  // (the largest tensor, 14336 x 4096: 0.98 GiB) overflow 15.5 GiB.
  PlanInput in = Input("llama-8b", 2048);
  in.param_offload = ParamOffload::kNone;
  Plan plan = MustPlan(in, Machine(static_cast<uint64_t>(15.5 * kGiB), 64 * kGiB, kTiB, true));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "device");
  EXPECT_EQ(plan.placement.grad_bucket_params, 14336 * 4096);
  EXPECT_THAT(plan.explanation, HasSubstr("3 gradient buckets"));
  EXPECT_THAT(plan.explanation, HasSubstr("lower --grad-buckets"));
  EXPECT_THAT(plan.explanation, Not(HasSubstr("weights alone")));
}

// Llama-3-8B on a 24 GiB GPU with 64 GiB of RAM (the 8B-on-24-GB goal):
// buckets of the largest tensor, the vocabulary matrices in slices, and
// both tiers within 85%.
TEST(Planner, Llama8bOn24GiBFitsWithRoomToSpare) {
  // As `tierflow plan --gpu-memory 24GiB` sees it: the card's total, less the context.
  Hardware hw = Machine(24 * kGiB, 64 * kGiB, kTiB, true);
  hw.device_reserved_bytes = kCudaContextBytes;
  Plan plan = MustPlan(Input("llama-8b", 2048), hw);
  ASSERT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_LE(plan.device.total_bytes(), 0.85 * 24 * kGiB);
  EXPECT_LE(plan.host.total_bytes(), 0.85 * 64 * kGiB);
  // Neither the head's 525 M nor a block's 218 M keep the device within 85%.
  EXPECT_EQ(plan.placement.grad_bucket_params, 14336 * 4096);
  EXPECT_TRUE(plan.placement.vocab_sliced);
  // The head's second pass over its logits is in the FLOPs: 2 x tokens x V x C more.
  PlanInput whole = Input("llama-8b", 2048);
  whole.grad_bucket_params = 600'000'000;  // above the largest unit: every unit whole
  const Plan unsliced = MustPlan(whole, Machine(48 * kGiB, 64 * kGiB, kTiB, true));
  EXPECT_FALSE(unsliced.placement.vocab_sliced);
  EXPECT_EQ(unsliced.placement.grad_bucket_params, 128256 * 4096 + 4096);  // the head + its norm
  EXPECT_DOUBLE_EQ(plan.flops_per_step - unsliced.flops_per_step, 2.0 * 2048 * 128256 * 4096);
}

// When the update outlasts compute, the plan says which micro-batch and
// accumulation make compute the slowest stage, and its prediction is what a
// plan with those settings predicts.
TEST(Planner, AdvisesTheTokensPerStepThatMakeComputeTheBottleneck) {
  const Hardware hw = Machine(24 * kGiB, 64 * kGiB, kTiB, true);
  PlanInput in = Input("llama-1b", 2048);
  const Plan plan = MustPlan(in, hw);
  double compute = 0, slowest_update = 0;
  for (const StageTime& st : plan.stages) {
    if (st.name == "compute") compute = st.seconds;
    if (st.name == "optimizer" || st.name == "nvme_io" || st.name == "h2d_weights") {
      slowest_update = std::max(slowest_update, st.seconds);
    }
  }
  ASSERT_GT(slowest_update, compute);
  const Plan::ComputeBound& advice = plan.compute_bound;
  ASSERT_GT(advice.grad_accum, 0);
  EXPECT_THAT(advice.advice, HasSubstr("--grad-accum " + std::to_string(advice.grad_accum)));
  EXPECT_GT(advice.tokens_per_step, plan.tokens_per_step);
  // The micro-batch it names, with that accumulation: compute now dominates.
  const size_t at = advice.advice.find("--micro-batch ");
  ASSERT_NE(at, std::string::npos);
  in.micro_batch = std::stoll(advice.advice.substr(at + 14));
  in.grad_accum = advice.grad_accum;
  EXPECT_EQ(in.micro_batch * 2048 * in.grad_accum, advice.tokens_per_step);
  const Plan advised = MustPlan(in, hw);
  EXPECT_NEAR(advised.predicted_step_seconds, advice.step_seconds, 1e-9 * advice.step_seconds);
  double advised_compute = 0, advised_update = 0;
  for (const StageTime& st : advised.stages) {
    if (st.name == "compute") advised_compute = st.seconds;
    if (st.name == "optimizer" || st.name == "nvme_io" || st.name == "h2d_weights") {
      advised_update = std::max(advised_update, st.seconds);
    }
  }
  EXPECT_GE(advised_compute, advised_update);
  EXPECT_TRUE(advised.compute_bound.advice.empty());
  // And none smaller would: one sequence fewer per step computes less than the update.
  const double per_sequence = compute / (static_cast<double>(plan.tokens_per_step) / 2048);
  const size_t from = advice.advice.find("from about ");
  ASSERT_NE(from, std::string::npos);
  const int64_t threshold = std::stoll(advice.advice.substr(from + 11));
  EXPECT_LT(per_sequence * static_cast<double>(threshold / 2048 - 1), slowest_update);
  EXPECT_GE(per_sequence * static_cast<double>(threshold / 2048), slowest_update);
}

// pin_memory: the host share of the optimizer state counts as pinned.
TEST(Planner, LockedHostStateCountsAsPinned) {
  PlanInput in = Input("tiny-gpt2", 64);
  in.offload = OffloadPlacement::kHost;
  const Plan pageable = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  in.lock_host_state = true;
  const Plan locked = MustPlan(in, Machine(1 * kGiB, 8 * kGiB, 0));
  EXPECT_EQ(locked.pinned_bytes - pageable.pinned_bytes,
            locked.host.bytes_of("master_weights") + locked.host.bytes_of("optimizer_moments"));
  EXPECT_EQ(locked.host.total_bytes(), pageable.host.total_bytes());
}

TEST(Planner, BucketSizeGivenOrChosenLargestFirst) {
  // Roomy: the largest unit, nothing sliced.
  Plan roomy = MustPlan(Input("llama-8b", 2048), Machine(80 * kGiB, 256 * kGiB, kTiB, true));
  EXPECT_EQ(roomy.placement.grad_bucket_params, 128256 * 4096 + 4096);
  EXPECT_FALSE(roomy.placement.vocab_sliced);
  // Given: used as it is, and below the largest tensor refused.
  PlanInput given = Input("llama-8b", 2048);
  given.grad_bucket_params = 100'000'000;
  Plan p = MustPlan(given, Machine(80 * kGiB, 256 * kGiB, kTiB, true));
  EXPECT_EQ(p.placement.grad_bucket_params, 100'000'000);
  EXPECT_TRUE(p.placement.vocab_sliced);
  given.grad_bucket_params = 14336 * 4096 - 1;
  auto refused = ComputePlan(given, Machine(80 * kGiB, 256 * kGiB, kTiB, true));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("smaller than the largest gradient"));
}

TEST(Planner, DeviceTooSmallForActivationsSuggestsCheckpointing) {
  PlanInput in = Input("gpt2", 1024);
  in.micro_batch = 8;
  in.checkpointing = false;
  in.mlp_tile_rows = 0;
  Hardware hw = Machine(2 * kGiB, 64 * kGiB, kTiB, true);
  Plan plan = MustPlan(in, hw);
  ASSERT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "device");
  EXPECT_THAT(plan.explanation, HasSubstr("--checkpointing on"));
  EXPECT_THAT(plan.explanation, HasSubstr("--micro-batch"));
  EXPECT_LT(plan.activations_with_checkpointing_bytes,
            plan.activations_without_checkpointing_bytes);
  in.checkpointing = true;
  in.micro_batch = 1;
  EXPECT_TRUE(MustPlan(in, hw).feasible);
}

TEST(Planner, HostTooSmallWithStateOnHostIsRefusedNamingHost) {
  PlanInput in = Input("gpt2", 1024);
  in.offload = OffloadPlacement::kHost;
  Plan plan = MustPlan(in, Machine(8 * kGiB, 5 * kGiB / 2, kTiB, true));  // needs 2.65 GiB
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "host");
  EXPECT_THAT(plan.explanation, HasSubstr("host memory"));
  EXPECT_THAT(plan.explanation, HasSubstr("--offload-optimizer nvme"));
  EXPECT_EQ(RequireFeasible(plan).code(), StatusCode::kOutOfMemory);
  // The same budget with auto placement fits by moving state to NVMe.
  in.offload = OffloadPlacement::kAuto;
  plan = MustPlan(in, Machine(8 * kGiB, 5 * kGiB / 2, kTiB, true));
  EXPECT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_NE(plan.placement.where(), "host");
}

TEST(Planner, HostTooSmallEvenWithEverythingOnNvme) {
  // The host needs 13.8 GiB with every byte of state on NVMe, the gradients
  // held there (auto would move them to the drives: grad_offload_test).
  PlanInput in = Input("llama-7b", 2048);
  in.offload_gradients = GradOffload::kHost;
  Plan plan = MustPlan(in, Machine(24 * kGiB, 12 * kGiB, kTiB, true));
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
  EXPECT_THAT(plan.explanation, HasSubstr("--pipeline sync"));
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
  // Past GPT-2's 1024 positions is a plan that says so; past the planner's
  // limit an error.
  PlanInput in = Input("gpt2", 2048);
  auto beyond = ComputePlan(in, hw);
  ASSERT_TRUE(beyond.ok()) << beyond.status().ToString();
  ASSERT_TRUE(beyond->feasible);
  EXPECT_THAT(beyond->explanation, HasSubstr("longer than the model's 1024 positions"));
  in.seq_len = kMaxPlanSeqLen + 1;
  auto plan = ComputePlan(in, hw);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr(std::to_string(kMaxPlanSeqLen)));
  in = Input("gpt2", 512);
  in.offload = OffloadPlacement::kHost;
  in.nvme_ratio = 0.5;
  EXPECT_EQ(ComputePlan(in, hw).status().code(), StatusCode::kInvalidArgument);
  in.offload = OffloadPlacement::kNvme;
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

// The host's share of taking in the gradients: k micro-batches read their
// staging and read and write the fp32 sum; one micro-batch lands them where
// AdamW reads them, with the norm computed on the device: nothing.
TEST(StepTime, HostAccumulationIsZeroForOneMicroBatch) {
  EXPECT_EQ(AccumulateBytesPerParam(1, 2.0), 0.0);
  EXPECT_EQ(AccumulateBytesPerParam(2, 2.0), 20.0);
  EXPECT_EQ(AccumulateBytesPerParam(3, 4.0), 36.0);
  PlanInput in = Input("llama-7b", 2048);
  in.grad_accum = 1;
  Plan plan = MustPlan(in, Machine(80 * kGiB, 256 * kGiB, kTiB, true));
  bool found = false;
  for (const StageTime& st : plan.stages) {
    if (st.name != "host_accumulate") continue;
    found = true;
    EXPECT_EQ(st.seconds, 0.0);
    EXPECT_NE(st.note.find("on the device"), std::string::npos) << st.note;
  }
  EXPECT_TRUE(found);
}

TEST(StepTime, StagesByHandAndOverlapBound) {
  PlanInput in = Input("llama-7b", 2048);
  in.offload = OffloadPlacement::kNvme;
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
  EXPECT_DOUBLE_EQ(stage("d2h_gradients"), 4 * P * 2 / 20e9);     // bf16 gradients
  EXPECT_DOUBLE_EQ(stage("host_accumulate"), 4 * P * 10 / 40e9);  // read 2, read+write 8
  EXPECT_DOUBLE_EQ(stage("optimizer"), P / 1e9);
  EXPECT_DOUBLE_EQ(stage("nvme_io"), P * 12 / 6e9 + P * 12 / 4e9);
  EXPECT_DOUBLE_EQ(stage("h2d_weights"), P * 2 / 20e9);
  double serial = 0;
  for (const StageTime& s : plan.stages) serial += s.seconds;
  EXPECT_DOUBLE_EQ(plan.serial_step_seconds, serial);
  // docs/PLANNER.md: the update overlaps the next forward (1/4 of a
  // checkpointed micro-batch's compute); backward overlaps D2H and accumulation.
  const double c = stage("compute") / 4, xfer = stage("host_accumulate") / 4;
  const double upd_max = stage("nvme_io");
  const double update =
      upd_max + (stage("optimizer") + stage("h2d_weights")) / plan.placement.num_sub_groups;
  EXPECT_NEAR(plan.predicted_step_seconds,
              std::max(update, 0.25 * c) + std::max(0.75 * c, xfer) + 3 * std::max(c, xfer),
              1e-9 * plan.serial_step_seconds);
  EXPECT_LT(plan.predicted_step_seconds, plan.serial_step_seconds);
  for (const StageTime& s : plan.stages) EXPECT_GE(plan.predicted_step_seconds, s.seconds);
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
    if (ComputePlan(check, hw)->feasible) {
      EXPECT_GE(largest->params, ParameterCount(preset));
    }
  }
}

TEST(LargestModel, NothingFitsATinyBudget) {
  auto largest = LargestFittingModel(Input("llama-7b", 2048), Machine(1 << 20, 1 << 20, 0, true));
  ASSERT_TRUE(largest.ok());
  EXPECT_EQ(largest->params, 0);
}

// ---- issue 18: hostile dimensions and cancellation ----

TEST(Planner, ModelsBeyondTheDimensionBoundsAreRefusedNotPlanned) {
  // 2^31 x 2^31 = 2^62-element embedding: the byte counts wrapped and the
  // plan said "fits". ComputePlan validates the bounds itself.
  PlanInput in = Input("gpt2", 64);
  in.model.vocab_size = int64_t{1} << 31;
  in.model.d_model = int64_t{1} << 31;
  auto plan = ComputePlan(in, Machine(kTiB, kTiB, kTiB));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("limit of"));

  in = Input("llama-7b", 64);
  in.model.n_layers = 1000000000000000;  // 10^15: `plan` spun on this
  plan = ComputePlan(in, Machine(kTiB, kTiB, kTiB));
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("n_layers is 1000000000000000"));
}

TEST(Planner, TheLargestValidModelDoesNotWrapToFits) {
  // Every dimension at its bound: ~2^52 parameters. Nothing wraps, so a
  // machine of a few TiB is (rightly) told it does not fit.
  PlanInput in = Input("llama-7b", 4096);
  ModelConfig& m = in.model;
  m.vocab_size = kMaxModelVocab;
  m.max_seq_len = kMaxModelSeqLen;
  m.d_model = kMaxModelDModel;
  m.n_layers = kMaxModelLayers;
  m.n_heads = m.n_kv_heads = kMaxModelHeads;
  m.head_dim = kMaxModelHeadDim;
  m.d_ff = kMaxModelDff;
  in.micro_batch = kMaxPlanMicroBatch;
  in.seq_len = kMaxModelSeqLen;
  in.grad_accum = kMaxPlanGradAccum;
  in.checkpointing = false;
  Plan plan = MustPlan(in, Machine(4 * kTiB, 4 * kTiB, 64 * kTiB));
  EXPECT_FALSE(plan.feasible) << plan.explanation;
  EXPECT_GT(plan.params, int64_t{1} << 52);
  EXPECT_GT(plan.device.total_bytes(), plan.device.bytes_of("weights"));
  EXPECT_GE(plan.device.bytes_of("weights"), static_cast<uint64_t>(plan.params) * 2);
  EXPECT_GT(plan.tokens_per_step, 0);
}

TEST(Planner, SetupSizesBeyondTheirBoundsAreRefused) {
  PlanInput in = Input("tiny-gpt2", 64);
  in.micro_batch = int64_t{1} << 40;
  auto plan = ComputePlan(in, Machine(kGiB, 8 * kGiB, 0));
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("micro-batch is 1099511627776"));
  in = Input("tiny-gpt2", 64);
  in.sub_group_params = std::numeric_limits<int64_t>::max();
  EXPECT_FALSE(ComputePlan(in, Machine(kGiB, 8 * kGiB, 0)).ok());
}

class PlannerCancel : public ::testing::Test {
 protected:
  void SetUp() override { ResetCancelForTesting(); }
  void TearDown() override { ResetCancelForTesting(); }
};

TEST_F(PlannerCancel, APendingCancelMakesPlanningReturnAborted) {
  // SIGTERM to `tierflow plan` only set a flag the planner never read.
  const PlanInput in = Input("llama-7b", 2048);
  const Hardware hw = Machine(80 * kGiB, 256 * kGiB, 4 * kTiB, /*gpu=*/true);
  ASSERT_TRUE(ComputePlan(in, hw).ok());
  RequestCancel(SIGTERM);
  auto plan = ComputePlan(in, hw);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kAborted);
  EXPECT_THAT(plan.status().message(), HasSubstr("interrupted by SIGTERM while planning"));
  auto largest = LargestFittingModel(in, hw);
  ASSERT_FALSE(largest.ok());
  EXPECT_EQ(largest.status().code(), StatusCode::kAborted);
  auto deepest = DeepestFittingLayers(in, hw, kMaxModelLayers);
  ASSERT_FALSE(deepest.ok());
  EXPECT_EQ(deepest.status().code(), StatusCode::kAborted);
}

TEST_F(PlannerCancel, ACancelDuringTheSearchStopsIt) {
  // Requested from another thread while the search runs: it must end
  // Aborted, and soon (each step checks), not finish the whole search.
  const PlanInput in = Input("llama-7b", 2048);
  const Hardware hw = Machine(80 * kGiB, 256 * kGiB, 4 * kTiB, /*gpu=*/true);
  std::thread canceller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    RequestCancel(SIGTERM);
  });
  StatusOr<LargestModel> largest = InternalError("not run");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    largest = LargestFittingModel(in, hw);
  } while (largest.ok() && std::chrono::steady_clock::now() < deadline);
  canceller.join();
  ASSERT_FALSE(largest.ok());
  EXPECT_EQ(largest.status().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace tierflow
