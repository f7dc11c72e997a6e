// The OffloadEngine on the CPU device: against a plain in-memory AdamW,
// host vs NVMe tiers, overlapped vs synchronous pipelines, micro-batching,
// fp16 overflow skipping, and out-of-memory before anything is half-done.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/scratch_dir.h"

#include "common/half.h"
#include "common/trace.h"
#include "engine/offload_engine.h"
#include "io/trace_file.h"
#include "optim/optim_reference.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/linear_stack.h"

namespace tierflow {
namespace {

using testing_util::BaseOptions;
using testing_util::CpuDevice;
using testing_util::Data;
using testing_util::kDim;
using testing_util::kLayers;
using testing_util::LinearStack;
using testing_util::LinearStackForwardBackward;
using testing_util::MakeData;
using testing_util::RunResult;
using testing_util::Train;

class TempDir : public testing_common::ScratchDir {
 public:
  TempDir() : ScratchDir("tierflow-engine-") {}
};

// The plain reference: fp32 forward/backward, double-precision AdamW, same clipping rule.
std::vector<std::vector<double>> ReferenceTrain(const EngineOptions& options, const Data& data) {
  LinearStack init(kLayers, kDim, DType::kF32, 7);
  const size_t n = static_cast<size_t>(kDim) * kDim;
  std::vector<std::vector<double>> master(kLayers), m(kLayers, std::vector<double>(n, 0.0)),
      v(kLayers, std::vector<double>(n, 0.0));
  for (int l = 0; l < kLayers; ++l)
    master[l].assign(init.initial(l).begin(), init.initial(l).end());
  for (size_t s = 0; s < data.x.size(); ++s) {
    std::vector<std::vector<float>> w(kLayers, std::vector<float>(n)),
        g(kLayers, std::vector<float>(n, 0.0f));
    std::vector<const float*> wp;
    std::vector<float*> gp;
    for (int l = 0; l < kLayers; ++l) {
      for (size_t i = 0; i < n; ++i) w[l][i] = static_cast<float>(master[l][i]);
      wp.push_back(w[l].data());
      gp.push_back(g[l].data());
    }
    const int batch = static_cast<int>(data.x[s].size()) / kDim;
    LinearStackForwardBackward(wp, data.x[s].data(), data.y[s].data(), batch, kDim, 1.0f, gp);
    double sq = 0;
    for (auto& gl : g)
      for (float x : gl) sq += static_cast<double>(x) * x;
    double norm = std::sqrt(sq);
    float coef = 1.0f;
    if (options.clip_grad_norm > 0 && norm > options.clip_grad_norm) {
      coef = static_cast<float>(options.clip_grad_norm / (norm + 1e-6));
    }
    AdamStepArgs args;
    args.step = static_cast<int64_t>(s) + 1;
    args.grad_scale = coef;
    for (int l = 0; l < kLayers; ++l) {
      AdamReferenceStep(options.adam, args, g[l].data(), DType::kF32, n, master[l].data(),
                        m[l].data(), v[l].data());
    }
  }
  return master;
}

TEST(OffloadEngine, MatchesPlainAdamWReference) {
  EngineOptions o = BaseOptions();
  Data data = MakeData(6, 8, 1);
  RunResult r = Train(o, data);
  auto ref = ReferenceTrain(o, data);
  ASSERT_EQ(r.stats.size(), 6u);
  // Masters are the first third of each sub-group's record; walk groups in layer order.
  const size_t n = static_cast<size_t>(kDim) * kDim;
  size_t pos = 0;
  std::vector<float> masters;
  for (size_t off = 0; off < kLayers * n;) {
    const size_t gn = std::min<size_t>(200, n - off % n);
    masters.insert(masters.end(), r.state.begin() + pos, r.state.begin() + pos + gn);
    pos += 3 * gn;
    off += gn;
  }
  ASSERT_EQ(masters.size(), kLayers * n);
  for (int l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < n; ++i) {
      const double want = ref[l][i], got = masters[l * n + i];
      ASSERT_NEAR(got, want, 2e-5 + 1e-4 * std::fabs(want)) << "layer " << l << " index " << i;
    }
  }
  EXPECT_LT(r.stats.back().loss, r.stats.front().loss);
  // The device holds the final master weights (fp32 working weights here).
  EXPECT_EQ(0, std::memcmp(r.device_weights.data(), masters.data(), masters.size() * 4));
}

TEST(OffloadEngine, Bf16WeightsTrainAndDeviceHoldsRoundedMasters) {
  EngineOptions o = BaseOptions();
  o.weights_dtype = DType::kBF16;
  Data data = MakeData(8, 8, 2);
  RunResult r = Train(o, data);
  ASSERT_EQ(r.stats.size(), 8u);
  EXPECT_LT(r.stats.back().loss, r.stats.front().loss);
  for (const StepStats& s : r.stats) EXPECT_FALSE(s.skipped);
}

// kAuto is a request for the planner; an engine handed one unresolved
// refuses it instead of guessing a tier.
TEST(OffloadEngine, RefusesUnresolvedAutoPlacement) {
  auto device = CpuDevice();
  LinearStack model(kLayers, kDim, DType::kF32, 7);
  EngineOptions o = BaseOptions();
  o.offload = OffloadPlacement::kAuto;
  auto engine = OffloadEngine::Create(*device, model, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("offload must be host or nvme, not auto"),
            std::string::npos)
      << engine.status().ToString();
}

TEST(OffloadEngine, HostAndNvmeTiersGiveBitIdenticalState) {
  TempDir dir;
  Data data = MakeData(5, 8, 3);
  EngineOptions host = BaseOptions();
  host.clip_grad_norm = 0.5f;
  EngineOptions nvme = host;
  nvme.offload = OffloadPlacement::kNvme;
  nvme.nvme_paths = {dir.path()};
  EngineOptions split = nvme;
  split.nvme_ratio = 0.5;
  RunResult a = Train(host, data), b = Train(nvme, data), c = Train(split, data);
  ASSERT_FALSE(a.state.empty());
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.state, c.state);
  EXPECT_EQ(a.device_weights, b.device_weights);
  // A clean exit leaves no swap files behind.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()) ||
              std::filesystem::is_empty(std::filesystem::path(dir.path()) / "tierflow-swap"));
}

