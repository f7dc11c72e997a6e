// The planner against the engine it describes: a tiny GPT-2 and Llama train
// a step on the emulated CPU device through the OffloadEngine, and the
// measured peaks per tier (device accounting, pinned allocations, host
// state, NVMe swap files) must be within 10% of the plan's components.
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <unistd.h>
#include "tests/common/require.h"

#include "engine/offload_engine.h"
#include "model/transformer.h"
#include "plan/bandwidth_profile.h"
#include "plan/planner.h"
#include "tierflow/device.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;

constexpr int kBatch = 2;
constexpr int kSeqLen = 32;
constexpr int64_t kSubGroup = 64 << 10;

void ExpectWithin10Percent(uint64_t measured, uint64_t planned, const std::string& what) {
  const double m = static_cast<double>(measured), p = static_cast<double>(planned);
  std::printf("  %-16s measured %12llu B, planned %12llu B, ratio %.3f\n", what.c_str(),
              static_cast<unsigned long long>(measured), static_cast<unsigned long long>(planned),
              p > 0 ? m / p : 0.0);
  EXPECT_NEAR(m, p, 0.10 * p) << what << ": measured " << measured << " B, planned " << planned
                              << " B";
}

uint64_t BytesUnder(const fs::path& dir) {
  uint64_t sum = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) sum += e.file_size();
  }
  return sum;
}

struct Case {
  std::string preset;
  OffloadPlacement offload;  // kHost or kNvme
  int grad_accum = 1;        // micro-batches per step: 1 lands them, more accumulate
};

class PlanVsEngine : public ::testing::TestWithParam<Case> {};

TEST_P(PlanVsEngine, MeasuredPeaksWithinTenPercentOfThePlan) {
  const Case& c = GetParam();
  ModelConfig config = *PresetModelConfig(c.preset);

  PlanInput in;
  in.model = config;
  in.micro_batch = kBatch;
  in.seq_len = kSeqLen;
  in.dtype = DType::kBF16;
  in.checkpointing = true;
  in.offload = c.offload;
  in.grad_accum = c.grad_accum;
  in.sub_group_params = kSubGroup;
  Hardware hw;
  hw.device_memory_bytes = 1ull << 30;
  hw.host_memory_bytes = 64ull << 30;
  hw.nvme_capacity_bytes = 1ull << 40;
  hw.cores = 2;
  hw.bandwidths = DefaultBandwidths(false, 2);
  auto plan_or = ComputePlan(in, hw);
  ASSERT_TRUE(plan_or.ok()) << plan_or.status().ToString();
  const Plan& plan = *plan_or;

  DeviceOptions dopt;
  dopt.kind = DeviceChoice::kCpu;
  dopt.memory_capacity_bytes = hw.device_memory_bytes;
  auto device_or = CreateDevice(dopt);
  ASSERT_TRUE(device_or.ok()) << device_or.status().ToString();
  Device& device = **device_or;

  TrainShape shape;
  shape.batch = kBatch;
  shape.seq_len = kSeqLen;
  shape.checkpoint_activations = true;
  shape.dtype = DType::kBF16;
  auto model_or = TransformerModel::Create(device, config, shape);
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();

  const fs::path dir =
      fs::temp_directory_path() / ("tierflow_plan_vs_engine_" + std::to_string(::getpid()) + "_" +
                                   c.preset + "_" + std::string(OffloadPlacementName(c.offload)));
  fs::remove_all(dir);
  fs::create_directories(dir);
  EngineOptions options;
  options.weights_dtype = DType::kBF16;
  options.sub_group_params = static_cast<uint64_t>(kSubGroup);
  options.offload = plan.placement.offload();
  options.nvme_ratio = plan.placement.nvme_ratio;
  options.nvme_paths = {dir.string()};
  options.buffer_count = plan.placement.buffer_count;
  options.grad_buckets = plan.placement.grad_buckets;
  options.speculation_params = static_cast<uint64_t>(plan.placement.speculation_params);
  options.grad_transfer_dtype = plan.grad_transfer_dtype;
  options.micro_batches_per_step = c.grad_accum;
  auto engine_or = OffloadEngine::Create(device, **model_or, options);
  if (!engine_or.ok() && engine_or.status().code() == StatusCode::kUnavailable) {
    fs::remove_all(dir);
    TIERFLOW_SKIP_WITHOUT("nvme") << "NVMe tier unavailable here: "
                                  << engine_or.status().ToString();
  }
  ASSERT_TRUE(engine_or.ok()) << engine_or.status().ToString();
  OffloadEngine& engine = **engine_or;
  const uint64_t swap_bytes = BytesUnder(dir);

  std::mt19937 rng(5);
  std::uniform_int_distribution<int> token(0, static_cast<int>(config.vocab_size) - 1);
  std::vector<int32_t> inputs(kBatch * kSeqLen), targets(kBatch * kSeqLen);
  StatusOr<StepStats> stats = Status(StatusCode::kInternal, "no step ran");
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i] = token(rng);
      targets[i] = token(rng);
    }
    MicroBatch mb;
    mb.inputs = inputs.data();
    mb.targets = targets.data();
    mb.batch = kBatch;
    mb.seq_len = kSeqLen;
    stats = engine.Step(std::vector<MicroBatch>(static_cast<size_t>(c.grad_accum), mb));
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  }
  stats = engine.Finish();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();

  ExpectWithin10Percent(stats->device_peak_bytes, plan.device.total_bytes(), "device");
  ExpectWithin10Percent(stats->pinned_peak_bytes, plan.pinned_bytes, "pinned host");
  if (c.offload == OffloadPlacement::kHost) {
    ExpectWithin10Percent(
        stats->host_state_bytes,
        plan.host.bytes_of("master_weights") + plan.host.bytes_of("optimizer_moments"),
        "host state");
  } else {
    EXPECT_EQ(stats->host_state_bytes, 0u);
    ExpectWithin10Percent(swap_bytes, plan.nvme.total_bytes(), "NVMe swap files");
  }
  engine_or = Status(StatusCode::kAborted, "closed");  // closes the swap set before cleanup
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, PlanVsEngine,
                         ::testing::Values(Case{"tiny-gpt2", OffloadPlacement::kHost},
                                           Case{"tiny-llama", OffloadPlacement::kHost},
                                           Case{"tiny-gpt2", OffloadPlacement::kNvme},
                                           Case{"tiny-llama", OffloadPlacement::kNvme},
                                           Case{"tiny-llama", OffloadPlacement::kHost, 2}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name =
                               info.param.preset + "_" +
                               std::string(OffloadPlacementName(info.param.offload)) +
                               (info.param.grad_accum > 1 ? "_accumulating" : "");
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace tierflow
