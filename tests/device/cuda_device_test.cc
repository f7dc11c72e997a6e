// The CUDA device: the same contract as the CPU device. Skipped, with the
// reason, where no GPU is usable.
#include <atomic>
#include <cstdint>
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

// The NVMe tier reads and writes pinned buffers with O_DIRECT, so each one
// starts on a page, small ones too (cudaHostAlloc packs those closer), and a
// device-to-host copy lands in it.
TEST_F(CudaDeviceTest, PinnedMemoryIsPageAlignedAndAccounted) {
  auto s = std::move(dev_->CreateStream("s")).value();
  std::vector<PinnedBuffer> held;
  for (size_t n : {size_t{100}, size_t{5000}, size_t{100}, size_t{3} << 20}) {
    auto p = dev_->AllocatePinned(n, "small state");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p->data()) % 4096, 0u) << n << " bytes";
    held.push_back(std::move(p).value());
  }
  EXPECT_EQ(dev_->PinnedMemory().in_use_bytes, 100u + 5000u + 100u + (size_t{3} << 20));
  auto d = std::move(dev_->Allocate(5000, "d")).value();
  ASSERT_TRUE(s->Memset(d.data(), 0x5a, 5000).ok());
  ASSERT_TRUE(s->CopyDeviceToHost(held[1].data(), d.data(), 5000).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  EXPECT_EQ(static_cast<uint8_t*>(held[1].data())[4999], 0x5a);
  held.clear();
  EXPECT_EQ(dev_->PinnedMemory().in_use_bytes, 0u);
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