class PipelineTest : public testing::TestWithParam<std::tuple<float, OffloadPlacement>> {};

TEST_P(PipelineTest, OverlappedEqualsSynchronousBitForBit) {
  const auto [clip, offload] = GetParam();
  TempDir dir;
  Data data = MakeData(5, 8, 4);
  EngineOptions sync = BaseOptions();
  sync.clip_grad_norm = clip;
  sync.offload = offload;
  sync.nvme_paths = {dir.path()};
  sync.pipeline = Pipeline::kSynchronous;
  EngineOptions overlapped = sync;
  overlapped.pipeline = Pipeline::kOverlapped;
  overlapped.buffer_count = 6;
  overlapped.speculate_eagerly = true;  // every step speculates: rollback is exercised
  overlapped.pause_speculation_after_clip = false;
  EngineOptions opportunistic = overlapped;
  opportunistic.speculate_eagerly = false;
  RunResult s = Train(sync, data), o = Train(overlapped, data), p = Train(opportunistic, data);
  EXPECT_EQ(s.state, p.state);
  ASSERT_EQ(s.stats.size(), 5u);
  ASSERT_EQ(o.stats.size(), 5u);
  EXPECT_EQ(s.state, o.state);
  EXPECT_EQ(s.device_weights, o.device_weights);
  int rolled_back = 0, clipped = 0;
  for (size_t i = 0; i < o.stats.size(); ++i) {
    EXPECT_GT(o.stats[i].speculated_groups, 0);
    EXPECT_EQ(s.stats[i].speculated_groups, 0);
    EXPECT_EQ(o.stats[i].grad_norm, s.stats[i].grad_norm);
    rolled_back += o.stats[i].rolled_back;
    clipped += o.stats[i].clip_coef < 1.0f;
  }
  EXPECT_EQ(rolled_back, clipped);
  if (clip > 0 && clip < 0.05f) {
    EXPECT_EQ(clipped, 5);  // clipping triggers every step
  }
  if (clip == 0) {
    EXPECT_EQ(clipped, 0);
  }
}

// After a clipped step the next one does not speculate, and the one after a
// step that was not clipped does; the weights stay those of the synchronous
// pipeline.
TEST(OffloadEngine, SpeculationPausesAfterAClippedStep) {
  for (const OffloadPlacement offload : {OffloadPlacement::kHost, OffloadPlacement::kNvme}) {
    SCOPED_TRACE(OffloadPlacementName(offload));
    TempDir dir;
    Data data = MakeData(6, 8, 4);
    EngineOptions sync = BaseOptions();
    sync.offload = offload;
    sync.nvme_paths = {dir.path()};
    sync.pipeline = Pipeline::kSynchronous;
    RunResult reference = Train(sync, data);
    ASSERT_EQ(reference.stats.size(), 6u);
    // A threshold between the steps' norms, so some steps clip and some do not.
    std::vector<double> norms;
    for (const StepStats& st : reference.stats) norms.push_back(st.grad_norm);
    std::vector<double> sorted = norms;
    std::sort(sorted.begin(), sorted.end());
    EngineOptions overlapped = sync;
    overlapped.pipeline = Pipeline::kOverlapped;
    overlapped.buffer_count = 6;
    overlapped.speculate_eagerly = true;
    overlapped.clip_grad_norm = static_cast<float>((sorted[2] + sorted[3]) / 2);
    sync.clip_grad_norm = overlapped.clip_grad_norm;
    reference = Train(sync, data);
    RunResult o = Train(overlapped, data);
    EXPECT_EQ(reference.state, o.state);
    EXPECT_EQ(reference.device_weights, o.device_weights);
    ASSERT_EQ(o.stats.size(), 6u);
    int paused = 0, clipped = 0;
    for (size_t i = 0; i < o.stats.size(); ++i) {
      const bool previous_clipped = i > 0 && o.stats[i - 1].clip_coef < 1.0f;
      EXPECT_EQ(o.stats[i].speculation_paused, previous_clipped) << "step " << i;
      EXPECT_EQ(o.stats[i].speculated_groups > 0, !previous_clipped) << "step " << i;
      EXPECT_EQ(o.stats[i].rolled_back, !previous_clipped && o.stats[i].clip_coef < 1.0f)
          << "step " << i;
      paused += o.stats[i].speculation_paused;
      clipped += o.stats[i].clip_coef < 1.0f;
    }
    EXPECT_GT(clipped, 0);
    EXPECT_LT(clipped, 6);
    EXPECT_GT(paused, 0);
  }
}

// A budget smaller than the model, state split between host and NVMe:
// speculation takes the NVMe sub-groups first (backward order) and backs up
// only the host ones, within the budget; the result is still the
// synchronous pipeline's, whether the speculation holds or is rolled back.
TEST(OffloadEngine, SpeculationWithinASmallBudgetOnSplitStateEqualsSynchronous) {
  for (const float clip : {0.0f, 0.01f}) {
    SCOPED_TRACE(clip);
    TempDir dir;
    Data data = MakeData(4, 8, 10);
    EngineOptions sync = BaseOptions();
    sync.clip_grad_norm = clip;
    sync.offload = OffloadPlacement::kNvme;
    sync.nvme_ratio = 0.5;  // the last two layers' state on NVMe
    sync.nvme_paths = {dir.path()};
    sync.pipeline = Pipeline::kSynchronous;
    EngineOptions overlapped = sync;
    overlapped.pipeline = Pipeline::kOverlapped;
    overlapped.buffer_count = 6;
    overlapped.speculate_eagerly = true;
    overlapped.pause_speculation_after_clip = false;
    overlapped.speculation_params = 1500;  // of 2304: both NVMe layers and one host sub-group
    RunResult s = Train(sync, data), o = Train(overlapped, data);
    ASSERT_EQ(o.stats.size(), 4u);
    EXPECT_EQ(s.state, o.state);
    EXPECT_EQ(s.device_weights, o.device_weights);
    for (const StepStats& st : o.stats) {
      EXPECT_EQ(st.speculated_groups, 7);  // 3 + 3 sub-groups of the NVMe layers, then 200 more
      EXPECT_EQ(st.rolled_back, clip > 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ClipAndTier, PipelineTest,
                         testing::Combine(testing::Values(0.0f, 0.01f, 100.0f),
                                          testing::Values(OffloadPlacement::kHost,
                                                          OffloadPlacement::kNvme)));

TEST(OffloadEngine, FourMicroBatchesOfOneEqualOneOfFour) {
  EngineOptions o = BaseOptions();
  Data data = MakeData(4, 4, 5);
  RunResult one = Train(o, data, 1), four = Train(o, data, 4);
  ASSERT_EQ(one.state.size(), four.state.size());
  for (size_t i = 0; i < one.state.size(); ++i) {
    ASSERT_NEAR(one.state[i], four.state[i], 1e-5 + 1e-4 * std::fabs(one.state[i])) << i;
  }
  for (size_t s = 0; s < one.stats.size(); ++s) {
    EXPECT_NEAR(one.stats[s].loss, four.stats[s].loss, 1e-5);
  }
}

// An engine built for a fixed number of micro-batches per step keeps only
// the gradient buffers that number needs (one: the landing, in the
// transfer dtype; several: pinned staging and a pageable fp32 accumulator)
// and trains to the same bits as one built for any number; a step with
// another number is refused.
TEST(OffloadEngine, FixedMicroBatchesPerStepKeepOnlyTheirBuffersAndTheSameBits) {
  for (DType weights : {DType::kF32, DType::kBF16}) {
    for (int k : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(weights) << " x" << k);
      EngineOptions any = BaseOptions();
      any.weights_dtype = weights;
      EngineOptions fixed = any;
      fixed.micro_batches_per_step = k;
      const Data data = MakeData(3, 4, 11);
      const RunResult a = Train(any, data, k), f = Train(fixed, data, k);
      ASSERT_EQ(a.stats.size(), 3u);
      ASSERT_EQ(f.stats.size(), 3u);
      EXPECT_EQ(a.state, f.state);
      EXPECT_EQ(a.device_weights, f.device_weights);
      // Pinned: the fixed engine drops the staging (k = 1, whose landing
      // is also P x t instead of P x 4) or the pinned fp32 accumulator (k = 2).
      auto pinned_after_create = [](const EngineOptions& options) {
        auto device = CpuDevice();
        LinearStack model(kLayers, kDim, options.weights_dtype, 7);
        auto engine = OffloadEngine::Create(*device, model, options);
        EXPECT_TRUE(engine.ok()) << engine.status().ToString();
        return device->PinnedMemory().in_use_bytes;
      };
      const uint64_t params = Train(any, MakeData(0, 4, 1)).device_weights.size();
      const uint64_t dropped = pinned_after_create(any) - pinned_after_create(fixed);
      EXPECT_GE(dropped, k == 1 ? 0 : params * 4);
      EXPECT_GT(dropped, 0u);
    }
  }
  auto device = CpuDevice();
  LinearStack model(kLayers, kDim, DType::kF32, 7);
  EngineOptions o = BaseOptions();
  o.micro_batches_per_step = 2;
  auto engine = OffloadEngine::Create(*device, model, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const Data data = MakeData(1, 4, 3);
  MicroBatch mb;
  mb.dense_inputs = data.x[0].data();
  mb.dense_targets = data.y[0].data();
  mb.batch = 4;
  auto st = (*engine)->Step({mb});
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("built for 2 per step"), std::string::npos)
      << st.status().ToString();
  o.micro_batches_per_step = -1;
  EXPECT_EQ(OffloadEngine::Create(*device, model, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(OffloadEngine, Fp16OverflowSkipsTheStepAndLowersTheScale) {
  EngineOptions o = BaseOptions();
  o.weights_dtype = DType::kF16;
  o.loss_scaler.initial_scale_power = 16;
  o.loss_scaler.hysteresis = 1;
  o.loss_scaler.scale_window = 2;
  auto device = CpuDevice();
  LinearStack model(kLayers, kDim, DType::kF16, 7);
  auto engine = std::move(OffloadEngine::Create(*device, model, o)).value();
  std::vector<float> before(3 * 200);
  ASSERT_TRUE(engine->ReadState(0, before.data(), before.data() + 200, before.data() + 400).ok());
  Data data = MakeData(1, 8, 6);
  std::vector<float> poisoned = data.y[0];
  poisoned[5] = INFINITY;  // the loss gradient overflows: every gradient becomes non-finite
  MicroBatch bad{.dense_inputs = data.x[0].data(), .dense_targets = poisoned.data(), .batch = 8};
  MicroBatch good{.dense_inputs = data.x[0].data(), .dense_targets = data.y[0].data(), .batch = 8};
  auto st = engine->Step({bad});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->skipped);
  EXPECT_EQ(st->step, 0);
  EXPECT_EQ(st->loss_scale, 65536.0f);
  ASSERT_TRUE(engine->Finish().ok());
  std::vector<float> after(3 * 200);
  ASSERT_TRUE(engine->ReadState(0, after.data(), after.data() + 200, after.data() + 400).ok());
  EXPECT_EQ(before, after);  // master and moments untouched
  EXPECT_EQ(engine->loss_scaler_state().scale, 32768.0f);
  // Clean steps apply again, with Adam's step counter continuing from 1, and
  // the scale doubles after scale_window good steps.
  for (int i = 1; i <= 2; ++i) {
    auto next = engine->Step({good});
    ASSERT_TRUE(next.ok());
    EXPECT_FALSE(next->skipped);
    EXPECT_EQ(next->step, i);
    EXPECT_EQ(next->loss_scale, 32768.0f);
  }
  ASSERT_TRUE(engine->Finish().ok());
  EXPECT_EQ(engine->loss_scaler_state().scale, 65536.0f);
  ASSERT_TRUE(engine->ReadState(0, after.data(), after.data() + 200, after.data() + 400).ok());
  EXPECT_NE(before, after);
}

TEST(OffloadEngine, DeviceOutOfMemoryIsReportedBeforeAnythingIsAllocated) {
  // Room for the working weights (4 x 576 bf16 = 4.5 KiB) but not the gradient buckets.
  auto device = CpuDevice(/*capacity=*/6000);
  LinearStack model(kLayers, kDim, DType::kBF16, 7);
  EngineOptions o = BaseOptions();
  o.weights_dtype = DType::kBF16;
  auto engine = OffloadEngine::Create(*device, model, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(engine.status().message().find("gradient bucket"), std::string::npos)
      << engine.status().message();
  EXPECT_EQ(device->DeviceMemory().in_use_bytes, 0u);
  EXPECT_EQ(device->PinnedMemory().in_use_bytes, 0u);
}

TEST(OffloadEngine, NvmeWithoutADirectoryIsAClearError) {
  auto device = CpuDevice();
  LinearStack model(kLayers, kDim, DType::kF32, 7);
  EngineOptions o = BaseOptions();
  o.offload = OffloadPlacement::kNvme;
  auto engine = OffloadEngine::Create(*device, model, o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("--nvme-path"), std::string::npos);
}

// A model whose forward enqueues slow work that reads the micro-batch, then
// fails (as the real model does when the engine's worker reports an error
// while the compute stream is still behind).
class FailsWithWorkEnqueued : public LinearStack {
 public:
  using LinearStack::LinearStack;
  Status ForwardBackward(Stream& compute, const MicroBatch& batch, float dloss_scale,
                         UnitAccess& access) override {
    const float* inputs = batch.dense_inputs;
    TF_RETURN_IF_ERROR(compute.HostCallback([this, inputs] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      read_ = inputs[0];
      done_.store(true);
      return Status::Ok();
    }));
    return DataLossError("the model failed mid-forward");
  }
  bool done() const { return done_.load(); }

 private:
  std::atomic<bool> done_{false};
  float read_ = 0;
};

// A failed step returns only once the compute stream has finished what the
// failed micro-batch enqueued: the caller may free the batch at once (under
// ASan, CI once caught a token copy reading a freed batch).
TEST(OffloadEngine, AFailedStepLeavesNoWorkThatReadsTheBatch) {
  auto device = CpuDevice();
  FailsWithWorkEnqueued model(kLayers, kDim, DType::kF32, 7);
  auto engine = OffloadEngine::Create(*device, model, BaseOptions());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto x = std::make_unique<std::vector<float>>(static_cast<size_t>(kDim), 1.0f);
  std::vector<float> y(static_cast<size_t>(kDim), 0.0f);
  MicroBatch mb;
  mb.dense_inputs = x->data();
  mb.dense_targets = y.data();
  mb.batch = 1;
  auto step = (*engine)->Step({mb});
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().code(), StatusCode::kDataLoss) << step.status().ToString();
  EXPECT_TRUE(model.done()) << "Step returned while the compute stream still read the batch";
  x.reset();  // the batch is the caller's again once Step returns
}

// The trace's spans ("X" events) as the trace file holds them, written and
// read back through io's WriteTraceFile.
std::vector<nlohmann::json> TraceSpans(const TraceRecorder& trace) {
  TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  EXPECT_TRUE(WriteTraceFile(trace, path).ok());
  std::vector<nlohmann::json> spans;
  const auto doc = nlohmann::json::parse(testing_common::ReadWholeFile(path));
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") spans.push_back(e);
  }
  return spans;
}

// The trace shows each stream's work as before events replaced the host
// callbacks: one compute span per micro-batch, one D2H span per unit and
// micro-batch, one H2D span per sub-group and step, none before the trace
// began or of negative length.
TEST(OffloadEngine, TraceHasASpanPerTransferAndMicroBatch) {
  TraceRecorder trace;
  trace.SetEnabled(true);
  EngineOptions o = BaseOptions();
  o.weights_dtype = DType::kBF16;
  o.trace = &trace;
  const RunResult r = Train(o, MakeData(2, 8, 9), /*micro_batches=*/2);
  ASSERT_EQ(r.stats.size(), 2u);
  std::map<std::string, int> spans;  // "track/name" -> count
  for (const auto& e : TraceSpans(trace)) {
    EXPECT_GE(e["dur"].get<int64_t>(), 0) << e.dump();
    EXPECT_GE(e["ts"].get<int64_t>(), 0) << e.dump();
    ++spans[e["cat"].get<std::string>() + "/" + e["name"].get<std::string>()];
  }
  EXPECT_EQ(spans["compute/fwd+bwd micro 0"], 2);
  EXPECT_EQ(spans["compute/fwd+bwd micro 1"], 2);
  for (int l = 0; l < kLayers; ++l) {
    const std::string unit = "linear." + std::to_string(l);
    EXPECT_EQ(spans["d2h/grads " + unit], 4) << unit;  // 2 steps x 2 micro-batches
    for (int g = 0; g < 3; ++g) {                      // 576 params in sub-groups of 200
      EXPECT_EQ(spans["h2d/weights " + unit + ".sg" + std::to_string(g)], 2) << unit;
    }
  }
}

// Sub-groups updated during backward (the model's last units) go up to the
// device with the rest, in forward order: the next forward needs the first
// units first, and uploading the committed ones ahead of them once held the
// first units' updates behind the H2D stream.
TEST(OffloadEngine, CommittedSpeculationGoesUpInForwardOrder) {
  TraceRecorder trace;
  trace.SetEnabled(true);
  EngineOptions o = BaseOptions();
  o.weights_dtype = DType::kBF16;
  o.speculate_eagerly = true;
  o.speculation_params = 1500;  // the last two layers and one more sub-group
  o.trace = &trace;
  const RunResult r = Train(o, MakeData(3, 8, 9));
  ASSERT_EQ(r.stats.size(), 3u);
  for (const StepStats& st : r.stats) EXPECT_EQ(st.speculated_groups, 7);
  // The order of the H2D spans in the trace is the order the uploads were
  // enqueued: spans of one stream are collected as they complete, and the
  // stream runs in order. (Their timestamps are not compared: each is timed
  // against its step's anchor, and an update overlapping the next step's
  // forward straddles two anchors, a few microseconds apart.)
  std::map<std::string, std::vector<size_t>> order;  // sub-group -> its place, per step
  size_t place = 0;
  for (const auto& e : TraceSpans(trace)) {
    if (e["cat"] == "h2d") order[e["name"].get<std::string>()].push_back(place++);
  }
  std::vector<std::string> forward;
  for (int l = 0; l < kLayers; ++l) {
    for (int g = 0; g < 3; ++g) {
      forward.push_back("weights linear." + std::to_string(l) + ".sg" + std::to_string(g));
    }
  }
  for (size_t step = 0; step < 3; ++step) {
    for (size_t i = 1; i < forward.size(); ++i) {
      ASSERT_EQ(order[forward[i]].size(), 3u) << forward[i];
      EXPECT_LT(order[forward[i - 1]][step], order[forward[i]][step])
          << "step " << step + 1 << ": " << forward[i - 1] << " went up after " << forward[i];
    }
  }
}

}  // namespace
}  // namespace tierflow
