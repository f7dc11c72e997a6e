// The engine tests' shared run.
#include "tests/engine/engine_test_util.h"

#include <cmath>
#include <random>
#include <utility>

#include <gtest/gtest.h>

#include "engine/offload_engine.h"
#include "tests/engine/linear_stack.h"

namespace tierflow::testing_util {

Data MakeData(int steps, int batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Data data;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x(batch * kDim), y(batch * kDim);
    for (float& v : x) v = dist(rng);
    for (int i = 0; i < batch * kDim; ++i) y[i] = 0.5f * std::sin(x[i]);
    data.x.push_back(std::move(x));
    data.y.push_back(std::move(y));
  }
  return data;
}

std::unique_ptr<Device> CpuDevice(uint64_t capacity) {
  auto d = CreateDevice({.kind = DeviceChoice::kCpu, .memory_capacity_bytes = capacity});
  EXPECT_TRUE(d.ok());
  return std::move(d).value();
}

EngineOptions BaseOptions() {
  EngineOptions o;
  o.weights_dtype = DType::kF32;
  o.adam.lr = 1e-2f;
  o.adam.weight_decay = 0.01f;
  o.sub_group_params = 200;  // several sub-groups per layer
  return o;
}

RunResult Train(const EngineOptions& options, const Data& data, int micro_batches) {
  RunResult result;
  auto device = CpuDevice();
  LinearStack model(kLayers, kDim, options.weights_dtype, 7);
  auto engine_or = OffloadEngine::Create(*device, model, options);
  EXPECT_TRUE(engine_or.ok()) << engine_or.status().ToString();
  if (!engine_or.ok()) return result;
  auto engine = std::move(engine_or).value();
  for (size_t s = 0; s < data.x.size(); ++s) {
    const int batch = static_cast<int>(data.x[s].size()) / kDim;
    const int per_micro = batch / micro_batches;
    std::vector<MicroBatch> mbs;
    for (int k = 0; k < micro_batches; ++k) {
      MicroBatch mb;
      mb.dense_inputs = data.x[s].data() + k * per_micro * kDim;
      mb.dense_targets = data.y[s].data() + k * per_micro * kDim;
      mb.batch = per_micro;
      mbs.push_back(mb);
    }
    auto st = engine->Step(mbs);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (!st.ok()) return result;
    result.stats.push_back(*st);
  }
  auto fin = engine->Finish();
  EXPECT_TRUE(fin.ok()) << fin.status().ToString();
  if (fin.ok()) result.finish = *fin;
  for (size_t g = 0; g < engine->layout().groups.size(); ++g) {
    const size_t n = engine->layout().groups[g].num_params;
    std::vector<float> m(n), a(n), v(n);
    EXPECT_TRUE(engine->ReadState(static_cast<int>(g), m.data(), a.data(), v.data()).ok());
    result.state.insert(result.state.end(), m.begin(), m.end());
    result.state.insert(result.state.end(), a.begin(), a.end());
    result.state.insert(result.state.end(), v.begin(), v.end());
  }
  result.device_weights.resize(engine->layout().total_params);
  EXPECT_TRUE(engine->ReadDeviceWeights(result.device_weights.data()).ok());
  return result;
}

}  // namespace tierflow::testing_util
