// The transformer's backward against finite differences of its own forward
// (whole tiny models of each family, fp32, CPU device), activation
// checkpointing against storing everything (bit-identical gradients), the
// gradient-bucket order, and input validation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/transformer.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

using testing_util::DirectUnitAccess;
using testing_util::InitialFlat;
using testing_util::MakeCpuDevice;
using testing_util::RandomTokens;
using testing_util::TokenBatch;

using Result = testing_util::RunResult;

StatusOr<Result> RunOnce(TransformerModel& model, DirectUnitAccess& access, Stream& s,
                         const TokenBatch& tb, float dloss_scale = 1.0f) {
  return testing_util::RunForwardBackward(model, access, s, tb.micro(), dloss_scale);
}

// Seeded weights with the norms' and biases' values jittered, so their
// gradients are generic (not the init's exact 1 and 0).
std::vector<float> JitteredWeights(TransformerModel& model, uint32_t seed) {
  std::vector<float> flat = InitialFlat(model);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  const ParamLayout& layout = model.layout();
  for (size_t u = 0; u < layout.tensors.size(); ++u) {
    for (const TensorSlot& t : layout.tensors[u]) {
      if (t.tensor.shape.size() != 1) continue;
      float* p = flat.data() + layout.unit_offsets[u] + t.offset;
      for (int64_t i = 0; i < t.tensor.num_elements; ++i) p[i] += noise(rng);
    }
  }
  return flat;
}

class TransformerGradTest : public ::testing::TestWithParam<ModelConfig> {};

