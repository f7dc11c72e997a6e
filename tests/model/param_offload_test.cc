// Parameter offload (ZeRO-Infinity) on the CPU device: a transformer whose
// weights do not fit the device memory trains with some units' weights
// streamed from host or NVMe through a ring of device slots, and every
// per-step loss, the final weights and the optimizer state are bit for bit
// those of the all-resident run, across micro-batches, clipping (and its
// rollback), and a resume from the engine's state in the middle.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/offload_engine.h"
#include "model/transformer.h"
#include "tests/common/scratch_dir.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

using testing_util::RandomTokens;
using testing_util::TokenBatch;

// Four blocks, so that streamed blocks alternate with resident ones.
ModelConfig FourBlockLlama(bool tied) {
  ModelDimensions d{ModelFamily::kLlama, 23, 8, 16, 4, 4, 2, 24};
  ModelConfig c = MakeModelConfig(d).value();
  c.name = tied ? "test-llama4-tied" : "test-llama4";
  c.tie_embeddings = tied;
  return c;
}

constexpr int kBatch = 2, kSeq = 8;

struct OffloadSetup {
  std::string name;
  ModelConfig config;
  ParamOffload where;
  std::vector<int> streamed;
  int slots;
  bool state_on_nvme;
};

std::ostream& operator<<(std::ostream& os, const OffloadSetup& s) { return os << s.name; }

struct Trace {
  std::vector<float> losses;
  std::vector<float> weights;             // the working weights, fp32
  std::vector<std::vector<float>> state;  // per sub-group: master, m, v
  uint64_t param_h2d_bytes = 0;
  uint64_t device_peak = 0;
};

EngineOptions BaseOptions() {
  EngineOptions o;
  o.weights_dtype = DType::kBF16;
  o.adam.lr = 3e-3f;
  o.clip_grad_norm = 0.5f;   // tight: some steps clip, so speculation rolls back
  o.sub_group_params = 256;  // several sub-groups per unit
  o.speculation_params = 1 << 20;
  return o;
}

std::vector<std::vector<TokenBatch>> Batches(int steps, int micro) {
  std::vector<std::vector<TokenBatch>> out(steps);
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < micro; ++k) {
      out[s].push_back(RandomTokens(kBatch, kSeq, 23, static_cast<uint32_t>(100 + s * 7 + k)));
    }
  }
  return out;
}

Status RunSteps(OffloadEngine& engine, const std::vector<std::vector<TokenBatch>>& batches,
                int from, int to, Trace& trace) {
  for (int s = from; s < to; ++s) {
    std::vector<MicroBatch> micro;
    for (const TokenBatch& tb : batches[s]) micro.push_back(tb.micro());
    TF_ASSIGN_OR_RETURN(StepStats stats, engine.Step(micro));
    trace.losses.push_back(stats.loss);
    trace.param_h2d_bytes += stats.param_h2d_bytes;
  }
  TF_RETURN_IF_ERROR(engine.Finish().status());
  return Status::Ok();
}

