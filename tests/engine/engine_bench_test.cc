// RunEngineBench (`tierflow bench engine`): the report's structure and how
// its summary is derived from the rounds. No timing is asserted: the
// machines are shared; only relations that hold whatever the timings are.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

#include "bench/engine_bench.h"
#include "bench/engine_bench_params.h"
#include "plan/step_time.h"
#include "tierflow/model_config.h"
#include "tierflow/sim_profile.h"

namespace tierflow {
namespace {

std::unique_ptr<Device> CpuDevice() {
  auto d = CreateDevice({.kind = DeviceChoice::kCpu, .memory_capacity_bytes = 64ull << 20});
  EXPECT_TRUE(d.ok());
  return std::move(d).value();
}

EngineBenchOptions Small() {
  EngineBenchOptions o;
  o.params = 64 << 10;
  o.units = 4;
  o.tokens = 4;
  o.steps = 1;
  o.rounds = 3;
  o.engine.sub_group_params = 8 << 10;
  return o;
}

void ExpectSummaryFollowsRounds(const EngineBenchResult& r, int rounds) {
  ASSERT_EQ(static_cast<int>(r.rounds.size()), rounds);
  double best_step = r.rounds[0].step_seconds, lo = 1e300, hi = 0;
  for (const EngineBenchRound& round : r.rounds) {
    EXPECT_EQ(round.stage_seconds.size(), r.stage_seconds.size());
    EXPECT_GT(round.step_seconds, 0);
    EXPECT_EQ(round.slowest_stage_seconds, round.stage_seconds.at(round.slowest_stage));
    for (const auto& [stage, s] : round.stage_seconds) {
      EXPECT_LE(s, round.slowest_stage_seconds) << stage;
      EXPECT_GE(s, r.stage_seconds.at(stage)) << stage << ": the summary keeps each stage's best";
    }
    best_step = std::min(best_step, round.step_seconds);
    const double ratio = round.step_seconds / round.slowest_stage_seconds;
    lo = std::min(lo, ratio);
    hi = std::max(hi, ratio);
  }
  EXPECT_EQ(r.step_seconds, best_step);
  EXPECT_EQ(r.slowest_stage_seconds, r.stage_seconds.at(r.slowest_stage));
  for (const auto& [stage, s] : r.stage_seconds) EXPECT_LE(s, r.slowest_stage_seconds) << stage;
  EXPECT_GE(r.median_round_ratio, lo);
  EXPECT_LE(r.median_round_ratio, hi);
  EXPECT_GE(r.overlap_efficiency, 0);
  EXPECT_LE(r.overlap_efficiency, 1);
}

TEST(EngineBench, HostTierReportsEveryStageAndTheBestOfTheRounds) {
  auto device = CpuDevice();
  auto r = RunEngineBench(*device, Small());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const char* stage : {"compute", "d2h", "h2d", "optimizer"}) {
    EXPECT_TRUE(r->stage_seconds.count(stage)) << stage;
  }
  // One micro-batch: the device computes the norm; the host has no pass.
  EXPECT_FALSE(r->stage_seconds.count("accumulate"));
  EXPECT_FALSE(r->stage_seconds.count("nvme"));
  EXPECT_EQ(r->params, 64u << 10);
  ExpectSummaryFollowsRounds(*r, 3);
}

// The bytes that cross PCIe per pipelined step: every weight goes up once,
// every gradient down once per micro-batch, in the transfer dtype, and (one
// micro-batch) each unit's 16 bytes of statistics.
TEST(EngineBench, ReportsBytesPerParameterEachWay) {
  auto device = CpuDevice();
  EngineBenchOptions o = Small();
  o.rounds = 1;
  o.engine.weights_dtype = DType::kBF16;
  auto bf16 = RunEngineBench(*device, o);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  const double stats = 16.0 * 64 / static_cast<double>(bf16->params);  // at most 64 units
  EXPECT_GT(bf16->d2h_bytes_per_param, 2.0);
  EXPECT_LT(bf16->d2h_bytes_per_param, 2.0 + stats);
  EXPECT_EQ(bf16->h2d_bytes_per_param, 2.0);
  o.engine.grad_transfer_dtype = DType::kF32;
  auto f32 = RunEngineBench(*device, o);
  ASSERT_TRUE(f32.ok()) << f32.status().ToString();
  EXPECT_GT(f32->d2h_bytes_per_param, 4.0);
  EXPECT_LT(f32->d2h_bytes_per_param, 4.0 + stats);
  EXPECT_EQ(f32->h2d_bytes_per_param, 2.0);
  o.engine.grad_transfer_dtype = DType::kF16;  // bf16 weights: refused, naming the flag
  auto f16 = RunEngineBench(*device, o);
  EXPECT_EQ(f16.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f16.status().message().find("--grad-transfer-dtype"), std::string::npos);
}

TEST(EngineBench, NvmeTierAddsTheNvmeStageAndMovesTheState) {
  testing_common::ScratchDir dir("tierflow-engine-bench-");
  auto device = CpuDevice();
  EngineBenchOptions o = Small();
  o.rounds = 2;
  o.engine.offload = OffloadPlacement::kNvme;
  o.engine.nvme_paths = {dir.path()};
  auto r = RunEngineBench(*device, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stage_seconds.count("nvme"));
  ExpectSummaryFollowsRounds(*r, 2);
  // One step reads and writes every sub-group's 12 B/param of state.
  EXPECT_GE(r->engine_stats.nvme_read_bytes, 12u * o.params);
  EXPECT_GE(r->engine_stats.nvme_written_bytes, 12u * o.params);
}

EngineBenchOptions TinyTransformer() {
  EngineBenchOptions o;
  o.model = "tiny-llama";
  o.micro_batch = 2;
  o.seq_len = 16;
  o.steps = 1;
  o.rounds = 2;
  o.engine.sub_group_params = 16 << 10;
  return o;
}

// A real transformer: every stage, the step's tokens, and the planner's
// prediction from the rates this run measured. On the CPU device every
// planner stage is a measured stage's rate put back through the planner's
// byte counts, so each must come back as the measured time: a planner whose
// byte or FLOP count drifts from the bench's fails here.
TEST(EngineBench, TransformerGetsThePlannersPredictionFromTheMeasuredRates) {
  auto device = CpuDevice();
  auto r = RunEngineBench(*device, TinyTransformer());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "tiny-llama");
  EXPECT_EQ(r->tokens_per_step, 32);
  EXPECT_EQ(r->params, static_cast<uint64_t>(ParameterCount(*PresetModelConfig("tiny-llama"))));
  ExpectSummaryFollowsRounds(*r, 2);
  EXPECT_GT(r->d2h_bytes_per_param, 2.0);  // and the statistics, 16 bytes a unit
  EXPECT_LT(r->d2h_bytes_per_param, 2.0 + 16.0 * 64 / static_cast<double>(r->params));
  EXPECT_EQ(r->h2d_bytes_per_param, 2.0);
  ASSERT_TRUE(r->has_prediction);
  EXPECT_GT(r->prediction.step_seconds, 0);
  const std::map<std::string, std::string> planner_to_bench = {{"compute", "compute"},
                                                               {"d2h_gradients", "d2h"},
                                                               {"h2d_weights", "h2d"},
                                                               {"optimizer", "optimizer"}};
  int matched = 0;
  for (const StageTime& st : r->prediction.stages) {
    auto it = planner_to_bench.find(st.name);
    if (it == planner_to_bench.end()) {
      // Nothing on NVMe, and one micro-batch has no host gradient pass.
      EXPECT_EQ(st.seconds, 0) << st.name;
      continue;
    }
    EXPECT_NEAR(st.seconds, r->stage_seconds.at(it->second), 1e-9 * st.seconds) << st.name;
    ++matched;
  }
  EXPECT_EQ(matched, 4);
  // Overlap can only hide stages, and the predicted step is at least the slowest.
  double sum = 0, slowest = 0;
  for (const StageTime& st : r->prediction.stages) {
    sum += st.seconds;
    slowest = std::max(slowest, st.seconds);
  }
  EXPECT_GE(r->prediction.step_seconds, slowest * (1 - 1e-12));
  EXPECT_LE(r->prediction.step_seconds, sum * (1 + 1e-12));
}

