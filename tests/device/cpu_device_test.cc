// The emulated accelerator: ordering within a stream, cross-stream waits,
// real overlap in time, out-of-memory as a clear error, illegal addresses.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "device/cpu/cpu_device.h"
#include "tierflow/device.h"

namespace tierflow {
namespace {

std::unique_ptr<Device> MakeCpu(uint64_t capacity = 64ull << 20) {
  DeviceOptions o;
  o.kind = DeviceChoice::kCpu;
  o.memory_capacity_bytes = capacity;
  auto d = CreateDevice(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

TEST(CpuDevice, WorkOnOneStreamRunsInEnqueueOrder) {
  auto dev = MakeCpu();
  auto stream = std::move(dev->CreateStream("s")).value();
  std::vector<int> order;  // only touched by the stream's worker, read after Synchronize
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(stream
                    ->HostCallback([&order, i] {
                      if (i % 17 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
                      order.push_back(i);
                      return Status::Ok();
                    })
                    .ok());
  }
  ASSERT_TRUE(stream->Synchronize().ok());
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
}

TEST(CpuDevice, CopiesRoundTripThroughDeviceMemory) {
  auto dev = MakeCpu();
  auto stream = std::move(dev->CreateStream("copy")).value();
  const size_t n = 1 << 20;
  auto a = std::move(dev->Allocate(n, "a")).value();
  auto b = std::move(dev->Allocate(n, "b")).value();
  std::vector<uint8_t> src(n), dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_TRUE(stream->CopyHostToDevice(a.data(), src.data(), n).ok());
  ASSERT_TRUE(stream->CopyDeviceToDevice(b.data(), a.data(), n).ok());
  ASSERT_TRUE(stream->Memset(a.data(), 0, n).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(dst.data(), b.data(), n).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(src, dst);
}

TEST(CpuDevice, WaitOnEventOrdersWorkAcrossStreams) {
  auto dev = MakeCpu();
  auto producer = std::move(dev->CreateStream("producer")).value();
  auto consumer = std::move(dev->CreateStream("consumer")).value();
  auto ready = std::move(dev->CreateEvent(false)).value();
  std::atomic<int> value{0};
  int seen = -1;
  ASSERT_TRUE(producer
                  ->HostCallback([&] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    value.store(42);
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_TRUE(producer->Record(*ready).ok());
  ASSERT_TRUE(consumer->Wait(*ready).ok());
  ASSERT_TRUE(consumer
                  ->HostCallback([&] {
                    seen = value.load();
                    return Status::Ok();
                  })
                  .ok());
  ASSERT_TRUE(consumer->Synchronize().ok());
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(ready->Query());
}

TEST(CpuDevice, WaitUsesTheRecordCurrentAtCallTime) {
  auto dev = MakeCpu();
  auto a = std::move(dev->CreateStream("a")).value();
  auto b = std::move(dev->CreateStream("b")).value();
  auto ev = std::move(dev->CreateEvent(false)).value();
  std::atomic<bool> release{false};
  ASSERT_TRUE(a->Record(*ev).ok());
  ASSERT_TRUE(a->Synchronize().ok());
  ASSERT_TRUE(b->Wait(*ev).ok());  // the first record: already complete
  // A later record that cannot complete yet must not block b's earlier wait.
  ASSERT_TRUE(a->HostCallback([&] {
                 while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                 return Status::Ok();
               }).ok());
  ASSERT_TRUE(a->Record(*ev).ok());
  EXPECT_FALSE(ev->Query());
  ASSERT_TRUE(b->Synchronize().ok());
  release.store(true);
  ASSERT_TRUE(ev->HostWait().ok());
  EXPECT_TRUE(ev->Query());
}

TEST(CpuDevice, TwoStreamsOverlapInTime) {
  auto dev = MakeCpu();
  auto s1 = std::move(dev->CreateStream("compute")).value();
  auto s2 = std::move(dev->CreateStream("copy")).value();
  // Each stream's item waits until it has seen the other one start: this can
  // only finish if both items are running at the same moment.
  std::atomic<int> started{0};
  auto item = [&] {
    started.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline)
        return InternalError("streams did not overlap");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return Status::Ok();
  };
  ASSERT_TRUE(s1->HostCallback(item).ok());
  ASSERT_TRUE(s2->HostCallback(item).ok());
  EXPECT_TRUE(s1->Synchronize().ok());
  EXPECT_TRUE(s2->Synchronize().ok());
}

TEST(CpuDevice, TimedEventsMeasureElapsedWork) {
  auto dev = MakeCpu();
  auto s = std::move(dev->CreateStream("s")).value();
  auto start = std::move(dev->CreateEvent(true)).value();
  auto stop = std::move(dev->CreateEvent(true)).value();
  ASSERT_TRUE(s->Record(*start).ok());
  ASSERT_TRUE(s->HostCallback([] {
                 std::this_thread::sleep_for(std::chrono::milliseconds(20));
                 return Status::Ok();
               }).ok());
  ASSERT_TRUE(s->Record(*stop).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  auto ms = stop->ElapsedMsSince(*start);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_GE(*ms, 19.0);
  auto untimed = std::move(dev->CreateEvent(false)).value();
  EXPECT_FALSE(untimed->ElapsedMsSince(*start).ok());
}

TEST(CpuDevice, OutOfMemoryNamesRequestUseAndCapacity) {
  auto dev = MakeCpu(1 << 20);
  auto a = dev->Allocate(768 << 10, "weights");
  ASSERT_TRUE(a.ok());
  auto b = dev->Allocate(512 << 10, "layer 3 gradients");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kOutOfMemory);
  const std::string& msg = b.status().message();
  EXPECT_NE(msg.find("512.00 KiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer 3 gradients"), std::string::npos) << msg;
  EXPECT_NE(msg.find("768.00 KiB in use"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.00 MiB capacity"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--device-memory"), std::string::npos) << msg;
  // Nothing was half-allocated: accounting is unchanged and freeing makes room.
  EXPECT_EQ(dev->DeviceMemory().in_use_bytes, 768u << 10);
  a->Reset();
  EXPECT_EQ(dev->DeviceMemory().in_use_bytes, 0u);
  EXPECT_EQ(dev->DeviceMemory().peak_bytes, 768u << 10);
  EXPECT_TRUE(dev->Allocate(512 << 10, "retry").ok());
}

TEST(CpuDevice, CopyOutsideAnyAllocationIsRejected) {
  auto dev = MakeCpu();
  auto s = std::move(dev->CreateStream("s")).value();
  auto buf = std::move(dev->Allocate(4096, "buf")).value();
  std::vector<char> host(8192);
  EXPECT_TRUE(s->CopyHostToDevice(buf.data(), host.data(), 4096).ok());
  Status overflow = s->CopyHostToDevice(buf.data(), host.data(), 4097);
  EXPECT_EQ(overflow.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.message().find("illegal address"), std::string::npos);
  // A host pointer passed where device memory is expected.
  EXPECT_FALSE(s->CopyDeviceToHost(host.data(), host.data() + 4096, 16).ok());
  EXPECT_TRUE(s->Synchronize().ok());
}

TEST(CpuDevice, FailedWorkIsStickyAndReleasesWaiters) {
  auto dev = MakeCpu();
  auto a = std::move(dev->CreateStream("a")).value();
  auto b = std::move(dev->CreateStream("b")).value();
  auto ev = std::move(dev->CreateEvent(false)).value();
  bool ran_after_error = false;
  ASSERT_TRUE(a->HostCallback([] { return IoError("disk went away"); }).ok());
  (void)a->HostCallback([&] {
    ran_after_error = true;
    return Status::Ok();
  });
  (void)a->Record(*ev);
  ASSERT_TRUE(b->Wait(*ev).ok());
  EXPECT_TRUE(b->Synchronize().ok());  // not deadlocked
  Status s = a->Synchronize();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("stream 'a'"), std::string::npos);
  EXPECT_FALSE(ran_after_error);
  EXPECT_FALSE(a->Memset(nullptr, 0, 0).ok());  // later enqueues report the error
}

TEST(CpuDevice, DeviceSynchronizeWaitsForEveryStream) {
  auto dev = MakeCpu();
  auto s1 = std::move(dev->CreateStream("1")).value();
  auto s2 = std::move(dev->CreateStream("2")).value();
  std::atomic<int> done{0};
  for (Stream* s : {s1.get(), s2.get()}) {
    ASSERT_TRUE(s->HostCallback([&] {
                   std::this_thread::sleep_for(std::chrono::milliseconds(10));
                   done.fetch_add(1);
                   return Status::Ok();
                 }).ok());
  }
  ASSERT_TRUE(dev->Synchronize().ok());
  EXPECT_EQ(done.load(), 2);
}

TEST(CpuDevice, PinnedMemoryIsPageAlignedAndAccounted) {
  auto dev = MakeCpu();
  auto p = dev->AllocatePinned(10000, "staging");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p->data()) % 4096, 0u);
  EXPECT_EQ(dev->PinnedMemory().in_use_bytes, 10000u);
  p->Reset();
  EXPECT_EQ(dev->PinnedMemory().in_use_bytes, 0u);
}

TEST(DeviceFactory, UnknownKindIsAnErrorNamingTheFlag) {
  for (const char* text : {"tpu", "sim", "sim:", "SIM:h100-sxm"}) {
    auto d = ParseDeviceSpec("--device", text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(d.status().message().find(std::string("--device: unknown device '") + text + "'"),
              std::string::npos)
        << d.status().message();
    EXPECT_NE(d.status().message().find("auto, cpu, cuda or sim:PROFILE"), std::string::npos);
  }
}

TEST(DeviceFactory, SpecNamesRoundTrip) {
  for (const char* text : {"auto", "cpu", "cuda", "sim:h100-pcie", "sim:/tmp/my gpu.json"}) {
    auto parsed = ParseDeviceSpec("x", text);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(DeviceSpecName(*parsed), text);
  }
  auto sim = ParseDeviceSpec("x", "sim:rtx-4090");
  ASSERT_TRUE(sim.ok());
  EXPECT_EQ(sim->choice, DeviceChoice::kSim);
  EXPECT_EQ(sim->sim_profile, "rtx-4090");
  EXPECT_TRUE(ParseDeviceSpec("x", "cpu")->sim_profile.empty());
}

TEST(DeviceFactory, AutoPicksCudaOnlyWhenUsable) {
  DeviceOptions o;
  o.kind = DeviceChoice::kAuto;
  auto d = CreateDevice(o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->kind() == DeviceKind::kCuda, CudaUnavailableReason().empty());
}

TEST(CpuDevice, LaunchRunsTheHostImplementationInStreamOrder) {
  auto dev = MakeCpu();
  auto stream = std::move(dev->CreateStream("kernels")).value();
  std::vector<int> order;  // touched by the stream's worker only, read after Synchronize
  bool cuda_called = false;
  for (int i = 0; i < 3; ++i) {
    Kernel k;
    k.name = "Probe";
    k.host = [&order, i] {
      order.push_back(i);
      return Status::Ok();
    };
    k.cuda = [&cuda_called](Stream&) {
      cuda_called = true;
      return Status::Ok();
    };
    ASSERT_TRUE(stream->Launch(std::move(k)).ok());
  }
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(cuda_called);
}

TEST(CpuDevice, LaunchWithoutAHostImplementationNamesTheOpAndDevice) {
  auto dev = MakeCpu();
  auto stream = std::move(dev->CreateStream("kernels")).value();
  Kernel k;
  k.name = "CudaOnlyOp";
  k.cuda = [](Stream&) { return Status::Ok(); };
  Status s = stream->Launch(std::move(k));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("CudaOnlyOp"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("cpu"), std::string::npos) << s.ToString();
  EXPECT_TRUE(stream->Synchronize().ok());  // nothing was enqueued, nothing is sticky
}

TEST(CpuDevice, AKernelsErrorIsStickyOnItsStream) {
  auto dev = MakeCpu();
  auto stream = std::move(dev->CreateStream("kernels")).value();
  Kernel failing;
  failing.name = "Failing";
  failing.host = [] { return InternalError("kernel failed"); };
  ASSERT_TRUE(stream->Launch(std::move(failing)).ok());
  bool later_ran = false;
  Kernel later;
  later.name = "Later";
  later.host = [&later_ran] {
    later_ran = true;
    return Status::Ok();
  };
  (void)stream->Launch(std::move(later));  // may already see the sticky error
  Status s = stream->Synchronize();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_FALSE(later_ran);
}

}  // namespace
}  // namespace tierflow