Status ReadBack(OffloadEngine& engine, Trace& trace) {
  trace.weights.assign(engine.layout().total_params, 0.0f);
  TF_RETURN_IF_ERROR(engine.ReadDeviceWeights(trace.weights.data()));
  trace.state.clear();
  for (size_t g = 0; g < engine.layout().groups.size(); ++g) {
    const uint64_t n = engine.layout().groups[g].num_params;
    std::vector<float> s(3 * n);
    TF_RETURN_IF_ERROR(
        engine.ReadState(static_cast<int>(g), s.data(), s.data() + n, s.data() + 2 * n));
    trace.state.push_back(std::move(s));
  }
  return Status::Ok();
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

class ParamOffloadTest : public ::testing::TestWithParam<OffloadSetup> {
 protected:
  EngineOptions OptionsFor(const OffloadSetup& s, bool streamed) {
    EngineOptions o = BaseOptions();
    o.micro_batches_per_step = 2;
    if (s.state_on_nvme) {
      o.offload = OffloadPlacement::kNvme;
      o.nvme_ratio = 0.5;
      o.nvme_paths = {dir_.path()};
    }
    if (streamed) {
      o.params.where = s.where;
      o.params.streamed_units = s.streamed;
      o.params.device_slots = s.slots;
      o.params.prefetch_depth = s.slots - 1;
      if (s.where == ParamOffload::kNvme) o.nvme_paths = {dir_.path()};
    }
    return o;
  }
  // Trains `steps` steps from scratch; with `resume_at` > 0, stops there,
  // builds a new engine from the first one's state (as a resume does) and
  // goes on.
  Trace Train(const OffloadSetup& s, bool streamed, uint64_t device_bytes, int steps,
              int resume_at) {
    Trace trace;
    auto device = testing_util::MakeCpuDevice(device_bytes);
    auto model = TransformerModel::Create(*device, s.config, {kBatch, kSeq, true, DType::kBF16});
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return trace;
    const EngineOptions options = OptionsFor(s, streamed);
    auto engine = OffloadEngine::Create(*device, **model, options);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return trace;
    const auto batches = Batches(steps, 2);
    const int first = resume_at > 0 ? resume_at : steps;
    Status st = RunSteps(**engine, batches, 0, first, trace);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (resume_at > 0) {
      Trace mid;
      EXPECT_TRUE(ReadBack(**engine, mid).ok());
      const int64_t step = (*engine)->optimizer_step();
      const LossScaler::State scaler = (*engine)->loss_scaler_state();
      engine->reset();
      auto resumed = OffloadEngine::Create(*device, **model, options);
      EXPECT_TRUE(resumed.ok()) << resumed.status().ToString();
      if (!resumed.ok()) return trace;
      for (size_t g = 0; g < mid.state.size(); ++g) {
        const uint64_t n = mid.state[g].size() / 3;
        const float* p = mid.state[g].data();
        EXPECT_TRUE((*resumed)->WriteState(static_cast<int>(g), p, p + n, p + 2 * n).ok());
      }
      EXPECT_TRUE((*resumed)->UploadAllWeights().ok());
      (*resumed)->RestoreCounters(step, scaler);
      st = RunSteps(**resumed, batches, resume_at, steps, trace);
      EXPECT_TRUE(st.ok()) << st.ToString();
      EXPECT_TRUE(ReadBack(**resumed, trace).ok());
      *engine = std::move(*resumed);
    } else {
      EXPECT_TRUE(ReadBack(**engine, trace).ok());
    }
    trace.device_peak = device->DeviceMemory().peak_bytes;
    return trace;
  }

  testing_common::ScratchDir dir_{"tierflow-param-offload-"};
};

TEST_P(ParamOffloadTest, StreamedRunIsBitIdenticalToTheResidentOne) {
  const OffloadSetup& s = GetParam();
  constexpr int kSteps = 5;
  const Trace resident = Train(s, false, 512ull << 20, kSteps, 0);
  const Trace measure = Train(s, true, 512ull << 20, kSteps, 0);
  ASSERT_LT(measure.device_peak, resident.device_peak)
      << "streaming must take device memory off the weights";
  // The streamed run within exactly its own peak: the all-resident engine
  // does not fit there, the streamed one trains.
  {
    auto device = testing_util::MakeCpuDevice(measure.device_peak);
    auto model = TransformerModel::Create(*device, s.config, {kBatch, kSeq, true, DType::kBF16});
    ASSERT_TRUE(model.ok());
    auto engine = OffloadEngine::Create(*device, **model, OptionsFor(s, false));
    EXPECT_EQ(StatusCode::kOutOfMemory, engine.status().code())
        << "the resident weights should not fit " << measure.device_peak
        << " bytes: " << engine.status().ToString();
  }
  const Trace streamed = Train(s, true, measure.device_peak, kSteps, 0);
  ASSERT_EQ(resident.losses.size(), static_cast<size_t>(kSteps));
  ExpectSameBits(resident.losses, streamed.losses, "losses");
  ExpectSameBits(resident.weights, streamed.weights, "working weights");
  ASSERT_EQ(resident.state.size(), streamed.state.size());
  for (size_t g = 0; g < resident.state.size(); ++g) {
    ExpectSameBits(resident.state[g], streamed.state[g], "optimizer state");
  }
  // Every streamed fetch uploads its unit: per micro-batch, each take in
  // the schedule (a block twice), unless the unit is still in a slot.
  EXPECT_GT(streamed.param_h2d_bytes, 0u);
  EXPECT_EQ(resident.param_h2d_bytes, 0u);
}

TEST_P(ParamOffloadTest, ResumeInTheMiddleIsBitIdenticalToTheResidentRun) {
  const OffloadSetup& s = GetParam();
  constexpr int kSteps = 6;
  const Trace resident = Train(s, false, 512ull << 20, kSteps, 0);
  const Trace resumed = Train(s, true, 512ull << 20, kSteps, 3);
  ExpectSameBits(resident.losses, resumed.losses, "losses");
  ExpectSameBits(resident.weights, resumed.weights, "working weights");
  for (size_t g = 0; g < resident.state.size(); ++g) {
    ExpectSameBits(resident.state[g], resumed.state[g], "optimizer state");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Setups, ParamOffloadTest,
    ::testing::Values(
        // Every block from host through 2 slots (each a block's size).
        OffloadSetup{
            "HostBlocks", FourBlockLlama(false), ParamOffload::kHost, {1, 2, 3, 4}, 2, false},
        // Every block and the head from host, 3 slots.
        OffloadSetup{"HostBlocksAndHead",
                     FourBlockLlama(false),
                     ParamOffload::kHost,
                     {1, 2, 3, 4, 5},
                     3,
                     false},
        // Tied embeddings (taken twice: the LM head is their wte) and the blocks.
        OffloadSetup{"HostTiedEmbeddings",
                     FourBlockLlama(true),
                     ParamOffload::kHost,
                     {0, 1, 2, 3, 4},
                     3,
                     false},
        // From NVMe, with half the optimizer state on NVMe too.
        OffloadSetup{
            "NvmeBlocks", FourBlockLlama(false), ParamOffload::kNvme, {1, 2, 3, 4}, 2, true},
        OffloadSetup{"NvmeEverything",
                     FourBlockLlama(true),
                     ParamOffload::kNvme,
                     {0, 1, 2, 3, 4, 5},
                     3,
                     false}),
    [](const ::testing::TestParamInfo<OffloadSetup>& info) { return info.param.name; });

// What the engine refuses, with what to do.
TEST(ParamOffloadOptions, RefusesImpossibleRings) {
  auto device = testing_util::MakeCpuDevice();
  auto model =
      TransformerModel::Create(*device, FourBlockLlama(false), {kBatch, kSeq, true, DType::kBF16});
  ASSERT_TRUE(model.ok());
  auto expect = [&](const ParamStreaming& p, StatusCode code, const std::string& text) {
    EngineOptions o = BaseOptions();
    o.params = p;
    auto engine = OffloadEngine::Create(*device, **model, o);
    ASSERT_FALSE(engine.ok()) << text;
    EXPECT_EQ(code, engine.status().code()) << engine.status().ToString();
    EXPECT_NE(std::string::npos, engine.status().message().find(text))
        << engine.status().ToString();
  };
  expect({ParamOffload::kHost, {2}, 1, 1, 2}, StatusCode::kInvalidArgument,
         "at least 2 device slots");
  expect({ParamOffload::kHost, {2}, 2, 2, 2}, StatusCode::kInvalidArgument, "prefetch depth 2");
  expect({ParamOffload::kHost, {}, 2, 1, 2}, StatusCode::kInvalidArgument,
         "names no streamed units");
  expect({ParamOffload::kHost, {9}, 2, 1, 2}, StatusCode::kInvalidArgument,
         "not one of the model's 6 units");
  expect({ParamOffload::kHost, {2, 2}, 2, 1, 2}, StatusCode::kInvalidArgument, "listed twice");
  expect({ParamOffload::kAuto, {}, 2, 1, 2}, StatusCode::kInvalidArgument, "planner's to resolve");
  expect({ParamOffload::kNone, {2}, 2, 1, 2}, StatusCode::kInvalidArgument, "give host or nvme");
  expect({ParamOffload::kNvme, {2}, 2, 1, 2}, StatusCode::kInvalidArgument, "--nvme-path");
}

TEST(ParamOffloadOptions, ADeviceTooSmallForTheSlotsIsRefusedWithTheNumbers) {
  // Room for the model's activations but not for 3 slots of the head.
  auto probe = testing_util::MakeCpuDevice();
  auto probe_model =
      TransformerModel::Create(*probe, FourBlockLlama(false), {kBatch, kSeq, true, DType::kBF16});
  ASSERT_TRUE(probe_model.ok());
  const uint64_t activations = probe->DeviceMemory().in_use_bytes;
  auto device = testing_util::MakeCpuDevice(activations + 1024);
  auto model =
      TransformerModel::Create(*device, FourBlockLlama(false), {kBatch, kSeq, true, DType::kBF16});
  ASSERT_TRUE(model.ok());
  EngineOptions o = BaseOptions();
  o.params = {ParamOffload::kHost, {1, 2, 3, 4, 5}, 3, 2, 2};
  auto engine = OffloadEngine::Create(*device, **model, o);
  ASSERT_EQ(StatusCode::kOutOfMemory, engine.status().code()) << engine.status().ToString();
  const std::string msg = engine.status().message();
  EXPECT_NE(std::string::npos, msg.find("3 weight slots of")) << msg;
  EXPECT_NE(std::string::npos, msg.find("use fewer slots")) << msg;
}

// A model that takes its units in another order than its schedule says is
// stopped at the first wrong take, naming both units.
class OutOfScheduleModel : public Trainable {
 public:
  std::vector<UnitInfo> Units() const override { return {{"a", 64}, {"b", 64}, {"c", 64}}; }
  Status InitialWeights(int unit, float* out) override {
    for (int i = 0; i < 64; ++i) out[i] = 0.25f;
    return Status::Ok();
  }
  Status ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                         UnitAccess& access) override {
    TF_RETURN_IF_ERROR(access.Weights(0).status());
    TF_RETURN_IF_ERROR(access.ReleaseWeights(0));
    return access.Weights(2).status();  // the schedule says b (unit 1) next
  }
  StatusOr<float> LastLoss() override { return 0.0f; }
};

TEST(ParamOffloadOptions, TakingAUnitOutOfScheduleFails) {
  auto device = testing_util::MakeCpuDevice();
  OutOfScheduleModel model;
  EngineOptions o = BaseOptions();
  o.params = {ParamOffload::kHost, {1, 2}, 2, 1, 2};
  auto engine = OffloadEngine::Create(*device, model, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  MicroBatch mb;
  auto stats = (*engine)->Step({mb});
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(StatusCode::kFailedPrecondition, stats.status().code());
  EXPECT_NE(std::string::npos,
            stats.status().message().find("takes c where its weights schedule says b"))
      << stats.status().ToString();
}

}  // namespace
}  // namespace tierflow
