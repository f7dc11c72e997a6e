// The data-parallel engine, run by ctest under mpirun with 2, 3 and 4 ranks
// (and once over TCP on loopback). Each rank first trains the reference
// itself, one engine without a communicator accumulating all the global
// step's micro-batches, then the same steps as one of N ranks (one or two
// micro-batches each). Losses, gradient norms, clip coefficients, the working weights and
// this rank's part of the master weights and Adam moments must be the same
// bits: the reduce-scatter adds in rank order and the norm's chunk sums are
// put back in order (engine/data_parallel.cc). Any difference is a bug.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/host_memory_device_comm.h"
#include "comm/mpi_communicator.h"
#include "engine/master_weights.h"
#include "engine/offload_engine.h"
#include "tests/common/scratch_dir.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/linear_stack.h"

namespace tierflow {
namespace {

using testing_util::CpuDevice;
using testing_util::LinearStack;

comm::MpiCommunicator* g_comm = nullptr;
// The device-collective path on the CPU device: MPI over its memory.
comm::Communicator* g_device_comm = nullptr;

constexpr int kLayers = 3;

struct Steps {
  int d = 0;
  // Per step, per global micro-batch: (rows, d) inputs and targets.
  std::vector<std::vector<std::vector<float>>> x, y;
  int rows = 2;
};

Steps MakeSteps(int d, int steps, int micro_batches, uint32_t seed) {
  Steps s;
  s.d = d;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int t = 0; t < steps; ++t) {
    s.x.emplace_back();
    s.y.emplace_back();
    for (int k = 0; k < micro_batches; ++k) {
      std::vector<float> x(static_cast<size_t>(s.rows) * d), y(x.size());
      for (float& v : x) v = dist(rng);
      for (size_t i = 0; i < x.size(); ++i) y[i] = 0.5f * std::sin(x[i]);
      s.x.back().push_back(std::move(x));
      s.y.back().push_back(std::move(y));
    }
  }
  return s;
}

struct RunResult {
  std::vector<StepStats> stats;
  StepStats last;                     // Finish's: the last step's with its updates' uploads
  std::vector<float> device_weights;  // the whole model
  // Per unit, the whole unit's master / exp_avg / exp_avg_sq where this
  // engine holds them (NaN elsewhere).
  std::vector<std::vector<float>> master, exp_avg, exp_avg_sq;
  // Rank 0 (or the only rank): every unit's three arrays, whole, read
  // through StateRangeReader (data parallel: rank 0 reads, the others serve).
  std::vector<std::vector<float>> read_back;
};

RunResult Train(EngineOptions options, const Steps& steps, comm::Communicator* comm,
                comm::Communicator* device_comm = nullptr) {
  RunResult run;
  options.comm = comm;
  options.device_comm = device_comm;
  auto device = CpuDevice();
  LinearStack model(kLayers, steps.d, options.weights_dtype, 7);
  auto engine_or = OffloadEngine::Create(*device, model, options);
  EXPECT_TRUE(engine_or.ok()) << engine_or.status().ToString();
  if (!engine_or.ok()) return run;
  auto engine = std::move(engine_or).value();
  for (size_t t = 0; t < steps.x.size(); ++t) {
    std::vector<MicroBatch> mbs;
    for (size_t k = 0; k < steps.x[t].size(); ++k) {
      MicroBatch mb;
      mb.dense_inputs = steps.x[t][k].data();
      mb.dense_targets = steps.y[t][k].data();
      mb.batch = steps.rows;
      mbs.push_back(mb);
    }
    auto st = engine->Step(mbs);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (!st.ok()) return run;
    run.stats.push_back(*st);
  }
  auto fin = engine->Finish();
  EXPECT_TRUE(fin.ok()) << fin.status().ToString();
  if (fin.ok()) run.last = *fin;
  run.device_weights.resize(engine->model_params());
  EXPECT_TRUE(engine->ReadDeviceWeights(run.device_weights.data()).ok());
  const size_t unit = static_cast<size_t>(steps.d) * steps.d;
  for (auto* v : {&run.master, &run.exp_avg, &run.exp_avg_sq}) {
    v->assign(kLayers, std::vector<float>(unit, NAN));
  }
  const SubGroupLayout& layout = engine->layout();
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    const SubGroup& sg = layout.groups[g];
    EXPECT_TRUE(engine
                    ->ReadState(static_cast<int>(g), run.master[sg.unit].data() + sg.unit_offset,
                                run.exp_avg[sg.unit].data() + sg.unit_offset,
                                run.exp_avg_sq[sg.unit].data() + sg.unit_offset)
                    .ok());
  }
  StateRangeReader reader(*engine);
  if (engine->rank() == 0) {
    for (int u = 0; u < kLayers; ++u) {
      for (auto array : {StateRangeReader::Array::kMaster, StateRangeReader::Array::kExpAvg,
                         StateRangeReader::Array::kExpAvgSq}) {
        run.read_back.emplace_back(unit);
        // Two reads per array, the first ending mid-part, as a writer's buffer would.
        const uint64_t first = unit / 3 + 5;
        EXPECT_TRUE(reader.Read(u, array, 0, first, run.read_back.back().data()).ok());
        EXPECT_TRUE(
            reader.Read(u, array, first, unit - first, run.read_back.back().data() + first).ok());
      }
    }
    EXPECT_TRUE(StateRangeReader::EndServing(*engine).ok());
  } else {
    EXPECT_TRUE(reader.Serve().ok());
  }
  return run;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The data-parallel run against the reference, bit for bit; counts what this rank held.
void ExpectIdentical(const RunResult& ref, const RunResult& dp) {
  ASSERT_EQ(ref.stats.size(), dp.stats.size());
  for (size_t t = 0; t < ref.stats.size(); ++t) {
    SCOPED_TRACE("step " + std::to_string(t + 1));
    EXPECT_TRUE(SameBits(ref.stats[t].loss, dp.stats[t].loss))
        << ref.stats[t].loss << " vs " << dp.stats[t].loss;
    EXPECT_EQ(ref.stats[t].grad_norm, dp.stats[t].grad_norm);
    EXPECT_TRUE(SameBits(ref.stats[t].clip_coef, dp.stats[t].clip_coef));
    EXPECT_EQ(ref.stats[t].skipped, dp.stats[t].skipped);
    EXPECT_EQ(ref.stats[t].step, dp.stats[t].step);
  }
  ASSERT_EQ(ref.device_weights.size(), dp.device_weights.size());
  size_t differ = 0;
  for (size_t i = 0; i < ref.device_weights.size(); ++i) {
    differ += SameBits(ref.device_weights[i], dp.device_weights[i]) ? 0 : 1;
  }
  EXPECT_EQ(differ, 0u) << "working weights differing from the reference";
  size_t held = 0, state_differ = 0;
  for (size_t u = 0; u < dp.master.size(); ++u) {
    for (size_t i = 0; i < dp.master[u].size(); ++i) {
      if (std::isnan(dp.master[u][i])) continue;
      ++held;
      state_differ += SameBits(ref.master[u][i], dp.master[u][i]) &&
                              SameBits(ref.exp_avg[u][i], dp.exp_avg[u][i]) &&
                              SameBits(ref.exp_avg_sq[u][i], dp.exp_avg_sq[u][i])
                          ? 0
                          : 1;
    }
  }
  EXPECT_EQ(state_differ, 0u) << "of " << held << " held parameters";
  if (g_comm->rank() == 0) {
    ASSERT_EQ(ref.read_back.size(), dp.read_back.size());
    for (size_t a = 0; a < ref.read_back.size(); ++a) {
      EXPECT_EQ(std::memcmp(ref.read_back[a].data(), dp.read_back[a].data(),
                            ref.read_back[a].size() * sizeof(float)),
                0)
          << "array " << a << " read through rank 0";
    }
  }
}

// The options every case starts from: bf16 weights and transfers, AdamW,
// sub-groups smaller than a rank's part, speculation on part of the model.
EngineOptions Base(int world) {
  EngineOptions o;
  o.weights_dtype = DType::kBF16;
  o.adam.lr = 1e-2f;
  o.adam.weight_decay = 0.01f;
  o.sub_group_params = 20000;
  o.speculation_params = 100000;
  o.micro_batches_per_step = world;
  return o;
}

// The whole comparison: the reference on this rank, then the run across
// ranks (with `on_device`, its gradients and weights collected on the devices).
RunResult Compare(const EngineOptions& options, int d, int steps, bool on_device = false) {
  const int world = g_comm->world_size();
  const Steps data = MakeSteps(d, steps, options.micro_batches_per_step, 11);
  const RunResult ref = Train(options, data, nullptr);
  const RunResult dp = Train(options, data, g_comm, on_device ? g_device_comm : nullptr);
  ExpectIdentical(ref, dp);
  // Every parameter is held by exactly one rank: count them over the ranks.
  uint64_t held = 0;
  for (const auto& unit : dp.master) {
    for (float v : unit) held += std::isnan(v) ? 0 : 1;
  }
  std::vector<uint64_t> all(static_cast<size_t>(world));
  auto part = comm::Partition::Even(static_cast<size_t>(world), world, 1);
  EXPECT_TRUE(part.ok() && g_comm->AllGather(&held, sizeof held, *part, all.data()).ok());
  uint64_t total = 0;
  for (uint64_t h : all) total += h;
  EXPECT_EQ(total, static_cast<uint64_t>(kLayers) * d * d);
  return dp;
}

TEST(DataParallel, OneMicroBatchPerRankIsOneRankAccumulatingBitForBit) {
  // 400 x 400 units: ten norm chunks, cut into parts of every size.
  Compare(Base(g_comm->world_size()), 400, 4);
}

TEST(DataParallel, ClippingAndRollbackAndGradientPiecesStayIdentical) {
  EngineOptions o = Base(g_comm->world_size());
  o.clip_grad_norm = 0.05f;  // clips: speculation rolled back, then paused
  o.pause_speculation_after_clip = false;
  o.speculate_eagerly = true;    // speculation (and so the rollback) whatever the timing
  o.grad_bucket_params = 30000;  // each unit arrives in pieces
  const RunResult dp = Compare(o, 400, 4);
  int clipped = 0, rolled_back = 0;
  for (const StepStats& st : dp.stats) {
    clipped += st.clip_coef < 1.0f ? 1 : 0;
    rolled_back += st.rolled_back ? 1 : 0;
  }
  EXPECT_GT(clipped, 0);
  EXPECT_GT(rolled_back, 0);
}

TEST(DataParallel, NvmeTierSynchronousAndEmptyPartsStayIdentical) {
  // 300 x 300 units: six chunks, so at 4 ranks the last rank holds nothing.
  testing_common::ScratchDir dir("tierflow-dp-");
  EngineOptions o = Base(g_comm->world_size());
  o.offload = OffloadPlacement::kNvme;
  o.nvme_ratio = 0.5;
  o.nvme_paths = {dir.path()};
  o.nvme_buffered = true;
  o.run_id = "dp-test-rank" + std::to_string(g_comm->rank());
  o.pipeline = Pipeline::kSynchronous;
  Compare(o, 300, 3);
}

TEST(DataParallel, Fp32WeightsAndTransfersStayIdentical) {
  EngineOptions o = Base(g_comm->world_size());
  o.weights_dtype = DType::kF32;
  Compare(o, 400, 3);
}

TEST(DataParallel, SeveralMicroBatchesPerRankAreBitIdenticalToo) {
  // Each micro-batch is summed over the ranks as it comes, continuing one
  // running sum in the global order: 2 per rank at N ranks is one rank
  // accumulating 2N (and so is N/2 ranks with 4: resumes across world sizes).
  EngineOptions o = Base(g_comm->world_size());
  o.micro_batches_per_step = 2 * g_comm->world_size();
  o.grad_bucket_params = 50000;  // pieces gathered for each micro-batch's reduce-scatter
  Compare(o, 400, 3);
}

// Gradients on the drives (grad_offload nvme): each rank's part of every
// unit's running sum goes through its spill's slots to its own swap set, and
// the ranks' run is bit-identical to one process keeping its gradients in
// host memory; one micro-batch per rank and several, clipping with rollback.
TEST(DataParallel, GradientsOnNvmeEqualOneRankWithGradientsInHostMemory) {
  for (int per_rank : {1, 2}) {
    testing_common::ScratchDir dir("tierflow-dp-grads-");
    EngineOptions host = Base(g_comm->world_size());
    host.micro_batches_per_step = per_rank * g_comm->world_size();
    host.offload = OffloadPlacement::kNvme;
    host.nvme_paths = {dir.path()};
    host.nvme_buffered = true;
    host.clip_grad_norm = 0.05f;
    host.pause_speculation_after_clip = false;
    host.speculate_eagerly = true;
    host.grad_bucket_params = 30000;  // pieces gathered per unit
    host.run_id = "dp-grads-ref-rank" + std::to_string(g_comm->rank());
    EngineOptions nvme = host;
    nvme.grad_offload = GradOffload::kNvme;
    nvme.grad_spill_slots = 2;  // fewer than a part's sub-groups: sums come back from the drive
    nvme.run_id = "dp-grads-rank" + std::to_string(g_comm->rank());
    const Steps data = MakeSteps(400, 3, host.micro_batches_per_step, 12);
    const RunResult ref = Train(host, data, nullptr);
    const RunResult dp = Train(nvme, data, g_comm);
    SCOPED_TRACE(std::to_string(per_rank) + " micro-batches per rank");
    ExpectIdentical(ref, dp);
    int clipped = 0;
    for (const StepStats& st : dp.stats) clipped += st.clip_coef < 1.0f ? 1 : 0;
    EXPECT_GT(clipped, 0);
  }
}

// A stop asked for on one rank reaches every rank with the same step, by
// the step's own all-gather.
TEST(DataParallel, AStopOnOneRankIsSeenByAllAtTheSameStep) {
  const int world = g_comm->world_size();
  const Steps data = MakeSteps(64, 3, world, 3);
  auto device = CpuDevice();
  LinearStack model(kLayers, 64, DType::kBF16, 7);
  EngineOptions o = Base(world);
  o.comm = g_comm;
  auto engine = OffloadEngine::Create(*device, model, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<bool> seen;
  for (size_t t = 0; t < data.x.size(); ++t) {
    std::vector<MicroBatch> mbs;
    for (size_t k = 0; k < data.x[t].size(); ++k) {
      mbs.push_back(MicroBatch{.dense_inputs = data.x[t][k].data(),
                               .dense_targets = data.y[t][k].data(),
                               .batch = data.rows});
    }
    (*engine)->SetStopRequested(t == 1 && g_comm->rank() == world - 1);
    auto st = (*engine)->Step(mbs);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    seen.push_back(st->stop_requested);
  }
  EXPECT_EQ(seen, (std::vector<bool>{false, true, false}));
  EXPECT_TRUE((*engine)->Finish().ok());
}

// Parameter offload across ranks: every rank streams the same units
// through its ring; each unit's all-gather lands in its copy (host, or the
// NVMe write-back buffer), which the next fetch uploads.
TEST(DataParallel, StreamedWeightsFromHostStayIdentical) {
  EngineOptions o = Base(g_comm->world_size());
  o.params.where = ParamOffload::kHost;
  o.params.streamed_units = {0, 2};
  o.clip_grad_norm = 0.05f;  // clips, so speculated updates of streamed units roll back
  o.pause_speculation_after_clip = false;
  o.speculate_eagerly = true;
  o.micro_batches_per_step = 2 * g_comm->world_size();
  const RunResult dp = Compare(o, 400, 4);
  int rolled_back = 0;
  for (const StepStats& st : dp.stats) rolled_back += st.rolled_back ? 1 : 0;
  EXPECT_GT(rolled_back, 0);
}

TEST(DataParallel, StreamedWeightsFromNvmeStayIdentical) {
  testing_common::ScratchDir dir("tierflow-dp-params-");
  EngineOptions o = Base(g_comm->world_size());
  o.params.where = ParamOffload::kNvme;
  o.params.streamed_units = {1};
  o.params.device_slots = 3;
  o.params.prefetch_depth = 2;
  o.nvme_paths = {dir.path()};
  o.nvme_buffered = true;
  // Each rank's own swap set, as train names them.
  o.run_id = "dp-params-rank" + std::to_string(g_comm->rank());
  Compare(o, 300, 3);
}

// Device collectives: each piece of a unit's gradient is summed over the
// ranks where it is (MPI over the CPU device's memory here, NCCL on GPUs)
// and only this rank's part crosses to the host, once per step; a resident
// unit's new weights go up as this rank's part and are gathered on the
// devices. Same bits as one process, and the traffic says which path ran.
void ExpectDeviceTraffic(const RunResult& dp, const EngineOptions& o, int d,
                         const std::vector<int>& streamed) {
  const int world = g_comm->world_size();
  const uint64_t unit = static_cast<uint64_t>(d) * d;
  auto part = comm::Partition::Even(unit, world, kGradStatsChunkElems);
  ASSERT_TRUE(part.ok());
  const uint64_t mine = part->size(g_comm->rank());
  const uint64_t resident = kLayers - streamed.size();
  // fp32 sums of this rank's parts: 4 bytes each, against 2 per parameter
  // of the whole model per micro-batch on the host path.
  for (const StepStats& st : dp.stats) EXPECT_EQ(st.d2h_bytes, kLayers * mine * 4);
  // The last step's uploads: this rank's part of each resident unit, and
  // whole streamed units (the ring's fetches, as many as it needed).
  ASSERT_FALSE(dp.last.skipped);
  const uint64_t wbytes = DTypeSize(o.weights_dtype);
  const uint64_t parts = resident * mine * wbytes;
  ASSERT_GE(dp.last.h2d_bytes, parts + streamed.size() * unit * wbytes);
  EXPECT_EQ((dp.last.h2d_bytes - parts) % (unit * wbytes), 0u);
  if (streamed.empty()) {
    EXPECT_EQ(dp.last.h2d_bytes, parts);
  }
}

TEST(DataParallel, DeviceCollectivesWithClippingRollbackAndPiecesStayIdentical) {
  EngineOptions o = Base(g_comm->world_size());
  o.clip_grad_norm = 0.05f;
  o.pause_speculation_after_clip = false;
  o.speculate_eagerly = true;
  o.grad_bucket_params = 30000;  // pieces cut across the ranks' parts
  const RunResult dp = Compare(o, 400, 4, /*on_device=*/true);
  int rolled_back = 0;
  for (const StepStats& st : dp.stats) rolled_back += st.rolled_back ? 1 : 0;
  EXPECT_GT(rolled_back, 0);
  ExpectDeviceTraffic(dp, o, 400, {});
}

TEST(DataParallel, DeviceCollectivesAccumulateOnTheDeviceBitForBit) {
  // Two micro-batches per rank: the running sum over ranks and micro-batches
  // stays on the device; streamed units (host copy) and the NVMe tier beside it.
  testing_common::ScratchDir dir("tierflow-dp-device-");
  EngineOptions o = Base(g_comm->world_size());
  o.micro_batches_per_step = 2 * g_comm->world_size();
  o.grad_bucket_params = 50000;
  o.params.where = ParamOffload::kHost;
  o.params.streamed_units = {1};
  o.offload = OffloadPlacement::kNvme;
  o.nvme_ratio = 0.5;
  o.nvme_paths = {dir.path()};
  o.nvme_buffered = true;
  o.run_id = "dp-device-rank" + std::to_string(g_comm->rank());
  const RunResult dp = Compare(o, 300, 3, /*on_device=*/true);
  ExpectDeviceTraffic(dp, o, 300, {1});
}

TEST(DataParallel, DeviceCollectivesFp32StayIdentical) {
  EngineOptions o = Base(g_comm->world_size());
  o.weights_dtype = DType::kF32;
  const RunResult dp = Compare(o, 400, 3, /*on_device=*/true);
  ExpectDeviceTraffic(dp, o, 400, {});
}

TEST(DataParallel, RefusesWhatItCannotShare) {
  const int world = g_comm->world_size();
  auto device = CpuDevice();
  LinearStack model(kLayers, 64, DType::kBF16, 7);
  EngineOptions o = Base(world);
  o.comm = g_comm;
  auto expect_refused = [&](const std::string& why) {
    auto engine = OffloadEngine::Create(*device, model, o);
    ASSERT_FALSE(engine.ok()) << why;
    EXPECT_NE(engine.status().message().find(why), std::string::npos) << engine.status().ToString();
  };
  o.micro_batches_per_step = world + 1;  // not a multiple of the world size
  expect_refused("multiple of the world size");
  // Steps of any number of micro-batches could not be shared out evenly.
  o.micro_batches_per_step = 0;
  expect_refused("micro_batches_per_step fixed");
  // Device collectives need the host ones beside them, and over device buffers.
  o.micro_batches_per_step = world;
  o.comm = nullptr;
  o.device_comm = g_device_comm;
  expect_refused("device_comm without comm");
  o.comm = g_comm;
  o.device_comm = g_comm;
  expect_refused("not over device buffers");
  // And no device communicator for a CUDA device's memory from MPI.
  auto cuda = comm::HostMemoryDeviceComm::Create(*g_comm, DeviceKind::kCuda);
  ASSERT_FALSE(cuda.ok());
  EXPECT_NE(cuda.status().message().find("need NCCL"), std::string::npos);
}

}  // namespace
}  // namespace tierflow

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto launch = tierflow::comm::DetectLaunch(tierflow::comm::ProcessEnv());
  if (!launch.ok() || !launch->has_value()) {
    std::fprintf(stderr, "data_parallel_test: run it under mpirun (%s)\n",
                 launch.ok() ? "no launcher environment" : launch.status().message().c_str());
    return 2;
  }
  auto comm = tierflow::comm::MpiCommunicator::Create(**launch);
  if (!comm.ok()) {
    std::fprintf(stderr, "data_parallel_test: %s\n", comm.status().message().c_str());
    return 1;
  }
  if ((*comm)->world_size() < 2) {
    std::fprintf(stderr, "data_parallel_test: needs 2 or more ranks\n");
    return 2;
  }
  tierflow::g_comm = comm->get();
  auto device_comm =
      tierflow::comm::HostMemoryDeviceComm::Create(**comm, tierflow::DeviceKind::kCpu);
  if (!device_comm.ok()) {
    std::fprintf(stderr, "data_parallel_test: %s\n", device_comm.status().message().c_str());
    return 1;
  }
  tierflow::g_device_comm = device_comm->get();
  const int rc = RUN_ALL_TESTS();
  tierflow::g_device_comm = nullptr;
  device_comm->reset();
  tierflow::g_comm = nullptr;
  comm->reset();
  return rc;
}
