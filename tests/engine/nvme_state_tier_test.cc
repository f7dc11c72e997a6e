// NvmeStateTier: sub-group state through a few pinned slots, with read-ahead,
// write-behind and (for speculation) two copies per sub-group. Every path
// (read-ahead hit, a slot taken over while its write is in flight, waiting
// for a write to free a slot, dropping a read-ahead) must hand back the state
// last released, whatever order the I/O lands in.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/scratch_dir.h"

#include "engine/nvme_state_tier.h"

namespace tierflow {
namespace {

constexpr uint64_t kGroupParams = 3000;  // not a multiple of 1024: arrays are padded
constexpr int kGroups = 6;

class NvmeStateTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = CreateDevice({.kind = DeviceChoice::kCpu, .memory_capacity_bytes = 64ull << 20});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    device_ = std::move(d).value();
    std::vector<UnitInfo> units;
    for (int u = 0; u < kGroups; ++u) units.push_back({"unit." + std::to_string(u), kGroupParams});
    layout_ = MakeSubGroups(units, SubGroupRule{SubGroupCut::kSlices, kGroupParams}).value();
  }

  std::unique_ptr<NvmeStateTier> MakeTier(int slots, bool two_copies) {
    NvmeTierOptions o;
    o.swap.paths = {dir_.path()};
    o.slots = slots;
    o.two_copies = two_copies;
    o.swap.io.block_size_bytes = 4096;
    std::vector<int> all;
    for (int g = 0; g < kGroups; ++g) all.push_back(g);
    auto t = NvmeStateTier::Create(layout_, all, o, *device_);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  // Value of array a (0 master, 1 exp_avg, 2 exp_avg_sq), element i, of g's
  // state after `version` updates.
  static float Value(int g, int a, size_t i, int version) {
    return static_cast<float>(g * 100000 + a * 10000 + version) + static_cast<float>(i % 97) / 128;
  }

  static void Fill(const StateView& v, int g, int version) {
    float* arrays[3] = {v.master, v.exp_avg, v.exp_avg_sq};
    for (int a = 0; a < 3; ++a) {
      for (size_t i = 0; i < kGroupParams; ++i) arrays[a][i] = Value(g, a, i, version);
    }
  }

  static void ExpectState(const StateView& v, int g, int version) {
    const float* arrays[3] = {v.master, v.exp_avg, v.exp_avg_sq};
    for (int a = 0; a < 3; ++a) {
      for (size_t i = 0; i < kGroupParams; ++i) {
        if (arrays[a][i] != Value(g, a, i, version)) {
          ADD_FAILURE() << "group " << g << " array " << a << " element " << i << ": "
                        << arrays[a][i] << ", expected version " << version;
          return;
        }
      }
    }
  }

  void WriteAll(NvmeStateTier& tier) {
    std::vector<float> m(kGroupParams), e(kGroupParams), s(kGroupParams);
    for (int g = 0; g < kGroups; ++g) {
      Fill(StateView{m.data(), e.data(), s.data()}, g, 0);
      ASSERT_TRUE(tier.Write(g, m.data(), e.data(), s.data()).ok());
    }
  }

  testing_common::ScratchDir dir_{"tierflow-nvme-tier-"};
  std::unique_ptr<Device> device_;
  SubGroupLayout layout_;
};

// The optimizer's access pattern: read ahead, update, write behind, for
// several passes; each pass must see the previous pass's values.
TEST_F(NvmeStateTierTest, ReadAheadUpdateWriteBehindKeepsEveryUpdate) {
  for (bool two_copies : {false, true}) {
    for (int slots : {2, 3, 4}) {
      SCOPED_TRACE("slots " + std::to_string(slots) + (two_copies ? ", two copies" : ""));
      auto tier = MakeTier(slots, two_copies);
      ASSERT_NE(tier, nullptr);
      WriteAll(*tier);
      for (int pass = 0; pass < 3; ++pass) {
        for (int g = 0; g < kGroups; ++g) {
          for (int a = g + 1; a < kGroups && a < g + slots; ++a)
            ASSERT_TRUE(tier->Prefetch(a).ok());
          auto v = tier->Acquire(g);
          ASSERT_TRUE(v.ok()) << v.status().ToString();
          ExpectState(*v, g, pass);
          Fill(*v, g, pass + 1);
          ASSERT_TRUE(tier->Release(g, /*modified=*/true).ok());
        }
      }
      ASSERT_TRUE(tier->Flush().ok());
      std::vector<float> m(kGroupParams), e(kGroupParams), s(kGroupParams);
      for (int g = 0; g < kGroups; ++g) {
        ASSERT_TRUE(tier->Read(g, m.data(), e.data(), s.data()).ok());
        ExpectState(StateView{m.data(), e.data(), s.data()}, g, 3);
      }
    }
  }
}

// Read with arrays left null (a checkpoint streams one array at a time) reads
// only the store blocks of the others, and hands each back whole; the
// speculative copy is read the same way.
TEST_F(NvmeStateTierTest, ReadingOneArrayReadsOnlyItsBlocks) {
  for (bool two_copies : {false, true}) {
    SCOPED_TRACE(two_copies ? "two copies" : "one copy");
    auto tier = MakeTier(2, two_copies);
    ASSERT_NE(tier, nullptr);
    WriteAll(*tier);
    const uint64_t array_bytes = (kGroupParams * 4 + 4095) / 4096 * 4096;  // one block here
    std::vector<float> got[3];
    for (auto& a : got) a.assign(kGroupParams, -1.0f);
    for (int g = 0; g < kGroups; ++g) {
      for (int a = 0; a < 3; ++a) {
        const uint64_t before = tier->Stats().bytes_read;
        ASSERT_TRUE(tier->Read(g, a == 0 ? got[0].data() : nullptr,
                               a == 1 ? got[1].data() : nullptr, a == 2 ? got[2].data() : nullptr)
                        .ok());
        EXPECT_EQ(tier->Stats().bytes_read - before, array_bytes)
            << "group " << g << " array " << a;
      }
      ExpectState(StateView{got[0].data(), got[1].data(), got[2].data()}, g, 0);
      // master and exp_avg_sq: the blocks from the first to the last asked for.
      const uint64_t before = tier->Stats().bytes_read;
      ASSERT_TRUE(tier->Read(g, got[0].data(), nullptr, got[2].data()).ok());
      EXPECT_EQ(tier->Stats().bytes_read - before, 3 * array_bytes);
      const uint64_t none = tier->Stats().bytes_read;
      ASSERT_TRUE(tier->Read(g, nullptr, nullptr, nullptr).ok());
      EXPECT_EQ(tier->Stats().bytes_read, none);
    }
  }
}

// Read-ahead must not stall behind write-behind: with every slot but one
// writing, PrefetchWaitingForWrites waits for a write and starts the read,
// and the read sees the state that write stored.
TEST_F(NvmeStateTierTest, PrefetchWaitingForWritesStartsTheReadOnceASlotFrees) {
  auto tier = MakeTier(2, /*two_copies=*/false);
  ASSERT_NE(tier, nullptr);
  WriteAll(*tier);
  for (int g : {0, 1}) {
    auto v = tier->Acquire(g);
    ASSERT_TRUE(v.ok());
    Fill(*v, g, 1);
    ASSERT_TRUE(tier->Release(g, true).ok());  // both slots now write (or have written)
  }
  const uint64_t read_before = tier->Stats().bytes_read;
  ASSERT_TRUE(tier->PrefetchWaitingForWrites(2).ok());
  EXPECT_GT(tier->Stats().bytes_read, read_before) << "no read was started for group 2";
  // Group 0's write is on disk (or its slot is still being written): either
  // way Acquire must give the new values, without losing the read-ahead of 2.
  for (int g : {2, 0, 1}) {
    auto v = tier->Acquire(g);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectState(*v, g, g == 2 ? 0 : 1);
    ASSERT_TRUE(tier->Release(g, false).ok());
  }
}

// More read-aheads than slots allow are skipped, and an Acquire of a group
// that was not read ahead still works when every slot holds a read-ahead.
TEST_F(NvmeStateTierTest, AcquireDropsAReadAheadWhenNoSlotIsFree) {
  auto tier = MakeTier(2, /*two_copies=*/false);
  ASSERT_NE(tier, nullptr);
  WriteAll(*tier);
  for (int g = 0; g < kGroups; ++g) ASSERT_TRUE(tier->Prefetch(g).ok());
  for (int g : {5, 4, 0, 3}) {
    auto v = tier->Acquire(g);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectState(*v, g, 0);
    ASSERT_TRUE(tier->Release(g, false).ok());
  }
}

// Two copies: a speculative update streams to the other copy; Abort keeps the
// current one, Commit makes the new one current, across read-ahead.
TEST_F(NvmeStateTierTest, SpeculativeCopyIsInvisibleUntilCommitted) {
  auto tier = MakeTier(3, /*two_copies=*/true);
  ASSERT_NE(tier, nullptr);
  WriteAll(*tier);
  for (int g : {0, 1}) {
    auto v = tier->Acquire(g);
    ASSERT_TRUE(v.ok());
    Fill(*v, g, 7);
    ASSERT_TRUE(tier->ReleaseSpeculative(g).ok());
  }
  ASSERT_TRUE(tier->Commit(0).ok());
  ASSERT_TRUE(tier->Abort(1).ok());
  ASSERT_TRUE(tier->PrefetchWaitingForWrites(1).ok());
  ASSERT_TRUE(tier->PrefetchWaitingForWrites(0).ok());
  for (int g : {1, 0}) {
    auto v = tier->Acquire(g);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    ExpectState(*v, g, g == 0 ? 7 : 0);
    ASSERT_TRUE(tier->Release(g, false).ok());
  }
  EXPECT_FALSE(tier->Commit(1).ok()) << "nothing is pending for group 1 any more";
}

}  // namespace
}  // namespace tierflow
