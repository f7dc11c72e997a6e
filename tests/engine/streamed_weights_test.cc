// StreamedWeights' optimizer side: the ranges the optimizer writes a streamed
// unit's new weights into (RangeForWrite, in place; WriteRange, by copy) land
// in the unit's copy, on host and on NVMe, and a write outside a streamed
// unit, or into a second NVMe unit before the first is finished, is refused
// with the units named. The ring itself is covered end to end by
// tests/model/param_offload_test.cc.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "engine/streamed_weights.h"
#include "tests/common/scratch_dir.h"

namespace tierflow {
namespace {

std::vector<UnitInfo> ThreeUnits() { return {{"embed", 96}, {"layers.0", 160}, {"layers.1", 128}}; }

std::vector<uint16_t> Pattern(uint64_t n, uint16_t seed) {
  std::vector<uint16_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(seed + 7 * i);
  return v;
}

class StreamedWeightsWrites : public ::testing::TestWithParam<ParamOffload> {
 protected:
  void SetUp() override {
    auto d = CreateDevice({.kind = DeviceChoice::kCpu, .memory_capacity_bytes = 64ull << 20});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    device_ = std::move(*d);
    StreamedWeights::Config c;
    c.params.where = GetParam();
    c.params.streamed_units = {1, 2};
    c.params.device_slots = 2;
    c.params.prefetch_depth = 1;
    c.dtype = DType::kBF16;
    c.nvme.paths = {dir_.path()};
    auto w = StreamedWeights::Create(*device_, ThreeUnits(), {0, 1, 2, 2, 1}, c);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    weights_ = std::move(*w);
  }
  bool nvme() const { return GetParam() == ParamOffload::kNvme; }

  testing_common::ScratchDir dir_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<StreamedWeights> weights_;
};

TEST_P(StreamedWeightsWrites, InPlaceAndCopiedRangesBecomeTheUnitsCopy) {
  ASSERT_FALSE(weights_->streamed(0));
  ASSERT_TRUE(weights_->streamed(1));
  // Unit 1 written in place in two ranges; unit 2 by copy in two ranges.
  const std::vector<uint16_t> a = Pattern(160, 3), b = Pattern(128, 11);
  auto head = weights_->RangeForWrite(1, 0, 100);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  std::memcpy(*head, a.data(), 100 * 2);
  auto tail = weights_->RangeForWrite(1, 100, 60);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(static_cast<char*>(*tail), static_cast<char*>(*head) + 200)
      << "ranges of one unit are one contiguous copy";
  std::memcpy(*tail, a.data() + 100, 60 * 2);
  ASSERT_TRUE(weights_->FinishUnit(1).ok());
  ASSERT_TRUE(weights_->WriteRange(2, 0, b.data(), 64).ok());
  ASSERT_TRUE(weights_->WriteRange(2, 64, b.data() + 64, 64).ok());
  ASSERT_TRUE(weights_->FinishUnit(2).ok());
  ASSERT_TRUE(weights_->Flush().ok());

  std::vector<uint16_t> got(160);
  ASSERT_TRUE(weights_->ReadUnit(1, got.data()).ok());
  EXPECT_EQ(got, a);
  got.assign(128, 0);
  ASSERT_TRUE(weights_->ReadUnit(2, got.data()).ok());
  EXPECT_EQ(got, b);
}

TEST_P(StreamedWeightsWrites, WritesOutsideAStreamedUnitAreRefused) {
  for (auto [unit, offset, count] :
       std::vector<std::tuple<int, uint64_t, uint64_t>>{{0, 0, 1},       // resident
                                                        {3, 0, 1},       // no such unit
                                                        {-1, 0, 1},      // no such unit
                                                        {1, 150, 11},    // past the end
                                                        {1, 161, 0}}) {  // offset past the end
    auto r = weights_->RangeForWrite(unit, offset, count);
    ASSERT_FALSE(r.ok()) << unit << " " << offset << " " << count;
    EXPECT_NE(r.status().message().find("outside a streamed unit"), std::string::npos)
        << r.status().ToString();
  }
  const std::vector<uint16_t> x(8);
  EXPECT_FALSE(weights_->WriteRange(1, 160, x.data(), 1).ok());
}

TEST_P(StreamedWeightsWrites, ASecondUnitBeforeTheFirstIsFinishedIsRefusedOnNvme) {
  ASSERT_TRUE(weights_->RangeForWrite(1, 0, 160).ok());
  auto second = weights_->RangeForWrite(2, 0, 128);
  if (!nvme()) {
    // The host copy holds every unit at once: no order to keep.
    EXPECT_TRUE(second.ok()) << second.status().ToString();
    return;
  }
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("layers.1 is written while layers.0 is not finished"),
            std::string::npos)
      << second.status().ToString();
  // Finishing a unit that is not the one assembled is refused too.
  EXPECT_FALSE(weights_->FinishUnit(2).ok());
  ASSERT_TRUE(weights_->FinishUnit(1).ok());
  EXPECT_TRUE(weights_->RangeForWrite(2, 0, 128).ok());
  ASSERT_TRUE(weights_->FinishUnit(2).ok());
  EXPECT_TRUE(weights_->Flush().ok());
}

INSTANTIATE_TEST_SUITE_P(Copies, StreamedWeightsWrites,
                         ::testing::Values(ParamOffload::kHost, ParamOffload::kNvme),
                         [](const auto& info) {
                           return std::string(info.param == ParamOffload::kHost ? "Host" : "Nvme");
                         });

}  // namespace
}  // namespace tierflow
