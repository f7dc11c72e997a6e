// What crosses PCIe from the device: each unit's fp32 gradient bucket, cast
// on the device to the transfer dtype (EngineOptions::grad_transfer_dtype)
// and accumulated on the host in fp32. Checked against the engine's own
// arithmetic replayed on the host with the same library functions (so the
// comparison is bit for bit), against the fp32-transfer run within the
// tolerances the engine keeps against the fp32 reference, and through the
// D2H bytes each step reports.
#include <cmath>
#include <cstring>
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
  const SubGroupLayout layout = MakeSubGroups(units, o.sub_group_params);
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

}  // namespace
}  // namespace tierflow
