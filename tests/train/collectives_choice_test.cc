// Where the collectives run (train/collectives_choice.h), as train and plan
// both resolve it. Issue 42: plan took `--collectives auto` with one rank on
// a CUDA build with NCCL as the device path while train ran the plain one,
// so the plan was of another run (pinned memory, PCIe dtype, step time).
#include <gtest/gtest.h>

#include "train/collectives_choice.h"

namespace tierflow {
namespace {

TEST(CollectivesChoice, AutoWithOneRankIsThePlainPathOnEveryDevice) {
  for (DeviceKind kind : {DeviceKind::kCuda, DeviceKind::kCpu, DeviceKind::kSim}) {
    auto one = ResolveDeviceCollectives("auto", kind, 1);
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_FALSE(*one);
  }
}

TEST(CollectivesChoice, AutoWithSeveralRanksIsTheDeviceWhereNcclServesIt) {
  // Whether this build has NCCL: "device" on CUDA is refused without it.
  const bool nccl = ResolveDeviceCollectives("device", DeviceKind::kCuda, 2).ok();
  auto cuda = ResolveDeviceCollectives("auto", DeviceKind::kCuda, 4);
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(*cuda, nccl);
  auto cpu = ResolveDeviceCollectives("auto", DeviceKind::kCpu, 4);
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(*cpu);
}

TEST(CollectivesChoice, NamedChoicesHoldForAnyWorldSize) {
  for (int ranks : {1, 4}) {
    auto device = ResolveDeviceCollectives("device", DeviceKind::kCpu, ranks);
    ASSERT_TRUE(device.ok());
    EXPECT_TRUE(*device) << ranks << " ranks: a world of one checks the device path";
    auto host = ResolveDeviceCollectives("host", DeviceKind::kCuda, ranks);
    ASSERT_TRUE(host.ok());
    EXPECT_FALSE(*host);
  }
  auto bad = ResolveDeviceCollectives("nccl", DeviceKind::kCuda, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, host or device"), std::string::npos);
}

}  // namespace
}  // namespace tierflow
