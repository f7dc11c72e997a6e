// The engine's device-collective path in one process (CI's TSan runs it):
// a world of one (comm::SelfCommunicator) with MPI-style collectives over
// the CPU device's memory. Each gradient piece is summed "on the device"
// by the worker, once the compute stream's callback hands it over, and
// crosses as this rank's fp32 part; the weights go up as the part and are
// gathered in place. The plain engine's bits, step for step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "comm/host_memory_device_comm.h"
#include "comm/self_communicator.h"
#include "engine/offload_engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/linear_stack.h"

namespace tierflow {
namespace {

using testing_util::CpuDevice;
using testing_util::LinearStack;

struct Outcome {
  std::vector<StepStats> stats;
  StepStats last;
  std::vector<float> weights;
};

Outcome Train(EngineOptions o, comm::Communicator* host, comm::Communicator* device_comm) {
  o.comm = host;
  o.device_comm = device_comm;
  constexpr int kLayers = 3, kD = 200, kRows = 2;
  auto device = CpuDevice();
  LinearStack model(kLayers, kD, o.weights_dtype, 5);
  auto engine = OffloadEngine::Create(*device, model, o);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  Outcome run;
  if (!engine.ok()) return run;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int t = 0; t < 4; ++t) {
    std::vector<std::vector<float>> x(o.micro_batches_per_step), y(x.size());
    std::vector<MicroBatch> mbs;
    for (size_t k = 0; k < x.size(); ++k) {
      x[k].resize(kRows * kD);
      for (float& v : x[k]) v = dist(rng);
      for (float v : x[k]) y[k].push_back(0.5f * std::sin(v));
      mbs.push_back(
          MicroBatch{.dense_inputs = x[k].data(), .dense_targets = y[k].data(), .batch = kRows});
    }
    auto st = (*engine)->Step(mbs);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (!st.ok()) return run;
    run.stats.push_back(*st);
  }
  auto fin = (*engine)->Finish();
  EXPECT_TRUE(fin.ok()) << fin.status().ToString();
  if (fin.ok()) run.last = *fin;
  run.weights.resize((*engine)->model_params());
  EXPECT_TRUE((*engine)->ReadDeviceWeights(run.weights.data()).ok());
  return run;
}

void ExpectSameBits(const Outcome& a, const Outcome& b) {
  ASSERT_EQ(a.stats.size(), b.stats.size());
  for (size_t t = 0; t < a.stats.size(); ++t) {
    EXPECT_EQ(std::memcmp(&a.stats[t].loss, &b.stats[t].loss, sizeof(float)), 0) << t;
    EXPECT_EQ(a.stats[t].grad_norm, b.stats[t].grad_norm) << t;
    EXPECT_EQ(a.stats[t].clip_coef, b.stats[t].clip_coef) << t;
  }
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_EQ(std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * sizeof(float)), 0);
}

EngineOptions Options(int micro_batches, uint64_t bucket_params) {
  EngineOptions o;
  o.weights_dtype = DType::kBF16;
  o.adam.lr = 1e-2f;
  o.sub_group_params = 15000;
  o.speculation_params = 60000;
  o.micro_batches_per_step = micro_batches;
  o.grad_bucket_params = bucket_params;
  o.clip_grad_norm = 0.05f;  // clips: speculation rolled back
  o.pause_speculation_after_clip = false;
  o.speculate_eagerly = true;
  return o;
}