// Central differences with Richardson extrapolation, (4 D(h/2) - D(h)) / 3,
// which cancels the h^2 error term; h = 1e-2 keeps fp32 rounding of the
// loss (~1e-7 relative) below ~1e-4 in the quotient. Tolerance: 5e-4 + 3% of
// the larger magnitude (the forward runs in fp32, so the difference quotient
// itself carries ~1e-4 of noise).
TEST_P(TransformerGradTest, MatchesFiniteDifferencesFp32) {
  const ModelConfig config = GetParam();
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  // Head chunks of 3 rows: 4 chunks of the 10 rows, one of them with an ignored target.
  TrainShape shape{.batch = 2,
                   .seq_len = 5,
                   .checkpoint_activations = false,
                   .dtype = DType::kF32,
                   .head_chunk_logits = 3 * config.vocab_size,
                   .head_chunk_min_rows = 1};
  TransformerInit init;
  init.seed = 7;
  init.init_std = 0.3f;  // larger than training's 0.02 so every path carries signal
  auto model_or = TransformerModel::Create(*device, config, shape, init);
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();
  TransformerModel& model = **model_or;
  DirectUnitAccess access(*device, *stream, model.Units(), DType::kF32);
  std::vector<float> weights = JitteredWeights(model, 11);
  ASSERT_TRUE(access.SetWeights(weights).ok());
  const TokenBatch tb = RandomTokens(2, 5, static_cast<int>(config.vocab_size), 3);

  auto base = RunOnce(model, access, *stream, tb);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_TRUE(std::isfinite(base->loss));

  auto loss_at = [&](int64_t index, float value) -> double {
    std::vector<float> w = weights;
    w[index] = value;
    EXPECT_TRUE(access.SetWeights(w).ok());
    auto r = RunOnce(model, access, *stream, tb);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->loss : NAN;
  };

  std::mt19937 rng(5);
  const ParamLayout& layout = model.layout();
  int checked = 0;
  double worst = 0;
  for (size_t u = 0; u < layout.tensors.size(); ++u) {
    for (const TensorSlot& t : layout.tensors[u]) {
      std::vector<int64_t> picks;
      std::uniform_int_distribution<int64_t> any(0, t.tensor.num_elements - 1);
      for (int k = 0; k < 3; ++k) picks.push_back(any(rng));
      if (t.offset == layout.embedding.wte && static_cast<int>(u) == 0) {
        // Rows of the inputs' tokens: the embedding's own gradient path.
        for (int k = 0; k < 3; ++k) {
          picks.push_back(int64_t{tb.inputs[k * 3]} * config.d_model + k);
        }
      }
      for (int64_t local : picks) {
        const int64_t index = layout.unit_offsets[u] + t.offset + local;
        const float w0 = weights[index];
        const float h = 1e-2f;
        const double d1 = (loss_at(index, w0 + h) - loss_at(index, w0 - h)) / (2.0 * h);
        const double d2 = (loss_at(index, w0 + h / 2) - loss_at(index, w0 - h / 2)) / h;
        const double fd = (4.0 * d2 - d1) / 3.0;
        const double g = base->grads[index];
        const double tol = 5e-4 + 3e-2 * std::max(std::abs(fd), std::abs(g));
        EXPECT_NEAR(g, fd, tol) << config.name << " " << t.tensor.name << "[" << local << "]";
        worst = std::max(worst, std::abs(g - fd) / (5e-4 + std::abs(fd)));
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 30);
  RecordProperty("worst_relative_error", std::to_string(worst));
}

// Checkpointing recomputes each block with the same deterministic ops, so the
// gradients are bit-identical, in every dtype.
TEST_P(TransformerGradTest, CheckpointingGivesIdenticalGradients) {
  const ModelConfig config = GetParam();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto device = MakeCpuDevice();
    auto stream = device->CreateStream("compute").value();
    std::vector<Result> results;
    for (bool ckpt : {false, true}) {
      TrainShape shape{.batch = 2, .seq_len = 6, .checkpoint_activations = ckpt, .dtype = dtype};
      auto model = TransformerModel::Create(*device, config, shape).value();
      DirectUnitAccess access(*device, *stream, model->Units(), dtype);
      ASSERT_TRUE(access.SetWeights(JitteredWeights(*model, 2)).ok());
      auto r = RunOnce(*model, access, *stream, RandomTokens(2, 6, 23, 9), 0.5f);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      results.push_back(*r);
      if (ckpt) {
        EXPECT_LT(model->activation_bytes(),
                  TransformerModel::ActivationBytes(config, {2, 6, false, dtype}));
      }
    }
    EXPECT_EQ(results[0].loss, results[1].loss);
    ASSERT_EQ(results[0].grads.size(), results[1].grads.size());
    EXPECT_EQ(0, std::memcmp(results[0].grads.data(), results[1].grads.data(),
                             results[0].grads.size() * 4))
        << config.name << " " << DTypeName(dtype);
  }
}

// Chunking the head over rows changes only the fp32 summation order of the
// head's weight gradient; an all-ignored micro-batch gives loss 0 and no gradient.
TEST_P(TransformerGradTest, HeadChunksMatchOneChunkAndAllIgnoredIsZero) {
  const ModelConfig config = GetParam();
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  const TokenBatch tb = RandomTokens(2, 7, 23, 6);
  std::vector<Result> results;
  for (int64_t budget : {int64_t{1} << 20, int64_t{2 * 23}, int64_t{1}}) {
    auto model =
        TransformerModel::Create(*device, config, {2, 7, false, DType::kF32, budget}).value();
    DirectUnitAccess access(*device, *stream, model->Units(), DType::kF32);
    ASSERT_TRUE(access.SetWeights(JitteredWeights(*model, 3)).ok());
    auto r = RunOnce(*model, access, *stream, tb);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    results.push_back(*r);
    if (budget == 1) {
      TokenBatch ignored = tb;
      std::fill(ignored.targets.begin(), ignored.targets.end(), -100);
      auto z = RunOnce(*model, access, *stream, ignored);
      ASSERT_TRUE(z.ok()) << z.status().ToString();
      EXPECT_EQ(0.0f, z->loss);
      for (float g : z->grads) ASSERT_EQ(0.0f, g);
    }
  }
  for (size_t k = 1; k < results.size(); ++k) {
    EXPECT_NEAR(results[0].loss, results[k].loss, 1e-5f * results[0].loss);
    for (size_t i = 0; i < results[0].grads.size(); ++i) {
      ASSERT_NEAR(results[0].grads[i], results[k].grads[i],
                  1e-6f + 1e-4f * std::abs(results[0].grads[i]))
          << "budget case " << k << " param " << i;
    }
  }
}

// dloss_scale multiplies every gradient (not the loss); a shorter micro-batch
// than allocated runs; each unit's bucket is ended exactly once, head first,
// embeddings last, with at most two buckets open at a time.
TEST_P(TransformerGradTest, ScaleShapesAndBucketOrder) {
  const ModelConfig config = GetParam();
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  auto model = TransformerModel::Create(*device, config, {4, 8, false, DType::kF32}).value();
  DirectUnitAccess access(*device, *stream, model->Units(), DType::kF32);
  ASSERT_TRUE(access.SetWeights(JitteredWeights(*model, 4)).ok());
  const TokenBatch tb = RandomTokens(2, 5, 23, 1);
  auto one = RunOnce(*model, access, *stream, tb, 1.0f);
  auto four = RunOnce(*model, access, *stream, tb, 4.0f);
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_EQ(one->loss, four->loss);
  EXPECT_NEAR(std::log(23.0), one->loss, 1.5);  // near-uniform predictions at init
  for (size_t i = 0; i < one->grads.size(); ++i) {
    ASSERT_NEAR(4.0f * one->grads[i], four->grads[i], 1e-6f + 1e-5f * std::abs(four->grads[i]));
  }
  const int units = static_cast<int>(model->Units().size());
  for (int u = 0; u < units; ++u) EXPECT_EQ(2, access.ended()[u]);
  EXPECT_EQ(units - 1, access.end_order()[0]);
  EXPECT_EQ(0, access.end_order()[units - 1]);
  EXPECT_LE(access.max_open(), 2);
}

// Forwards everything to a real stream and counts kernel launches, so a test
// can see how far the model had enqueued when it asked for something.
class CountingStream : public Stream {
 public:
  explicit CountingStream(Stream& inner) : inner_(inner) {}
  int launches() const { return launches_; }
  const std::string& name() const override { return inner_.name(); }
  DeviceKind device_kind() const override { return inner_.device_kind(); }
  Status CopyHostToDevice(void* d, const void* s, size_t n) override {
    return inner_.CopyHostToDevice(d, s, n);
  }
  Status CopyDeviceToHost(void* d, const void* s, size_t n) override {
    return inner_.CopyDeviceToHost(d, s, n);
  }
  Status CopyDeviceToDevice(void* d, const void* s, size_t n) override {
    return inner_.CopyDeviceToDevice(d, s, n);
  }
  Status Memset(void* d, int v, size_t n) override { return inner_.Memset(d, v, n); }
  Status Record(Event& e) override { return inner_.Record(e); }
  Status Wait(const Event& e) override { return inner_.Wait(e); }
  Status HostCallback(std::function<Status()> fn) override {
    return inner_.HostCallback(std::move(fn));
  }
  Status Launch(Kernel kernel) override {
    ++launches_;
    return inner_.Launch(std::move(kernel));
  }
  Status Synchronize() override { return inner_.Synchronize(); }
  void* native_handle() const override { return inner_.native_handle(); }

 private:
  Stream& inner_;
  int launches_ = 0;
};

// Logs each Weights call with the number of kernels enqueued before it.
class WeightsOrderAccess : public UnitAccess {
 public:
  WeightsOrderAccess(DirectUnitAccess& inner, const CountingStream& stream)
      : inner_(inner), stream_(stream) {}
  StatusOr<void*> Weights(int unit) override {
    calls.push_back({unit, stream_.launches()});
    ++held;
    max_held = std::max(max_held, held);
    return inner_.Weights(unit);
  }
  Status ReleaseWeights(int unit) override {
    releases.push_back({unit, stream_.launches()});
    --held;
    return inner_.ReleaseWeights(unit);
  }
  uint64_t GradPieceCapacity() const override { return inner_.GradPieceCapacity(); }
  StatusOr<float*> BeginGrads(int unit, uint64_t begin, uint64_t count) override {
    return inner_.BeginGrads(unit, begin, count);
  }
  Status EndGrads(int unit) override { return inner_.EndGrads(unit); }
  struct Call {
    int unit;
    int launches_before;
  };
  std::vector<Call> calls, releases;
  int held = 0, max_held = 0;

 private:
  DirectUnitAccess& inner_;
  const CountingStream& stream_;
};

// The model takes each unit's weights just before that unit's first kernel,
// in forward order (embeddings, every layer, head), so the engine can let
// the next step's forward start while the optimizer still updates the later
// units; and it takes them exactly as its WeightsSchedule says, releasing
// each before the next block's, so streamed units need few device slots.
TEST_P(TransformerGradTest, TakesEachUnitsWeightsJustBeforeItsKernelsInForwardOrder) {
  const ModelConfig config = GetParam();
  auto device = MakeCpuDevice();
  auto real_stream = device->CreateStream("compute").value();
  CountingStream stream(*real_stream);
  auto model = TransformerModel::Create(*device, config, {2, 5, false, DType::kF32}).value();
  DirectUnitAccess direct(*device, *real_stream, model->Units(), DType::kF32);
  ASSERT_TRUE(direct.SetWeights(JitteredWeights(*model, 4)).ok());
  WeightsOrderAccess access(direct, stream);
  const TokenBatch tb = RandomTokens(2, 5, 23, 1);
  ASSERT_TRUE(model->ForwardBackward(stream, tb.micro(), 1.0f, access).ok());
  ASSERT_TRUE(stream.Synchronize().ok());
  const int units = static_cast<int>(model->Units().size());
  const std::vector<int> schedule = model->WeightsSchedule();
  const bool tied = model->layout().head.lm_head < 0;
  // Forward order, the tied embeddings again, then the blocks backwards.
  ASSERT_EQ(schedule.size(), static_cast<size_t>(units + (tied ? 1 : 0) + units - 2));
  ASSERT_EQ(access.calls.size(), schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) EXPECT_EQ(access.calls[i].unit, schedule[i]) << i;
  EXPECT_EQ(access.releases.size(), access.calls.size());
  EXPECT_EQ(access.held, 0);
  // At most the head and the tied embeddings together, else one at a time.
  EXPECT_EQ(access.max_held, tied ? 2 : 1);
  EXPECT_EQ(access.calls[0].launches_before, 0);  // nothing runs before the embeddings' weights
  for (int u = 0; u < units; ++u) {
    EXPECT_EQ(access.calls[u].unit, u);
    // The previous unit's forward kernels were enqueued before this unit's
    // weights were asked for.
    if (u > 0) {
      EXPECT_GT(access.calls[u].launches_before, access.calls[u - 1].launches_before);
    }
  }
}

TEST_P(TransformerGradTest, RejectsBadInputs) {
  const ModelConfig config = GetParam();
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  auto model = TransformerModel::Create(*device, config, {2, 4, false, DType::kF32}).value();
  DirectUnitAccess access(*device, *stream, model->Units(), DType::kF32);
  EXPECT_FALSE(model->LastLoss().ok());
  TokenBatch tb = RandomTokens(2, 4, 23, 1);
  tb.inputs[3] = 23;
  Status st = model->ForwardBackward(*stream, tb.micro(), 1.0f, access);
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_NE(std::string::npos, st.message().find("position 3")) << st.ToString();
  tb = RandomTokens(2, 4, 23, 1);
  tb.targets[5] = -7;
  EXPECT_FALSE(model->ForwardBackward(*stream, tb.micro(), 1.0f, access).ok());
  tb = RandomTokens(3, 4, 23, 1);  // more sequences than allocated
  EXPECT_FALSE(model->ForwardBackward(*stream, tb.micro(), 1.0f, access).ok());
  EXPECT_FALSE(
      TransformerModel::Create(*device, config, {1, static_cast<int>(config.max_seq_len) + 1})
          .ok());
  ModelConfig scaled = config;
  scaled.rope_scaling_type = "yarn";  // not applied by tierflow's RoPE
  auto refused = TransformerModel::Create(*device, scaled, {1, 4});
  EXPECT_EQ(StatusCode::kUnimplemented, refused.status().code());
  EXPECT_NE(refused.status().message().find("yarn"), std::string::npos);
  TrainShape allow{1, 4};
  allow.allow_unscaled_rope = true;
  EXPECT_TRUE(TransformerModel::Create(*device, scaled, allow).ok());
  EXPECT_TRUE(TransformerModel::Create(*device, testing_util::TinyLlama3(), {1, 4}).ok());
  ModelConfig windowed = config;
  windowed.sliding_window = 3;
  EXPECT_EQ(StatusCode::kUnimplemented,
            TransformerModel::Create(*device, windowed, {1, 4}).status().code());
  EXPECT_TRUE(TransformerModel::Create(*device, windowed, {1, 3}).ok());
}

INSTANTIATE_TEST_SUITE_P(Families, TransformerGradTest,
                         ::testing::Values(testing_util::TinyGpt2(), testing_util::TinyLlama(),
                                           testing_util::TinyLlama3(),
                                           testing_util::TinyQwenTied()),
                         [](const ::testing::TestParamInfo<ModelConfig>& info) {
                           std::string name = info.param.name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tierflow