// On the simulated accelerator the compute comes from the profile, not the
// measurement: the planner's FLOPs at the profile's tensor peak x efficiency.
TEST(EngineBench, SimPredictionTakesComputeFromTheProfile) {
  DeviceOptions d;
  d.kind = DeviceChoice::kSim;
  d.sim = *FindBuiltinSimProfile("l40s");
  auto device = std::move(CreateDevice(d)).value();
  EngineBenchOptions o = TinyTransformer();
  o.rounds = 1;
  auto r = RunEngineBench(*device, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_prediction);
  const ModelConfig config = *PresetModelConfig("tiny-llama");
  const double flops = TrainingFlopsPerToken(config, o.seq_len, o.checkpointing) * 32;
  double compute = -1;
  for (const StageTime& st : r->prediction.stages) {
    if (st.name == "compute") compute = st.seconds;
  }
  EXPECT_NEAR(compute, flops / (d.sim.tensor_tflops * 1e12 * d.sim.tensor_efficiency),
              1e-9 * compute);
  EXPECT_NE(r->prediction.basis.find("sim:l40s"), std::string::npos) << r->prediction.basis;
}

// Parameter offload (--offload-param host): every other unit streams from
// pinned host memory; its uploads are a stage of their own ("h2d_params",
// measured alone through the same ring of slots), the "h2d" stage uploads
// only the resident units' updates, and the step reports the bytes.
EngineBenchOptions StreamedFromHost(EngineBenchOptions o) {
  o.engine.params.where = ParamOffload::kHost;
  o.engine.params.device_slots = 3;
  o.engine.params.prefetch_depth = 2;
  return o;
}

