// SimWrittenRanges against a plain reference (one flag per byte), over
// random sequences of writes, zeroings, finds and forgets; and the sim
// device's memsets and device copies through it: every byte reads what a
// real memset or copy would leave.
#include "device/sim/sim_written_ranges.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tierflow/device.h"
#include "tierflow/sim_profile.h"

namespace tierflow {
namespace {

TEST(SimWrittenRanges, MatchesAPerByteReference) {
  std::vector<char> arena(4096);
  std::vector<bool> ref(arena.size(), false);
  SimWrittenRanges set;
  std::mt19937 rng(7);
  for (int op = 0; op < 20000; ++op) {
    const size_t lo = rng() % arena.size();
    const size_t n = rng() % std::min<size_t>(300, arena.size() - lo + 1);
    switch (rng() % 4) {
      case 0:
        set.MarkWritten(arena.data() + lo, n);
        for (size_t i = lo; i < lo + n; ++i) ref[i] = true;
        break;
      case 1: {
        std::vector<bool> taken(arena.size(), false);
        char* prev_end = nullptr;
        for (const auto& [p, len] : set.TakeWritten(arena.data() + lo, n)) {
          ASSERT_GT(len, 0u);
          ASSERT_GE(p, arena.data() + lo);
          ASSERT_LE(p + len, arena.data() + lo + n);
          ASSERT_TRUE(prev_end == nullptr || p > prev_end) << "in order, disjoint, not adjacent";
          prev_end = p + len;
          for (size_t i = 0; i < len; ++i) taken[p - arena.data() + i] = true;
        }
        for (size_t i = lo; i < lo + n; ++i) {
          ASSERT_EQ(taken[i], ref[i]) << "op " << op << " byte " << i;
          ref[i] = false;
        }
        break;
      }
      case 2: {
        size_t seen = 0;
        for (const auto& [p, len] : set.FindWritten(arena.data() + lo, n)) {
          for (size_t i = 0; i < len; ++i) ASSERT_TRUE(ref[p - arena.data() + i]);
          seen += len;
        }
        size_t expected = 0;
        for (size_t i = lo; i < lo + n; ++i) expected += ref[i];
        ASSERT_EQ(seen, expected) << "op " << op;
        break;
      }
      default:
        set.Forget(arena.data() + lo, n);
        for (size_t i = lo; i < lo + n; ++i) ref[i] = false;
    }
  }
  // What is left is exactly the reference's written bytes.
  size_t runs = 0;
  for (size_t i = 0; i < ref.size(); ++i) runs += ref[i] && (i == 0 || !ref[i - 1]);
  EXPECT_EQ(set.num_ranges(), runs);
  std::vector<bool> rest(arena.size(), false);
  for (const auto& [p, len] : set.TakeWritten(arena.data(), arena.size())) {
    for (size_t i = 0; i < len; ++i) rest[p - arena.data() + i] = true;
  }
  EXPECT_EQ(rest, ref);
  EXPECT_EQ(set.num_ranges(), 0u);
}

// The device: random copies in, device copies, memsets (zero and not) and
// copies out on one stream, against a host mirror of what a GPU would hold.
TEST(SimWrittenRanges, SimMemsetsLeaveWhatARealMemsetLeaves) {
  DeviceOptions o;
  o.kind = DeviceChoice::kSim;
  o.sim = *FindBuiltinSimProfile("h100-sxm");
  auto dev = std::move(CreateDevice(o)).value();
  auto stream = std::move(dev->CreateStream("s")).value();
  const size_t n = 64 << 10;
  std::mt19937 rng(11);
  for (int round = 0; round < 3; ++round) {  // each round a fresh allocation, maybe the same pages
    auto buf = std::move(dev->Allocate(n, "b")).value();
    std::vector<uint8_t> mirror(n, 0), out(n);
    for (int op = 0; op < 300; ++op) {
      const size_t lo = rng() % n, len = rng() % std::min<size_t>(n - lo, 9000) + 1;
      uint8_t* dst = buf.as<uint8_t>() + lo;
      const int kind = static_cast<int>(rng() % 3);
      if (kind == 2) {  // a device copy, overlapping its source or not
        const size_t from = rng() % (n - len + 1);
        ASSERT_TRUE(stream->CopyDeviceToDevice(dst, buf.as<uint8_t>() + from, len).ok());
        std::memmove(mirror.data() + lo, mirror.data() + from, len);
      } else if (kind == 1) {
        std::vector<uint8_t> in(len);
        for (auto& b : in) b = static_cast<uint8_t>(rng());
        ASSERT_TRUE(stream->CopyHostToDevice(dst, in.data(), len).ok());
        ASSERT_TRUE(stream->Synchronize().ok());  // `in` dies here
        std::copy(in.begin(), in.end(), mirror.begin() + lo);
      } else {
        const int value = rng() % 4 == 0 ? 0x5A : 0;
        ASSERT_TRUE(stream->Memset(dst, value, len).ok());
        std::fill(mirror.begin() + lo, mirror.begin() + lo + len, static_cast<uint8_t>(value));
      }
    }
    ASSERT_TRUE(stream->CopyDeviceToHost(out.data(), buf.data(), n).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    ASSERT_EQ(out, mirror) << "round " << round;
    ASSERT_TRUE(stream->Memset(buf.data(), 0, n).ok());
    ASSERT_TRUE(stream->CopyDeviceToHost(out.data(), buf.data(), n).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    ASSERT_EQ(out, std::vector<uint8_t>(n, 0));
    // Freed while written: the next allocation (fresh zero pages, perhaps at
    // the same address) must still read and zero correctly.
    std::vector<uint8_t> ones(n, 1);
    ASSERT_TRUE(stream->CopyHostToDevice(buf.data(), ones.data(), n).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
  }
}

}  // namespace
}  // namespace tierflow
