// ComputePlan with several data-parallel ranks (--gpus-per-node, --nodes):
// host memory and NVMe counted once per node (the sum of its ranks'), each
// rank's state its part of the model, the collectives' time from the bus
// bandwidth, and the scaling advice naming what binds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "plan/hardware_profile.h"
#include "plan/plan_json.h"
#include "plan/planner.h"
#include "plan/step_time.h"
#include "tests/plan/plan_test_util.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

Hardware Gpus(uint64_t device, uint64_t host, uint64_t nvme, int cores = 32) {
  return plan_test::Gpu(device, host, nvme, cores);
}

PlanInput Input(const std::string& preset, int64_t seq_len, int gpus_per_node, int nodes = 1) {
  PlanInput in;
  in.model = *PresetModelConfig(preset);
  in.seq_len = seq_len;
  in.gpus_per_node = gpus_per_node;
  in.nodes = nodes;
  return in;
}

using plan_test::MustPlan;

// The case: Llama-3-8B on 4 GPUs of 24 GiB with 128 GiB of host
// memory and 1 TiB of NVMe fits; the node's memory holds all 4 ranks.
TEST(PlannerDataParallel, EightBOnFourGpusFitsWithHostMemoryCountedOncePerNode) {
  const PlanInput in = Input("llama-8b", 2048, 4);
  const Plan plan = MustPlan(in, Gpus(24 * kGiB, 128 * kGiB, kTiB));
  EXPECT_TRUE(plan.feasible) << plan.explanation;
  EXPECT_EQ(plan.tokens_per_step, 4 * 2048);
  EXPECT_EQ(plan.data_parallel.ranks, 4);
  // Each rank owns about a quarter of the state, never less.
  EXPECT_GE(plan.data_parallel.rank_params * 4, plan.params);
  EXPECT_LT(plan.data_parallel.rank_params * 4, plan.params + 4 * 34 * 16384);
  // Each rank lands the whole gradient (bf16): four of them on the node.
  EXPECT_EQ(plan.host.bytes_of("gradient_accumulator"), 4 * 2 * static_cast<uint64_t>(plan.params));
  EXPECT_EQ(plan.host.bytes_of("summed_gradient_part"),
            4 * 4 * static_cast<uint64_t>(plan.data_parallel.rank_params));
  EXPECT_EQ(plan.host.bytes_of("process_overhead"), 4 * kHostProcessOverheadBytes);
  // The device is one GPU's: the whole model's weights.
  EXPECT_EQ(plan.device.bytes_of("weights"), 2 * static_cast<uint64_t>(plan.params));
}

TEST(PlannerDataParallel, AHostTooSmallForFourRanksSaysWhatBinds) {
  const Plan plan = MustPlan(Input("llama-8b", 2048, 4), Gpus(24 * kGiB, 32 * kGiB, kTiB));
  EXPECT_FALSE(plan.feasible);
  EXPECT_EQ(plan.binding_constraint, "host");
  EXPECT_THAT(plan.explanation, HasSubstr("4 ranks each land the whole gradient"));
  EXPECT_THAT(plan.explanation, HasSubstr("--gpus-per-node"));
  ASSERT_FALSE(plan.data_parallel.scaling.empty());
  EXPECT_FALSE(plan.data_parallel.scaling.back().feasible);
  EXPECT_THAT(plan.data_parallel.scaling_advice, HasSubstr("does not fit (host binds"));
}

// Summed on the devices (NCCL), nothing lands whole on the host: each rank
// holds only its fp32 part of the sum (pinned), the device holds that part
// too (a bucket's, with one micro-batch) and NCCL's scratch; only the part
// crosses PCIe, and only the part of the weights goes up. Where the host
// path's landed gradients bind, this fits.
TEST(PlannerDataParallel, DeviceCollectivesLandOnlyEachRanksPart) {
  const Hardware hw = Gpus(24 * kGiB, 64 * kGiB, kTiB);
  PlanInput in = Input("llama-8b", 2048, 4);
  in.offload_gradients = GradOffload::kHost;  // the host path's whole landing (not spilled)
  const Plan host = MustPlan(in, hw);
  in.device_collectives = true;
  const Plan device = MustPlan(in, hw);
  EXPECT_FALSE(host.feasible);
  EXPECT_TRUE(device.feasible) << device.explanation;
  const uint64_t part = 4 * static_cast<uint64_t>(device.data_parallel.rank_params);
  EXPECT_EQ(device.host.bytes_of("gradient_accumulator"), 0u);
  EXPECT_EQ(device.host.bytes_of("pinned_gradient_staging"), 0u);
  EXPECT_EQ(device.host.bytes_of("summed_gradient_part"), 4 * part);  // the node's 4 ranks
  // One micro-batch: the host path lands it whole, bf16, on each rank.
  EXPECT_EQ(host.host.bytes_of("gradient_accumulator"), 4 * 2 * static_cast<uint64_t>(host.params));
  EXPECT_EQ(host.device.bytes_of("summed_gradient"), 0u);
  // The device holds one bucket's part at a time, and NCCL its scratch.
  EXPECT_LT(device.device.bytes_of("summed_gradient"), part);
  EXPECT_GT(device.device.bytes_of("summed_gradient"), 0u);
  EXPECT_GT(device.device.bytes_of("collective_scratch"), 0u);
  // The part crosses, fp32, against the whole gradient in bf16.
  EXPECT_NEAR(plan_test::Stage(device, "d2h_gradients") * 2 * host.params,
              plan_test::Stage(host, "d2h_gradients") * part, 1e-6 * part);
  EXPECT_LT(plan_test::Stage(device, "h2d_weights"), plan_test::Stage(host, "h2d_weights") / 3);
  EXPECT_THAT(host.explanation, HasSubstr("--collectives device"));
  EXPECT_THAT(device.data_parallel.interconnect, HasSubstr("device collectives (NCCL)"));
  EXPECT_EQ(PlanToJson(in, hw, device, nullptr)["data_parallel"]["collectives"], "device");
  PlanInput on_host = in;
  on_host.device_collectives = false;
  EXPECT_EQ(PlanToJson(on_host, hw, host, nullptr)["data_parallel"]["collectives"], "host");
  // Two micro-batches per rank: the running sum is the rank's part, on its device.
  in.grad_accum = 2;
  EXPECT_EQ(MustPlan(in, hw).device.bytes_of("summed_gradient"), part);
}

// The same ranks, one per node or all on one node: the node with four holds
// four times what a node with one does (a synchronous pipeline, so no
// speculation budget shares what is free).
TEST(PlannerDataParallel, ANodesTiersAreItsRanksSummed) {
  PlanInput spread = Input("llama-1b", 1024, 1, 4);
  spread.pipeline = PipelineKind::kSynchronous;
  spread.offload = OffloadPlacement::kHost;
  PlanInput packed = spread;
  packed.gpus_per_node = 4;
  packed.nodes = 1;
  const Hardware hw = Gpus(24 * kGiB, 256 * kGiB, kTiB);
  const Plan one = MustPlan(spread, hw);
  const Plan four = MustPlan(packed, hw);
  ASSERT_TRUE(one.feasible && four.feasible);
  EXPECT_EQ(one.data_parallel.rank_params, four.data_parallel.rank_params);
  EXPECT_EQ(four.host.total_bytes(), 4 * one.host.total_bytes());
  EXPECT_EQ(four.pinned_bytes, 4 * one.pinned_bytes);
  EXPECT_EQ(four.device.total_bytes(), one.device.total_bytes());
  // Packed, the node's optimizer updates four parts; spread, one.
  auto stage = [](const Plan& p, const std::string& name) {
    for (const StageTime& s : p.stages) {
      if (s.name == name) return s.seconds;
    }
    ADD_FAILURE() << "no stage " << name;
    return 0.0;
  };
  EXPECT_NEAR(stage(four, "optimizer"), 4 * stage(one, "optimizer"), 1e-9);
}

// The collectives: S (W - 1) / W bytes at the bus bandwidth, the reduce-
// scatter once per micro-batch in the transfer dtype, the all-gather once
// in the weights' dtype; across nodes the slower of the two bandwidths.
TEST(PlannerDataParallel, CollectivesTakeTheBusBandwidth) {
  PlanInput in = Input("llama-1b", 1024, 2, 2);
  in.grad_accum = 3;
  Hardware hw = Gpus(80 * kGiB, 512 * kGiB, kTiB);
  hw.bandwidths.intra_node_busbw_gb_per_second = 20;
  hw.bandwidths.inter_node_busbw_gb_per_second = 5;
  const Plan plan = MustPlan(in, hw);
  const double P = static_cast<double>(plan.params);
  EXPECT_NEAR(plan.data_parallel.reduce_scatter_seconds, 3 * P * 2 * 0.75 / 5e9, 1e-9);
  EXPECT_NEAR(plan.data_parallel.all_gather_seconds, P * 2 * 0.75 / 5e9, 1e-9);
  in.nodes = 1;
  in.gpus_per_node = 4;
  const Plan one_node = MustPlan(in, hw);
  EXPECT_NEAR(one_node.data_parallel.reduce_scatter_seconds, 3 * P * 2 * 0.75 / 20e9, 1e-9);
  EXPECT_THAT(one_node.data_parallel.interconnect, HasSubstr("shared memory"));
}

// Compute-bound: more GPUs per node help. Bound by the node's CPU
// optimizer (few cores, a large model, a short step): they stop helping,
// and the advice names host memory bandwidth.
TEST(PlannerDataParallel, ScalingAdviceNamesWhatBinds) {
  PlanInput compute = Input("llama-1b", 2048, 8);
  compute.micro_batch = 8;
  compute.grad_accum = 8;
  const Plan helps = MustPlan(compute, Gpus(80 * kGiB, 1024 * kGiB, 4 * kTiB, 64));
  ASSERT_EQ(helps.data_parallel.scaling.size(), 4u);  // 1, 2, 4, 8
  EXPECT_EQ(helps.data_parallel.scaling.back().gpus_per_node, 8);
  EXPECT_THAT(helps.data_parallel.scaling_advice, HasSubstr("adding GPUs helps"));

  PlanInput bound = Input("llama-8b", 512, 8);
  bound.offload = OffloadPlacement::kHost;
  Hardware few_cores = Gpus(80 * kGiB, 2048 * kGiB, 4 * kTiB, 2);
  few_cores.bandwidths.intra_node_busbw_gb_per_second = 1000;  // not the collectives
  const Plan stops = MustPlan(bound, few_cores);
  EXPECT_THAT(stops.data_parallel.scaling_advice, HasSubstr("stops helping"));
  EXPECT_THAT(stops.data_parallel.scaling_advice, HasSubstr("host memory bandwidth"));
  EXPECT_EQ(stops.data_parallel.scaling.back().slowest, "optimizer");

  // PCIe shared by all GPUs of the node binds instead when the host is fast.
  PlanInput shared = Input("llama-8b", 512, 8);
  shared.gpus_per_pcie_link = 8;
  Hardware fast_host = Gpus(80 * kGiB, 2048 * kGiB, 4 * kTiB, 256);
  fast_host.bandwidths.intra_node_busbw_gb_per_second = 1000;
  fast_host.bandwidths.adam_params_per_second = 1e12;
  const Plan pcie = MustPlan(shared, fast_host);
  EXPECT_THAT(pcie.data_parallel.scaling_advice, HasSubstr("PCIe"));
}

// One GPU per node has nothing to compare; a scaling point past the
// planner's accumulation bound is left out, not an error of the plan.
TEST(PlannerDataParallel, ScalingTableOnlyWhereItMeansSomething) {
  const Hardware hw = Gpus(80 * kGiB, 512 * kGiB, kTiB);
  const Plan spread = MustPlan(Input("llama-1b", 1024, 1, 4), hw);
  EXPECT_TRUE(spread.data_parallel.scaling.empty());
  EXPECT_TRUE(spread.data_parallel.scaling_advice.empty());
  PlanInput deep = Input("tiny-llama", 64, 4);
  deep.grad_accum = kMaxPlanGradAccum / 2;
  const Plan plan = MustPlan(deep, hw);
  ASSERT_EQ(plan.data_parallel.scaling.size(), 2u);  // 1 GPU would exceed it
  EXPECT_EQ(plan.data_parallel.scaling[0].gpus_per_node, 2);
}

TEST(PlannerDataParallel, RefusesWhatIsMeaningless) {
  const Hardware hw = Gpus(80 * kGiB, 512 * kGiB, kTiB);
  PlanInput in = Input("llama-1b", 1024, 2);
  in.gpus_per_pcie_link = 3;
  auto link = ComputePlan(in, hw);
  ASSERT_FALSE(link.ok());
  EXPECT_THAT(link.status().message(), HasSubstr("--gpus-per-pcie-link"));
  in = Input("llama-1b", 1024, 0);
  EXPECT_FALSE(ComputePlan(in, hw).ok());
  in = Input("llama-1b", 1024, 1, kMaxPlanNodes + 1);
  EXPECT_FALSE(ComputePlan(in, hw).ok());
}

// Parameter offload across ranks: each rank streams the units one GPU
// would, from a whole copy of its own, so the node holds (or its drives
// read and write) one copy per rank; auto streams where the device needs it.
TEST(PlannerDataParallel, StreamedWeightsAreOneGpusChoiceWithACopyPerRank) {
  const Hardware hw = Gpus(12 * kGiB, 512 * kGiB, kTiB);
  PlanInput one = Input("llama-8b", 2048, 1);
  one.param_offload = ParamOffload::kAuto;
  PlanInput two = one;
  two.gpus_per_node = 2;
  const Plan p1 = MustPlan(one, hw), p2 = MustPlan(two, hw);
  EXPECT_TRUE(p2.feasible) << p2.explanation;
  ASSERT_NE(p2.placement.params.where, ParamOffload::kNone);
  EXPECT_EQ(p2.placement.params.streamed_units, p1.placement.params.streamed_units);
  EXPECT_LE(p2.device.total_bytes(), 12 * kGiB);
  const std::string tier = p2.placement.params.where == ParamOffload::kHost ? "host" : "nvme";
  const TierPlan& t1 = tier == "host" ? p1.host : p1.nvme;
  const TierPlan& t2 = tier == "host" ? p2.host : p2.nvme;
  EXPECT_GT(t1.bytes_of("streamed_weights"), 0u);
  EXPECT_EQ(t2.bytes_of("streamed_weights"), 2 * t1.bytes_of("streamed_weights"));
  // On NVMe the node's drives serve both ranks' fetches and write-backs.
  one.param_offload = two.param_offload = ParamOffload::kNvme;
  const Plan n1 = MustPlan(one, hw), n2 = MustPlan(two, hw);
  ASSERT_EQ(n2.placement.params.where, ParamOffload::kNvme);
  EXPECT_EQ(n2.placement.params.streamed_units, n1.placement.params.streamed_units);
  EXPECT_NEAR(plan_test::Stage(n2, "nvme_params"), 2 * plan_test::Stage(n1, "nvme_params"),
              1e-9 * plan_test::Stage(n1, "nvme_params"));
}

}  // namespace
}  // namespace tierflow