TEST(EngineBench, HostParamOffloadMeasuresTheStreamedUploadsAsAStage) {
  auto device = CpuDevice();
  EngineBenchOptions o = StreamedFromHost(Small());
  o.rounds = 2;
  auto r = RunEngineBench(*device, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const char* stage : {"compute", "d2h", "h2d", "h2d_params", "optimizer"}) {
    EXPECT_TRUE(r->stage_seconds.count(stage)) << stage;
  }
  ExpectSummaryFollowsRounds(*r, 2);
  EXPECT_EQ(r->param_streaming.streamed_units, (std::vector<int>{1, 3}));  // every other unit
  EXPECT_EQ(r->streamed_params, r->params / 2);
  // Each streamed unit goes up at least once a step (bf16), at most once per
  // fetch (forward and backward), and the stage alone makes the step's fetches.
  const uint64_t unit_bytes = 2 * (r->params / 4);
  EXPECT_GE(r->param_h2d_bytes, 2 * unit_bytes);
  EXPECT_LE(r->param_h2d_bytes, 4 * unit_bytes);
  EXPECT_EQ(r->param_h2d_bytes, r->engine_stats.param_h2d_bytes);
  EXPECT_EQ(r->param_stage_h2d_bytes, r->param_h2d_bytes);
  EXPECT_EQ(r->param_nvme_read_bytes, 0u);
  // H2D: the resident half's updates (2 B/param of half) and the uploads.
  const double params = static_cast<double>(r->params);
  EXPECT_DOUBLE_EQ(r->h2d_bytes_per_param, 1.0 + static_cast<double>(r->param_h2d_bytes) / params);
}

TEST(EngineBench, NvmeParamOffloadReadsTheStreamedWeightsFromTheDrive) {
  testing_common::ScratchDir dir("tierflow-engine-bench-params-");
  auto device = CpuDevice();
  EngineBenchOptions o = StreamedFromHost(Small());
  o.rounds = 1;
  o.engine.params.where = ParamOffload::kNvme;
  o.engine.params.streamed_units = {0, 2, 3};
  o.engine.nvme_paths = {dir.path()};
  auto r = RunEngineBench(*device, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stage_seconds.count("h2d_params"));
  EXPECT_FALSE(r->stage_seconds.count("nvme"));  // the optimizer state stays on host
  EXPECT_EQ(r->param_streaming.streamed_units, (std::vector<int>{0, 2, 3}));
  EXPECT_GT(r->param_h2d_bytes, 0u);
  EXPECT_EQ(r->param_nvme_read_bytes, r->param_h2d_bytes);
  EXPECT_EQ(r->param_stage_nvme_read_bytes, r->param_stage_h2d_bytes);
}

