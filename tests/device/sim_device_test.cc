// The simulated accelerator (--device sim:PROFILE): the CPU device's memory
// and streams, with a GPU's timing. Kernels are not run, copies copy, device
// memory reads as zeros until written, and each item takes at least its
// modelled time. Only lower bounds on time are asserted: a busy machine can
// make the stream slower than the model, never faster.
#include <chrono>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "device/sim/sim_timing.h"
#include "tierflow/device.h"
#include "tierflow/sim_profile.h"

namespace tierflow {
namespace {

using Clock = std::chrono::steady_clock;

SimProfile Profile(const char* name = "h100-pcie") {
  auto p = FindBuiltinSimProfile(name);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

std::unique_ptr<Device> MakeSim(const SimProfile& profile, uint64_t capacity = 0) {
  DeviceOptions o;
  o.kind = DeviceChoice::kSim;
  o.sim = profile;
  o.memory_capacity_bytes = capacity;
  auto d = CreateDevice(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST(SimProfiles, BuiltinsAreValidAndNamed) {
  std::vector<std::string> names;
  for (const SimProfile& p : BuiltinSimProfiles()) {
    EXPECT_TRUE(ValidateSimProfile(p).ok()) << p.name;
    names.push_back(p.name);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"h100-sxm", "h100-pcie", "a100-80gb", "l40s", "rtx-4090"}));
  auto missing = FindBuiltinSimProfile("h200");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("rtx-4090"), std::string::npos);
}

TEST(SimProfiles, ValidationNamesTheField) {
  SimProfile p = Profile();
  p.hbm_efficiency = 1.5;
  Status s = ValidateSimProfile(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("hbm_efficiency"), std::string::npos) << s.ToString();
  p = Profile();
  p.link_gb_per_s = 0;
  EXPECT_NE(ValidateSimProfile(p).message().find("link_gb_per_s"), std::string::npos);
  DeviceOptions o;
  o.kind = DeviceChoice::kSim;
  o.sim = p;
  EXPECT_EQ(CreateDevice(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(SimTiming, KernelTimeIsTheSlowestRoofPlusLaunchOverhead) {
  SimProfile p = Profile();
  p.launch_overhead_us = 5;
  KernelCost gemm;
  gemm.tensor_flops = 1e12;  // 1 TFLOP
  gemm.bytes = 1e6;
  EXPECT_NEAR(SimKernelSeconds(p, gemm),
              5e-6 + 1e12 / (p.tensor_tflops * 1e12 * p.tensor_efficiency), 1e-12);
  KernelCost copy_like;
  copy_like.vector_flops = 1e6;
  copy_like.bytes = 8e9;
  EXPECT_NEAR(SimKernelSeconds(p, copy_like),
              5e-6 + 8e9 / (p.hbm_gb_per_s * 1e9 * p.hbm_efficiency), 1e-12);
  EXPECT_NEAR(SimLinkSeconds(p, 1 << 30),
              double(1 << 30) / (p.link_gb_per_s * 1e9 * p.link_efficiency), 1e-12);
  // A slower GPU takes longer for the same work.
  EXPECT_GT(SimKernelSeconds(Profile("rtx-4090"), gemm),
            SimKernelSeconds(Profile("h100-sxm"), gemm));
}

TEST(SimDevice, IsASimKindWithTheProfilesMemory) {
  auto dev = MakeSim(Profile("rtx-4090"));
  EXPECT_EQ(dev->kind(), DeviceKind::kSim);
  EXPECT_EQ(DeviceKindName(dev->kind()), "sim");
  EXPECT_EQ(dev->DeviceMemory().capacity_bytes, 24ull << 30);
  EXPECT_NE(dev->description().find("sim:rtx-4090"), std::string::npos) << dev->description();
  auto small = MakeSim(Profile(), 1 << 20);
  EXPECT_EQ(small->DeviceMemory().capacity_bytes, 1u << 20);
  auto too_big = small->Allocate(2 << 20, "activations");
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfMemory);
}

TEST(SimDevice, KernelsDoNotRunAndTakeAtLeastTheirModelledTime) {
  SimProfile p = Profile();
  p.launch_overhead_us = 0;
  auto dev = MakeSim(p);
  auto stream = std::move(dev->CreateStream("compute")).value();
  bool ran = false;
  Kernel k;
  k.name = "Big";
  k.cost.tensor_flops = 0.002 * p.tensor_tflops * 1e12 * p.tensor_efficiency;  // 2 ms modelled
  k.host = [&ran] {
    ran = true;
    return Status::Ok();
  };
  const auto start = Clock::now();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(stream->Launch(k).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_GE(Seconds(Clock::now() - start), 10 * SimKernelSeconds(p, k.cost));
  EXPECT_FALSE(ran);
}

TEST(SimDevice, CopiesCopyAndMemoryReadsZeroUntilWritten) {
  SimProfile p = Profile();
  p.link_gb_per_s = 1;  // 1 MiB takes about 1.3 ms at 80%
  auto dev = MakeSim(p);
  auto stream = std::move(dev->CreateStream("copy")).value();
  const size_t n = 1 << 20;
  auto buf = std::move(dev->Allocate(n, "weights")).value();
  std::vector<uint8_t> out(n, 0xAB);
  ASSERT_TRUE(stream->CopyDeviceToHost(out.data(), buf.data(), n).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(out, std::vector<uint8_t>(n, 0));

  std::vector<uint8_t> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint8_t>(i * 31 + 7);
  const auto start = Clock::now();
  ASSERT_TRUE(stream->CopyHostToDevice(buf.data(), in.data(), n).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(out.data(), buf.data(), n).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_GE(Seconds(Clock::now() - start), 2 * SimLinkSeconds(p, n));
  EXPECT_EQ(out, in);
}

TEST(SimDevice, MemsetZeroesAndMemsetValueFills) {
  auto dev = MakeSim(Profile());
  auto stream = std::move(dev->CreateStream("s")).value();
  const size_t n = 3 * 4096 + 100;  // partial pages at both ends once offset
  auto buf = std::move(dev->Allocate(n + 64, "b")).value();
  char* base = buf.as<char>() + 64;
  std::vector<char> ones(n, 1), out(n, 5);
  ASSERT_TRUE(stream->CopyHostToDevice(base, ones.data(), n).ok());
  ASSERT_TRUE(stream->Memset(base, 0, n).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(out.data(), base, n).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(out, std::vector<char>(n, 0));
  std::vector<char> head(64, 9);
  ASSERT_TRUE(stream->CopyDeviceToHost(head.data(), buf.data(), 64).ok());
  ASSERT_TRUE(stream->Memset(base, 7, n).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(out.data(), base, n).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(out, std::vector<char>(n, 7));
  EXPECT_EQ(head, std::vector<char>(64, 0));  // the bytes before the range were untouched
}

TEST(SimDevice, EventsOrderTimedWorkAcrossStreams) {
  SimProfile p = Profile();
  p.launch_overhead_us = 0;
  auto dev = MakeSim(p);
  auto compute = std::move(dev->CreateStream("compute")).value();
  auto d2h = std::move(dev->CreateStream("d2h")).value();
  auto done = std::move(dev->CreateEvent(false)).value();
  Kernel k;
  k.name = "Slow";
  k.cost.bytes = 0.005 * p.hbm_gb_per_s * 1e9 * p.hbm_efficiency;  // 5 ms modelled
  auto buf = std::move(dev->Allocate(4096, "grad")).value();
  std::vector<uint8_t> pattern(4096, 3), out(4096, 0);
  ASSERT_TRUE(compute->CopyHostToDevice(buf.data(), pattern.data(), 4096).ok());
  const auto start = Clock::now();
  ASSERT_TRUE(compute->Launch(k).ok());
  ASSERT_TRUE(compute->Record(*done).ok());
  ASSERT_TRUE(d2h->Wait(*done).ok());
  ASSERT_TRUE(d2h->CopyDeviceToHost(out.data(), buf.data(), 4096).ok());
  ASSERT_TRUE(d2h->Synchronize().ok());
  EXPECT_GE(Seconds(Clock::now() - start), SimKernelSeconds(p, k.cost));  // waited for it
  EXPECT_EQ(out, pattern);
}

}  // namespace
}  // namespace tierflow
