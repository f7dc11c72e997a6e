// Gradients on the drives (EngineOptions::grad_offload kNvme): bit for bit
// the run whose gradients wait in host memory, with clipping on and off,
// fp16 loss-scale skips, one and several micro-batches, weights streamed from
// host and NVMe, both pipelines, and slots too few to keep anything (every
// gradient read back). Faults on the gradient files fail the step naming the
// sub-group, the file and what to do. UnitChunkSums gives GradStats' bits.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/linear_stack.h"

#include "engine/offload_engine.h"
#include "engine/unit_chunk_sums.h"
#include "offload/fault_injecting_backend.h"
#include "offload/io_uring_backend.h"

namespace tierflow {
namespace {
using testing_util::BaseOptions;
using testing_util::Data;
using testing_util::LinearStack;
using testing_util::MakeData;
using testing_util::RunResult;
using testing_util::Train;

// Options with the state on NVMe (buffered: tmpfs has no O_DIRECT).
EngineOptions NvmeState(const std::string& dir, int micro_batches) {
  EngineOptions o = BaseOptions();
  o.offload = OffloadPlacement::kNvme;
  o.nvme_paths = {dir};
  o.nvme_buffered = true;
  o.micro_batches_per_step = micro_batches;
  return o;
}

void ExpectSameRun(const RunResult& host, const RunResult& nvme) {
  ASSERT_FALSE(host.state.empty());
  EXPECT_EQ(host.state, nvme.state);
  EXPECT_EQ(host.device_weights, nvme.device_weights);
  ASSERT_EQ(host.stats.size(), nvme.stats.size());
  for (size_t i = 0; i < host.stats.size(); ++i) {
    EXPECT_EQ(host.stats[i].loss, nvme.stats[i].loss) << "step " << i;
    EXPECT_EQ(std::bit_cast<uint64_t>(host.stats[i].grad_norm),
              std::bit_cast<uint64_t>(nvme.stats[i].grad_norm))
        << "step " << i << ": " << host.stats[i].grad_norm << " vs " << nvme.stats[i].grad_norm;
    EXPECT_EQ(host.stats[i].clip_coef, nvme.stats[i].clip_coef) << "step " << i;
    EXPECT_EQ(host.stats[i].skipped, nvme.stats[i].skipped) << "step " << i;
    EXPECT_EQ(host.stats[i].rolled_back, nvme.stats[i].rolled_back) << "step " << i;
  }
}

// (micro-batches, clip, pipeline, slots)
using Case = std::tuple<int, float, Pipeline, int>;
class GradSpillTest : public testing::TestWithParam<Case> {};

TEST_P(GradSpillTest, GradientsOnNvmeEqualGradientsInHostMemory) {
  const auto [micro, clip, pipeline, slots] = GetParam();
  testing_common::ScratchDir dir("tierflow-grad-spill-");
  const Data data = MakeData(4, 8, 11);
  EngineOptions host = NvmeState(dir.path(), micro);
  host.clip_grad_norm = clip;
  host.pipeline = pipeline;
  host.speculate_eagerly = true;  // rollbacks redo from gradients read back
  host.pause_speculation_after_clip = false;
  EngineOptions nvme = host;
  nvme.grad_offload = GradOffload::kNvme;
  nvme.grad_spill_slots = slots;
  const RunResult a = Train(host, data, micro), b = Train(nvme, data, micro);
  ExpectSameRun(a, b);
  int clipped = 0;
  for (const StepStats& s : b.stats) clipped += s.clip_coef < 1.0f;
  if (clip > 0 && clip < 0.05f) {
    EXPECT_EQ(clipped, 4);
  }
  if (clip == 0) {
    EXPECT_EQ(clipped, 0);
  }
  // The gradients crossed the drive: written every micro-batch, read back
  // when the slots could not keep them (2 slots, 12 sub-groups).
  const uint64_t grad_bytes =
      4ull * testing_util::kLayers * testing_util::kDim * testing_util::kDim;  // fp32, per pass
  EXPECT_GE(b.finish.nvme_written_bytes - a.finish.nvme_written_bytes,
            grad_bytes * static_cast<uint64_t>(micro) * data.x.size());
  if (slots == 2) {
    EXPECT_GT(b.finish.nvme_read_bytes, a.finish.nvme_read_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GradSpillTest,
                         testing::Values(Case{1, 0.0f, Pipeline::kOverlapped, 2},
                                         Case{1, 0.01f, Pipeline::kOverlapped, 2},
                                         Case{1, 0.01f, Pipeline::kSynchronous, 4},
                                         Case{3, 0.0f, Pipeline::kOverlapped, 2},
                                         Case{3, 0.01f, Pipeline::kOverlapped, 2},
                                         Case{3, 0.01f, Pipeline::kSynchronous, 3},
                                         // Slots to spare: the update's read-ahead must not read a
                                         // gradient file before this step's write of it.
                                         Case{1, 0.0f, Pipeline::kSynchronous, 8},
                                         Case{2, 0.0f, Pipeline::kSynchronous, 8},
                                         Case{2, 0.5f, Pipeline::kOverlapped, 8}));

TEST(GradSpill, Bf16TransfersAndStreamedWeightsFromHostAndNvme) {
  for (ParamOffload where : {ParamOffload::kHost, ParamOffload::kNvme}) {
    for (int micro : {1, 2}) {
      testing_common::ScratchDir dir("tierflow-grad-spill-");
      const Data data = MakeData(3, 8, 12);
      EngineOptions host = NvmeState(dir.path(), micro);
      host.weights_dtype = DType::kBF16;
      host.clip_grad_norm = 0.02f;
      host.params.where = where;
      host.params.streamed_units = {0, 2};
      host.speculate_eagerly = true;  // deterministic speculation and rollbacks
      host.pause_speculation_after_clip = false;
      EngineOptions nvme = host;
      nvme.grad_offload = GradOffload::kNvme;
      nvme.grad_spill_slots = 2;
      SCOPED_TRACE(std::string(where == ParamOffload::kHost ? "host" : "nvme") + " weights, " +
                   std::to_string(micro) + " micro-batches");
      ExpectSameRun(Train(host, data, micro), Train(nvme, data, micro));
    }
  }
}

TEST(GradSpill, Fp16LossScaleSkipsStayIdentical) {
  for (int micro : {1, 2}) {
    testing_common::ScratchDir dir("tierflow-grad-spill-");
    const Data data = MakeData(5, 8, 13);
    EngineOptions host = NvmeState(dir.path(), micro);
    host.weights_dtype = DType::kF16;
    host.grad_transfer_dtype = DType::kF16;
    host.loss_scaler.initial_scale_power = 24;  // overflows at first: skipped steps
    host.loss_scaler.hysteresis = 1;
    host.speculate_eagerly = true;
    EngineOptions nvme = host;
    nvme.grad_offload = GradOffload::kNvme;
    nvme.grad_spill_slots = 2;
    const RunResult a = Train(host, data, micro), b = Train(nvme, data, micro);
    ExpectSameRun(a, b);
    int skipped = 0;
    for (const StepStats& s : b.stats) skipped += s.skipped;
    EXPECT_GT(skipped, 0) << micro << " micro-batches: no step overflowed";
    EXPECT_LT(skipped, 5) << micro << " micro-batches: every step overflowed";
  }
}

TEST(GradSpill, RefusesWhatItCannotServe) {
  auto device = testing_util::CpuDevice();
  LinearStack model(testing_util::kLayers, testing_util::kDim, DType::kF32, 7);
  testing_common::ScratchDir dir("tierflow-grad-spill-");
  auto refused = [&](EngineOptions o, const std::string& why) {
    o.grad_offload = GradOffload::kNvme;
    auto e = OffloadEngine::Create(*device, model, o);
    ASSERT_FALSE(e.ok()) << why;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(why), std::string::npos) << e.status().ToString();
  };
  refused(BaseOptions(), "the whole optimizer state on NVMe");
  EngineOptions split = NvmeState(dir.path(), 1);
  split.nvme_ratio = 0.5;
  refused(split, "the whole optimizer state on NVMe");
  refused(NvmeState(dir.path(), 0), "a fixed number of micro-batches");
  EngineOptions one_slot = NvmeState(dir.path(), 1);
  one_slot.grad_spill_slots = 1;
  refused(one_slot, "at least 2 gradient slots");
  EngineOptions automatic = NvmeState(dir.path(), 1);
  automatic.grad_offload = GradOffload::kAuto;
  auto e = OffloadEngine::Create(*device, model, automatic);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
}

// A failed gradient write or read fails the step, naming the sub-group, the
// swap file and what to do; nothing is silently dropped.
TEST(GradSpill, FaultsOnTheGradientFilesNameTheFileAndWhatToDo) {
  struct Fault {
    offload::FaultKind kind;
    offload::IoOpKind op;
    int error;
  };
  for (const Fault& f : {Fault{offload::FaultKind::kErrno, offload::IoOpKind::kWrite, EIO},
                         Fault{offload::FaultKind::kErrno, offload::IoOpKind::kWrite, ENOSPC},
                         Fault{offload::FaultKind::kShortTransfer, offload::IoOpKind::kWrite, 0},
                         Fault{offload::FaultKind::kErrno, offload::IoOpKind::kRead, EIO}}) {
    SCOPED_TRACE("fault kind " + std::to_string(static_cast<int>(f.kind)) + ", op " +
                 std::to_string(static_cast<int>(f.op)) + ", errno " + std::to_string(f.error));
    testing_common::ScratchDir dir("tierflow-grad-spill-");
    EngineOptions o = NvmeState(dir.path(), 2);
    o.grad_offload = GradOffload::kNvme;
    o.grad_spill_slots = 2;
    o.pipeline = Pipeline::kSynchronous;
    auto plan = std::make_shared<offload::FaultPlan>();
    // Every write and read of the run fails from the first step's on: the
    // initial state is written before (the plan is armed after Create).
    auto device = testing_util::CpuDevice();
    LinearStack model(testing_util::kLayers, testing_util::kDim, DType::kF32, 7);
    o.nvme_backend_factory =
        offload::FaultInjectingBackendFactory(plan, offload::IoUringBackendFactory());
    auto engine = OffloadEngine::Create(*device, model, o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    offload::FaultRule rule;
    rule.kind = f.kind;
    rule.op_kind = f.op;
    rule.error = f.error == 0 ? EIO : f.error;
    rule.count = 1u << 20;
    plan->Add(rule);
    const Data data = MakeData(1, 8, 14);
    std::vector<MicroBatch> mbs;
    for (int k = 0; k < 2; ++k) {
      mbs.push_back(MicroBatch{.dense_inputs = data.x[0].data() + k * 4 * testing_util::kDim,
                               .dense_targets = data.y[0].data() + k * 4 * testing_util::kDim,
                               .batch = 4});
    }
    auto st = (*engine)->Step(mbs);
    Status s = st.ok() ? (*engine)->Finish().status() : st.status();
    EXPECT_GT(plan->num_injected(), 0u);
    if (f.kind == offload::FaultKind::kShortTransfer) {
      // The I/O engine resubmits the rest of a short transfer until it is whole.
      EXPECT_TRUE(s.ok()) << s.ToString();
      continue;
    }
    ASSERT_FALSE(s.ok()) << "the fault went unnoticed; injected " << plan->num_injected();
    const std::string msg = s.ToString();
    EXPECT_NE(msg.find("gradient of sub-group"), std::string::npos) << msg;
    EXPECT_NE(msg.find(".swap"), std::string::npos) << msg;
    EXPECT_NE(msg.find("resume from the last checkpoint"), std::string::npos) << msg;
  }
}

TEST(UnitChunkSums, AnyCutInAnyOrderGivesGradStatsBits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (uint64_t n : {uint64_t{600}, uint64_t{16384}, uint64_t{50001}, uint64_t{3 * 16384 + 7}}) {
    std::vector<float> g(n);
    for (float& v : g) v = dist(rng);
    if (n == 50001) g[40000] = INFINITY;
    auto whole = GradStats(g.data(), DType::kF32, n);
    ASSERT_TRUE(whole.ok());
    // Random cuts, added in a shuffled order.
    std::vector<uint64_t> cuts = {0, n};
    for (int i = 0; i < 6; ++i)
      cuts.push_back(std::uniform_int_distribution<uint64_t>(1, n - 1)(rng));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<size_t> order(cuts.size() - 1);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    UnitChunkSums sums;
    sums.Reset(n);
    for (size_t k : order) {
      EXPECT_FALSE(sums.complete());
      ASSERT_TRUE(sums.Add(cuts[k], g.data() + cuts[k], cuts[k + 1] - cuts[k]).ok());
    }
    ASSERT_TRUE(sums.complete());
    const GradStatsResult r = sums.Result();
    EXPECT_EQ(r.has_non_finite, whole->has_non_finite) << n;
    if (!whole->has_non_finite) {
      EXPECT_EQ(r.sum_squares, whole->sum_squares) << n;  // bits, not tolerance
    } else {
      EXPECT_TRUE(std::isnan(r.sum_squares));
    }
    // A part added twice is refused.
    EXPECT_FALSE(sums.Add(0, g.data(), 1).ok());
  }
}

}  // namespace
}  // namespace tierflow