// A transformer streams every other block (tiny-llama's blocks are units
// 1-4: units 2 and 4), and the planner predicts with parameter offload too.
TEST(EngineBench, TransformerStreamsEveryOtherBlock) {
  auto device = CpuDevice();
  EngineBenchOptions o = StreamedFromHost(TinyTransformer());
  o.rounds = 1;
  auto r = RunEngineBench(*device, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->param_streaming.streamed_units, (std::vector<int>{2, 4}));
  EXPECT_TRUE(r->stage_seconds.count("h2d_params"));
  EXPECT_GT(r->param_h2d_bytes, 0u);
  ASSERT_TRUE(r->has_prediction);
  double h2d_params = -1;
  for (const StageTime& st : r->prediction.stages) {
    if (st.name == "h2d_params") h2d_params = st.seconds;
  }
  EXPECT_GT(h2d_params, 0);
  EXPECT_NE(r->prediction.basis.find("planner streams"), std::string::npos) << r->prediction.basis;
}

void ExpectRefusedNaming(const EngineBenchOptions& o, const std::string& flag) {
  auto device = CpuDevice();
  auto r = RunEngineBench(*device, o);
  ASSERT_FALSE(r.ok()) << flag << " was accepted";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(flag), std::string::npos) << r.status().ToString();
}

TEST(EngineBench, BadParamOffloadValuesAreRefusedNamingTheFlag) {
  EngineBenchOptions o = StreamedFromHost(Small());
  o.engine.params.where = ParamOffload::kAuto;
  ExpectRefusedNaming(o, "--offload-param");
  o = StreamedFromHost(Small());
  o.engine.params.device_slots = 1;
  o.engine.params.prefetch_depth = 1;
  ExpectRefusedNaming(o, "--param-slots");
  o = StreamedFromHost(Small());
  o.engine.params.prefetch_depth = 3;
  ExpectRefusedNaming(o, "--param-slots");
  o = StreamedFromHost(Small());
  o.engine.params.streamed_units = {1, 4};  // the model has units 0-3
  ExpectRefusedNaming(o, "--streamed-units");
  o.engine.params.streamed_units = {1, 1};
  ExpectRefusedNaming(o, "--streamed-units");
  o = Small();
  o.engine.params.streamed_units = {1};  // with none
  ExpectRefusedNaming(o, "--streamed-units");
  o = StreamedFromHost(Small());
  o.engine.params.where = ParamOffload::kNvme;  // no directory
  ExpectRefusedNaming(o, "--nvme-path");
}

TEST(EngineBench, UnitListsParseAsIndicesAndRanges) {
  auto ok = ParseUnitList("--streamed-units", "1, 4-6,9");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, (std::vector<int>{1, 4, 5, 6, 9}));
  for (const char* bad : {"", "1,", "x", "1,-2", "3-1", "1.5", "2-"}) {
    auto r = ParseUnitList("--streamed-units", bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "' was accepted";
    EXPECT_NE(r.status().message().find("--streamed-units"), std::string::npos)
        << r.status().ToString();
  }
  EXPECT_EQ(ParseParamOffload("--offload-param", "sideways").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(EngineBench, AnUnknownModelIsNamed) {
  auto device = CpuDevice();
  EngineBenchOptions o = TinyTransformer();
  o.model = "no-such-model";
  auto r = RunEngineBench(*device, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no-such-model"), std::string::npos) << r.status().ToString();
  o = TinyTransformer();
  o.seq_len = 1 << 20;  // beyond the model's positions
  EXPECT_EQ(RunEngineBench(*device, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineBench, BadSizesAreInvalidArguments) {
  auto device = CpuDevice();
  EngineBenchOptions o = Small();
  o.rounds = 0;
  EXPECT_EQ(RunEngineBench(*device, o).status().code(), StatusCode::kInvalidArgument);
  o = Small();
  o.params = 3;
  EXPECT_EQ(RunEngineBench(*device, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow
