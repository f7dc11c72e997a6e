// What crosses PCIe from the device: each unit's fp32 gradient bucket, cast
// on the device to the transfer dtype (EngineOptions::grad_transfer_dtype)
// and accumulated on the host in fp32. Checked against the engine's own
// arithmetic replayed on the host with the same library functions (so the
// comparison is bit for bit), against the fp32-transfer run within the
// tolerances the engine keeps against the fp32 reference, and through the
// D2H bytes each step reports.
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "engine/offload_engine.h"
#include "engine/sub_groups.h"
#include "optim/adam.h"
#include "optim/grad_stats.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/linear_stack.h"

namespace tierflow {
namespace {

using testing_util::BaseOptions;
using testing_util::Data;
using testing_util::kDim;
using testing_util::kLayers;
using testing_util::LinearStack;
using testing_util::LinearStackForwardBackward;
using testing_util::MakeData;
using testing_util::RunResult;
using testing_util::Train;

// The engine's step replayed on the host, one micro-batch per step, no
// overflow: the working weights as the device holds them, the model's fp32
// gradients in a zeroed bucket, cast to `transfer` (what crosses PCIe),
// accumulated and summed per unit as the worker does, the clip rule, and
// AdamW per sub-group writing the new working weights.
struct Replay {
  std::vector<float> state;           // as RunResult::state
  std::vector<float> device_weights;  // as RunResult::device_weights
  std::vector<double> grad_norms;     // per step
};

Replay ReplayOnHost(const EngineOptions& o, const Data& data, DType transfer) {
  Replay out;
  LinearStack model(kLayers, kDim, o.weights_dtype, 7);
  const std::vector<UnitInfo> units = model.Units();
  const SubGroupLayout layout =
      MakeSubGroups(units, SubGroupRule{o.sub_group_cut, o.sub_group_params}).value();
  const size_t total = layout.total_params, wb = DTypeSize(o.weights_dtype);
  std::vector<float> master(total), m(total, 0.0f), v(total, 0.0f), acc(total);
  for (size_t u = 0; u < units.size(); ++u) {
    EXPECT_TRUE(
        model.InitialWeights(static_cast<int>(u), master.data() + layout.unit_offsets[u]).ok());
  }
  std::vector<char> weights(total * wb);
  ConvertBuffer(DType::kF32, master.data(), o.weights_dtype, weights.data(), total);
  const float loss_scale =
      o.weights_dtype == DType::kF16 ? std::ldexp(1.0f, o.loss_scaler.initial_scale_power) : 1.0f;
  for (size_t s = 0; s < data.x.size(); ++s) {
    std::vector<float> w(total), g(total, 0.0f);
    ConvertBuffer(o.weights_dtype, weights.data(), DType::kF32, w.data(), total);
    std::vector<const float*> wp;
    std::vector<float*> gp;
    for (size_t u = 0; u < units.size(); ++u) {
      wp.push_back(w.data() + layout.unit_offsets[u]);
      gp.push_back(g.data() + layout.unit_offsets[u]);
    }
    const int batch = static_cast<int>(data.x[s].size()) / kDim;
    LinearStackForwardBackward(wp, data.x[s].data(), data.y[s].data(), batch, kDim, loss_scale, gp);
    double sum_squares = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      const size_t n = units[u].num_params, off = layout.unit_offsets[u];
      std::vector<float> bucket(n, 0.0f);  // zeroed, then the model adds into it
      for (size_t i = 0; i < n; ++i) bucket[i] += g[off + i];
      std::vector<char> wire(n * DTypeSize(transfer));
      ConvertBuffer(DType::kF32, bucket.data(), transfer, wire.data(), n);
      auto st = AccumulateGradsWithStats(acc.data() + off, wire.data(), transfer, n, true);
      EXPECT_TRUE(st.ok() && !st->has_non_finite);
      sum_squares += st->sum_squares;  // unit order, as the engine's decision
    }
    const double norm = std::sqrt(sum_squares) / loss_scale;
    out.grad_norms.push_back(norm);
    float coef = 1.0f;
    if (o.clip_grad_norm > 0 && norm > o.clip_grad_norm) {
      coef = static_cast<float>(o.clip_grad_norm / (norm + 1e-6));
    }
    AdamStepArgs args;
    args.step = static_cast<int64_t>(s) + 1;
    args.grad_scale = coef / loss_scale;
    for (const SubGroup& sg : layout.groups) {
      OptimSpans spans;
      spans.params = master.data() + sg.global_offset;
      spans.exp_avg = m.data() + sg.global_offset;
      spans.exp_avg_sq = v.data() + sg.global_offset;
      spans.grads = acc.data() + sg.global_offset;
      spans.grad_dtype = DType::kF32;
      spans.out = weights.data() + sg.global_offset * wb;
      spans.out_dtype = o.weights_dtype;
      spans.n = sg.num_params;
      EXPECT_TRUE(AdamStep(o.adam, args, spans).ok());
    }
  }
  for (const SubGroup& sg : layout.groups) {
    for (const std::vector<float>* part : {&master, &m, &v}) {
      out.state.insert(out.state.end(), part->begin() + sg.global_offset,
                       part->begin() + sg.global_offset + sg.num_params);
    }
  }
  out.device_weights.resize(total);
  ConvertBuffer(o.weights_dtype, weights.data(), DType::kF32, out.device_weights.data(), total);
  return out;
}

void ExpectSameRun(const RunResult& r, const Replay& replay) {
  ASSERT_EQ(r.stats.size(), replay.grad_norms.size());
  for (size_t s = 0; s < r.stats.size(); ++s) {
    EXPECT_FALSE(r.stats[s].skipped) << "step " << s;
    EXPECT_EQ(r.stats[s].grad_norm, replay.grad_norms[s]) << "step " << s;
  }
  EXPECT_TRUE(r.state == replay.state);
  EXPECT_TRUE(r.device_weights == replay.device_weights);
}

// fp32 transfer is the engine as it was before the cast: the model's fp32
// gradients reach the accumulator unchanged, with and without clipping,
// through both pipelines.
TEST(GradTransfer, Fp32TransferIsTheReplayBitForBit) {
  Data data = MakeData(4, 8, 11);
  for (const DType weights : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const float clip : {0.0f, 0.05f}) {
      for (const Pipeline pipeline : {Pipeline::kOverlapped, Pipeline::kSynchronous}) {
        SCOPED_TRACE(std::string(DTypeName(weights)) + " clip " + std::to_string(clip) +
                     (pipeline == Pipeline::kOverlapped ? " overlapped" : " sync"));
        EngineOptions o = BaseOptions();
        o.weights_dtype = weights;
        o.grad_transfer_dtype = DType::kF32;
        o.clip_grad_norm = clip;
        o.pipeline = pipeline;
        RunResult r = Train(o, data);
        ExpectSameRun(r, ReplayOnHost(o, data, DType::kF32));
        int clipped = 0;
        for (const StepStats& st : r.stats) clipped += st.clip_coef < 1.0f;
        EXPECT_EQ(clipped > 0, clip > 0);
      }
    }
  }
}

// 16-bit transfer: the model's fp32 gradients are rounded once per unit
// (round to nearest even, as the Cast op does) and nothing else changes.
TEST(GradTransfer, SixteenBitTransferIsTheReplayBitForBit) {
  Data data = MakeData(4, 8, 12);
  struct Case {
    DType weights;
    std::optional<DType> transfer;  // unset: the default
    DType expected;
  };
  for (const Case& c :
       {Case{DType::kBF16, std::nullopt, DType::kBF16},
        Case{DType::kF16, std::nullopt, DType::kF16}, Case{DType::kF16, DType::kBF16, DType::kBF16},
        Case{DType::kF32, DType::kBF16, DType::kBF16}}) {
    for (const float clip : {0.0f, 0.05f}) {
      SCOPED_TRACE(std::string(DTypeName(c.weights)) + " weights, " +
                   std::string(DTypeName(c.expected)) + " transfer, clip " + std::to_string(clip));
      EngineOptions o = BaseOptions();
      o.weights_dtype = c.weights;
      o.grad_transfer_dtype = c.transfer;
      o.clip_grad_norm = clip;
      const RunResult r = Train(o, data);
      ExpectSameRun(r, ReplayOnHost(o, data, c.expected));
      // And it is not the fp32-transfer run: the rounding took place.
      EXPECT_FALSE(r.state == ReplayOnHost(o, data, DType::kF32).state);
    }
  }
}

// bf16 transfer against fp32 transfer, 6 steps of AdamW at lr 1e-2. The
// engine's fp32 tolerance against the double-precision reference (2e-5 +
// 1e-4 |w| on the masters) is for fp32 rounding; rounding each gradient to
// bf16 (relative error <= 2^-9) moves Adam's normalized update m / sqrt(v)
// by at most ~2^-7 of the learning rate per step, so the masters may differ
// by up to steps x lr x 2^-7 (measured: under half of that; 4 and 10 times
// the fp32 tolerance), the working weights by that and one more bf16 ulp,
// and the losses by under 0.1%.
TEST(GradTransfer, Bf16TransferStaysCloseToFp32Transfer) {
  Data data = MakeData(6, 8, 1);
  for (const DType weights : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(weights));
    EngineOptions o = BaseOptions();
    o.weights_dtype = weights;
    o.grad_transfer_dtype = DType::kF32;
    const RunResult f32 = Train(o, data);
    o.grad_transfer_dtype = DType::kBF16;
    const RunResult bf16 = Train(o, data);
    ASSERT_EQ(f32.stats.size(), 6u);
    ASSERT_EQ(bf16.stats.size(), 6u);
    ASSERT_EQ(f32.state.size(), bf16.state.size());
    const double bound = 6 * o.adam.lr * std::ldexp(1.0, -7);
    size_t pos = 0;
    const SubGroupLayout layout = MakeSubGroups(LinearStack(kLayers, kDim, weights, 7).Units(),
                                                SubGroupRule{o.sub_group_cut, o.sub_group_params})
                                      .value();
    for (const SubGroup& sg : layout.groups) {
      for (size_t i = 0; i < sg.num_params; ++i) {  // the masters: each record's first third
        ASSERT_NEAR(bf16.state[pos + i], f32.state[pos + i], bound) << sg.name << " " << i;
      }
      pos += 3 * sg.num_params;
    }
    // The working weights are the masters rounded: at most one more bf16 ulp apart.
    for (size_t i = 0; i < f32.device_weights.size(); ++i) {
      const float want = f32.device_weights[i];
      const double ulp = weights == DType::kBF16 ? std::ldexp(1.0, std::ilogb(want) - 7) : 0.0;
      ASSERT_NEAR(bf16.device_weights[i], want, bound + ulp) << i;
    }
    for (size_t s = 0; s < f32.stats.size(); ++s) {
      EXPECT_NEAR(bf16.stats[s].loss, f32.stats[s].loss, 1e-3 * f32.stats[s].loss) << s;
    }
  }
}