TEST(DeviceCollectives, AWorldOfOneIsThePlainEngineBitForBit) {
  comm::SelfCommunicator self;
  auto on_device = comm::HostMemoryDeviceComm::Create(self, DeviceKind::kCpu);
  ASSERT_TRUE(on_device.ok());
  // Several micro-batches with units in pieces (the running sum on the
  // device, a piece at a time), and one with whole units. (One micro-batch
  // in pieces differs in the norm's last bits by design: the plain engine
  // adds the pieces' sums as they land, the data-parallel path the norm's
  // chunks; engine/data_parallel.cc.)
  for (const auto& [micro, bucket] : {std::pair{3, uint64_t{25000}}, std::pair{1, uint64_t{0}}}) {
    SCOPED_TRACE(std::to_string(micro) + " micro-batches");
    const Outcome plain = Train(Options(micro, bucket), nullptr, nullptr);
    const Outcome device = Train(Options(micro, bucket), &self, on_device->get());
    ExpectSameBits(plain, device);
    // Only the summed part crosses, once a step (the whole model, one rank),
    // in fp32: not the bf16 gradient of every micro-batch.
    for (const StepStats& st : device.stats) EXPECT_EQ(st.d2h_bytes, 3u * 200 * 200 * 4);
    int rolled_back = 0;
    for (const StepStats& st : device.stats) rolled_back += st.rolled_back ? 1 : 0;
    EXPECT_GT(rolled_back, 0);
  }
}

// A compute stream that fails skips its later callbacks: the pieces' arrivals
// ride the d2h stream, so the buckets still come back and Step returns the
// error instead of waiting for a bucket forever (two buckets, six pieces).
class FailsOnTheComputeStream : public LinearStack {
 public:
  using LinearStack::LinearStack;
  Status ForwardBackward(Stream& compute, const MicroBatch&, float, UnitAccess& access) override {
    // The failure comes late, after the first pieces' work is queued
    // behind it and the main thread waits for a bucket.
    TF_RETURN_IF_ERROR(compute.HostCallback([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return InternalError("a kernel failed on the device");
    }));
    for (int u = 0; u < 2; ++u) {
      for (uint64_t begin = 0; begin < 40000; begin += 15000) {
        TF_RETURN_IF_ERROR(
            access.BeginGrads(u, begin, std::min<uint64_t>(15000, 40000 - begin)).status());
        TF_RETURN_IF_ERROR(access.EndGrads(u));
      }
    }
    return Status::Ok();
  }
};

TEST(DeviceCollectives, AFailedComputeStreamEndsTheStepWithItsError) {
  comm::SelfCommunicator self;
  auto on_device = comm::HostMemoryDeviceComm::Create(self, DeviceKind::kCpu);
  ASSERT_TRUE(on_device.ok());
  EngineOptions o = Options(1, 15000);
  o.grad_buckets = 2;
  o.comm = &self;
  o.device_comm = on_device->get();
  auto device = CpuDevice();
  FailsOnTheComputeStream model(3, 200, o.weights_dtype, 5);
  auto engine = OffloadEngine::Create(*device, model, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<float> x(2 * 200, 1.0f), y(x.size(), 0.0f);
  auto st = (*engine)->Step(
      {MicroBatch{.dense_inputs = x.data(), .dense_targets = y.data(), .batch = 2}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("a kernel failed on the device"), std::string::npos)
      << st.status().ToString();
}

TEST(SelfCommunicator, SumsAndGathersAWorldOfOne) {
  comm::SelfCommunicator self;
  auto part = comm::Partition::Even(5, 1, 1);
  ASSERT_TRUE(part.ok());
  const std::vector<float> c = {1, 2, 3, 4, 5};
  std::vector<float> sum(5, -1);
  ASSERT_TRUE(self.ReduceScatterSum(c.data(), DType::kF32, *part, sum.data()).ok());
  EXPECT_EQ(sum, c);
  ASSERT_TRUE(self.ReduceScatterSum(c.data(), DType::kF32, *part, sum.data(), true).ok());
  EXPECT_EQ(sum, (std::vector<float>{2, 4, 6, 8, 10}));
  std::vector<float> out(5, 0);
  ASSERT_TRUE(self.AllGather(c.data(), sizeof(float), *part, out.data()).ok());
  EXPECT_EQ(out, c);
  auto two = comm::Partition::Even(6, 2, 1);
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(self.AllGather(c.data(), sizeof(float), *two, out.data()).ok());
  EXPECT_FALSE(self.Broadcast(out.data(), 4, 1).ok());
  EXPECT_TRUE(self.Broadcast(out.data(), 4, 0).ok());
}

}  // namespace
}  // namespace tierflow
