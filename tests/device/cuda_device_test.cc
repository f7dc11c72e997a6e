// The CUDA device: the same contract as the CPU device. Skipped, with the
// reason, where no GPU is usable.
#include <atomic>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "tierflow/device.h"

namespace tierflow {
namespace {

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = CudaUnavailableReason();
    if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
    DeviceOptions o;
    o.kind = DeviceChoice::kCuda;
    auto d = CreateDevice(o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dev_ = std::move(d).value();
  }
  std::unique_ptr<Device> dev_;
};

TEST(CudaDeviceAvailability, CudaWithoutGpuIsUnavailableWithReason) {
  if (CudaUnavailableReason().empty()) GTEST_SKIP() << "a GPU is present";
  DeviceOptions o;
  o.kind = DeviceChoice::kCuda;
  auto d = CreateDevice(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(d.status().message().find("--device cpu"), std::string::npos);
}

TEST_F(CudaDeviceTest, CopiesRoundTrip) {
  auto s = std::move(dev_->CreateStream("s")).value();
  const size_t n = 1 << 20;
  auto a = std::move(dev_->Allocate(n, "a")).value();
  auto b = std::move(dev_->Allocate(n, "b")).value();
  auto pinned = std::move(dev_->AllocatePinned(n, "p")).value();
  std::vector<uint8_t> src(n), dst(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
  ASSERT_TRUE(s->CopyHostToDevice(a.data(), src.data(), n).ok());
  ASSERT_TRUE(s->CopyDeviceToDevice(b.data(), a.data(), n).ok());
  ASSERT_TRUE(s->CopyDeviceToHost(pinned.data(), b.data(), n).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(0, std::memcmp(pinned.data(), src.data(), n));
}

TEST_F(CudaDeviceTest, EventsOrderStreamsAndCallbacksRunInOrder) {
  auto s1 = std::move(dev_->CreateStream("1")).value();
  auto s2 = std::move(dev_->CreateStream("2")).value();
  auto ev = std::move(dev_->CreateEvent(true)).value();
  auto start = std::move(dev_->CreateEvent(true)).value();
  std::atomic<int> step{0};
  int seen = -1;
  ASSERT_TRUE(s1->Record(*start).ok());
  ASSERT_TRUE(s1->HostCallback([&] {
                  step = 1;
                  return Status::Ok();
                }).ok());
  ASSERT_TRUE(s1->Record(*ev).ok());
  ASSERT_TRUE(s2->Wait(*ev).ok());
  ASSERT_TRUE(s2->HostCallback([&] {
                  seen = step.load();
                  return Status::Ok();
                }).ok());
  ASSERT_TRUE(s2->Synchronize().ok());
  EXPECT_EQ(seen, 1);
  EXPECT_TRUE(ev->ElapsedMsSince(*start).ok());
}

TEST_F(CudaDeviceTest, OutOfMemoryIsAClearError) {
  auto r = dev_->Allocate(dev_->DeviceMemory().capacity_bytes + (1ull << 30), "too much");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(r.status().message().find("too much"), std::string::npos);
}

}  // namespace
}  // namespace tierflow
