// Reading the engine's state out: GatherMasterWeights (everything at once)
// and StateRangeReader (any range of a unit's master weights or moments,
// through one sub-group at a time) agree with ReadState, across sub-group
// boundaries, and refuse ranges outside the unit.
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "engine/master_weights.h"
#include "engine/offload_engine.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/linear_stack.h"

namespace tierflow {
namespace {

using testing_util::BaseOptions;
using testing_util::kDim;
using testing_util::kLayers;

TEST(StateRangeReader, RangesMatchReadStateAcrossSubGroups) {
  auto device = testing_util::CpuDevice();
  testing_util::LinearStack model(kLayers, kDim, DType::kF32, 7);
  EngineOptions o = BaseOptions();  // 576-parameter units in sub-groups of 200
  auto engine_or = OffloadEngine::Create(*device, model, o);
  ASSERT_TRUE(engine_or.ok()) << engine_or.status().ToString();
  OffloadEngine& engine = **engine_or;
  const testing_util::Data data = testing_util::MakeData(2, 4, 3);
  for (size_t s = 0; s < data.x.size(); ++s) {
    MicroBatch mb;
    mb.dense_inputs = data.x[s].data();
    mb.dense_targets = data.y[s].data();
    mb.batch = 4;
    ASSERT_TRUE(engine.Step({mb}).ok());
  }
  auto masters = GatherMasterWeights(engine);
  ASSERT_TRUE(masters.ok()) << masters.status().ToString();

  // The reference: every sub-group's three arrays, flat per array.
  const SubGroupLayout& layout = engine.layout();
  std::vector<float> ref[3];
  for (auto& r : ref) r.resize(layout.total_params);
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    const uint64_t at = layout.groups[g].global_offset;
    ASSERT_TRUE(engine
                    .ReadState(static_cast<int>(g), ref[0].data() + at, ref[1].data() + at,
                               ref[2].data() + at)
                    .ok());
  }
  EXPECT_EQ(0, std::memcmp(masters->data(), ref[0].data(), ref[0].size() * 4));

  StateRangeReader reader(engine);
  const StateRangeReader::Array arrays[] = {StateRangeReader::Array::kMaster,
                                            StateRangeReader::Array::kExpAvg,
                                            StateRangeReader::Array::kExpAvgSq};
  const uint64_t unit = static_cast<uint64_t>(kDim) * kDim;
  for (int a = 0; a < 3; ++a) {
    // Backwards and forwards through the cache; inside one sub-group, across two, the whole unit.
    for (const auto& [u, offset, count] : std::vector<std::tuple<int, uint64_t, uint64_t>>{
             {2, 10, 50}, {2, 190, 20}, {0, 0, unit}, {3, 399, 177}, {1, 575, 1}}) {
      std::vector<float> got(count);
      ASSERT_TRUE(reader.Read(u, arrays[a], offset, count, got.data()).ok());
      EXPECT_EQ(0, std::memcmp(got.data(), ref[a].data() + u * unit + offset, count * 4))
          << "array " << a << " unit " << u << " [" << offset << ", +" << count << ")";
    }
  }
  EXPECT_EQ(reader.buffer_bytes(), 3u * 200 * 4);
  std::vector<float> spill(2);
  Status outside = reader.Read(1, arrays[0], unit - 1, 2, spill.data());
  EXPECT_EQ(outside.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.message().find("outside unit 1"), std::string::npos) << outside.ToString();
  EXPECT_EQ(reader.Read(kLayers, arrays[0], 0, 1, spill.data()).code(),
            StatusCode::kInvalidArgument);
}

// pin_memory (EngineOptions::lock_host_state): the host tier's state is
// page-locked for the engine's life.
TEST(HostStateTier, LockHostStatePageLocksTheState) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "The sanitizers intercept mlock as a no-op: page-locking is not observable "
                  "in this build (the release build runs this test)";
#endif
  auto locked_bytes = [] {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmLck:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    }
    return 0ull;
  };
  const unsigned long long before = locked_bytes();
  {
    auto device = testing_util::CpuDevice();
    testing_util::LinearStack model(kLayers, kDim, DType::kF32, 7);
    EngineOptions o = BaseOptions();
    o.lock_host_state = true;
    auto engine = OffloadEngine::Create(*device, model, o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    // Three fp32 arrays of every parameter (each block at least a page).
    EXPECT_GE(locked_bytes(), before + 3ull * kLayers * kDim * kDim * 4);
  }
  EXPECT_EQ(locked_bytes(), before);
}

}  // namespace
}  // namespace tierflow