// What crosses PCIe each step: every micro-batch's gradients, in the transfer
// dtype: 2 B/param in 16 bits, 4 in fp32; with one micro-batch, also each
// unit's statistics, computed on the device (16 bytes a unit).
TEST(GradTransfer, D2hBytesPerStepAreThoseOfTheTransferDtype) {
  Data data = MakeData(2, 8, 13);
  const uint64_t params = static_cast<uint64_t>(kLayers) * kDim * kDim;
  for (const std::optional<DType> transfer :
       {std::optional<DType>(), std::optional<DType>(DType::kBF16),
        std::optional<DType>(DType::kF32)}) {
    for (const int micro_batches : {1, 2}) {
      EngineOptions o = BaseOptions();
      o.weights_dtype = DType::kBF16;
      o.grad_transfer_dtype = transfer;
      const uint64_t bytes_per_param = transfer == DType::kF32 ? 4 : 2;
      SCOPED_TRACE(std::to_string(bytes_per_param) + " B/param, " + std::to_string(micro_batches) +
                   " micro-batches");
      const RunResult r = Train(o, data, micro_batches);
      ASSERT_EQ(r.stats.size(), 2u);
      for (const StepStats& st : r.stats) {
        const uint64_t stats = micro_batches == 1 ? kLayers * sizeof(GradSquares) : 0;
        EXPECT_EQ(st.d2h_bytes, micro_batches * params * bytes_per_param + stats);
      }
    }
  }
}

// fp16 weights: the loss scale applies to the gradients before the cast, and
// a gradient beyond fp16's range (finite in the fp32 bucket) becomes Inf in
// the cast: the host sees it, the step is skipped and the scale lowered,
// exactly as for a non-finite fp32 gradient. fp32 transfer carries it.
TEST(GradTransfer, Fp16CastOverflowIsDetectedAndSkipsTheStep) {
  Data data = MakeData(1, 8, 14);
  std::vector<float> large = data.y[0];
  for (float& v : large) v *= 400.0f;  // loss gradients near 1e5 at scale 2^16
  MicroBatch mb{.dense_inputs = data.x[0].data(), .dense_targets = large.data(), .batch = 8};
  for (const DType transfer : {DType::kF16, DType::kF32}) {
    SCOPED_TRACE(DTypeName(transfer));
    EngineOptions o = BaseOptions();
    o.weights_dtype = DType::kF16;
    o.grad_transfer_dtype = transfer;
    o.loss_scaler.hysteresis = 1;
    auto device = testing_util::CpuDevice();
    LinearStack model(kLayers, kDim, DType::kF16, 7);
    auto engine = OffloadEngine::Create(*device, model, o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto st = (*engine)->Step({mb});
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(st->loss_scale, 65536.0f);
    ASSERT_TRUE((*engine)->Finish().ok());
    if (transfer == DType::kF16) {
      EXPECT_TRUE(st->skipped);
      EXPECT_EQ((*engine)->loss_scaler_state().scale, 32768.0f);
    } else {
      EXPECT_FALSE(st->skipped);
      EXPECT_TRUE(std::isfinite(st->grad_norm));
      EXPECT_GT(st->grad_norm * st->loss_scale, 65504.0);  // beyond fp16 somewhere
    }
  }
}

TEST(GradTransfer, Fp16TransferWithoutFp16WeightsIsRefused) {
  for (const DType weights : {DType::kBF16, DType::kF32}) {
    EngineOptions o = BaseOptions();
    o.weights_dtype = weights;
    o.grad_transfer_dtype = DType::kF16;
    auto device = testing_util::CpuDevice();
    LinearStack model(kLayers, kDim, weights, 7);
    auto engine = OffloadEngine::Create(*device, model, o);
    ASSERT_FALSE(engine.ok());
    EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(engine.status().message().find("grad_transfer_dtype: fp16 gradient transfer needs "
                                             "fp16 weights"),
              std::string::npos)
        << engine.status().ToString();
  }
}

}  // namespace
}  // namespace tierflow
