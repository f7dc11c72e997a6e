// The store's throughput measurement, the tune sweep and the start-up probe:
// what they measure, what they choose (by the rule, from their own figures),
// that bad input is refused by name, and that nothing is left on disk (a
// killed process's leftovers are removed by the next measurement). No timing
// is asserted: the figures depend on the machine.
#include "offload/nvme_tune.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "offload/store_throughput.h"
#include "tests/offload/offload_test_util.h"

namespace tierflow::offload {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::ScratchDir;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A pid that is not running: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST(StoreThroughput, MovesTheBytesBothWaysAndLeavesNothing) {
  ScratchDir dir;
  StoreThroughputOptions o;
  o.directories = {dir.path()};
  o.io = {256u << 10, 4, 2};
  o.num_bytes = 5u << 20;  // the last transfer is short: 5 MiB in 2 MiB chunks
  o.chunk_bytes = 2u << 20;
  o.in_flight = 2;
  auto r = MeasureStoreThroughput(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_bytes, 5u << 20);
  EXPECT_GT(r->write_gb_per_second, 0);
  EXPECT_GT(r->read_gb_per_second, 0);
  EXPECT_TRUE(r->files_registered);
  EXPECT_TRUE(Entries(dir.path()).empty()) << ::testing::PrintToString(Entries(dir.path()));
}

TEST(StoreThroughput, RemovesWhatAKilledMeasurementLeftAndNothingElse) {
  ScratchDir dir;
  const std::string stale = dir.path() + "/tierflow-probe-" + std::to_string(DeadPid()) + "-0";
  fs::create_directories(stale + "/tierflow-swap/run");
  std::ofstream(stale + "/tierflow-swap/run/state-0.swap") << "left behind";
  const std::string live = dir.path() + "/tierflow-probe-1-0";  // pid 1 runs
  fs::create_directories(live);
  fs::create_directories(dir.path() + "/tierflow-probe-notapid");
  std::ofstream(dir.path() + "/keep.txt") << "not ours";
  StoreThroughputOptions o;
  o.directories = {dir.path()};
  o.io = {64u << 10, 4, 1};
  o.num_bytes = 1u << 20;
  o.chunk_bytes = 256u << 10;
  ASSERT_TRUE(MeasureStoreThroughput(o).ok());
  EXPECT_THAT(Entries(dir.path()),
              ::testing::ElementsAre("keep.txt", "tierflow-probe-1-0", "tierflow-probe-notapid"));
}

TEST(StoreThroughput, RefusesBadSettingsByName) {
  ScratchDir dir;
  StoreThroughputOptions o;
  o.directories = {dir.path()};
  o.num_bytes = 1u << 20;
  o.chunk_bytes = 256u << 10;
  o.io.block_size_bytes = 1000;
  EXPECT_THAT(MeasureStoreThroughput(o).status().message(), HasSubstr("block_size_bytes is 1000"));
  o.io.block_size_bytes = 64u << 10;
  o.io.queue_depth = 0;
  EXPECT_THAT(MeasureStoreThroughput(o).status().message(), HasSubstr("queue_depth is 0"));
  o.io.queue_depth = 4;
  o.io.num_rings = 65;
  EXPECT_THAT(MeasureStoreThroughput(o).status().message(), HasSubstr("num_rings is 65"));
  o.io.num_rings = 1;
  o.chunk_bytes = 5000;
  EXPECT_THAT(MeasureStoreThroughput(o).status().message(), HasSubstr("transfer size 5000"));
  o.chunk_bytes = 256u << 10;
  o.in_flight = 0;
  EXPECT_THAT(MeasureStoreThroughput(o).status().message(), HasSubstr("in flight 0"));
  o.in_flight = 2;
  o.directories = {dir.path() + "/missing"};
  EXPECT_THAT(MeasureStoreThroughput(o).status().message(), HasSubstr("does not exist"));
  o.directories = {dir.path(), dir.path()};
  EXPECT_THAT(MeasureStoreThroughput(o).status().message(), HasSubstr("listed twice"));
  EXPECT_TRUE(Entries(dir.path()).empty());
}

double BothWays(const NvmeTunePoint& p) { return p.SecondsPerGbBothWays(); }

TEST(NvmeTune, SweepsBothStagesAndChoosesByItsOwnFigures) {
  ScratchDir dir;
  NvmeTuneOptions o;
  o.directories = {dir.path()};
  o.bytes_per_point = 2u << 20;
  o.chunk_bytes = 512u << 10;
  o.block_sizes = {64u << 10, 256u << 10};
  o.queue_depths = {2, 8};
  o.rings = {1, 2};
  o.in_flights = {1, 2};
  int reported = 0;
  o.on_point = [&](const NvmeTunePoint&) { ++reported; };
  auto r = TuneNvme(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Stage 1: 2 blocks x 2 depths at 1 ring, 2 in flight, each beside the raw
  // loop; stage 2: rings x in flight at stage 1's choice, less the point
  // stage 1 measured.
  ASSERT_EQ(r->points.size(), 4u + 3u);
  EXPECT_EQ(reported, 7);
  for (size_t i = 0; i < 4; ++i) {
    const NvmeTunePoint& p = r->points[i];
    EXPECT_EQ(p.io.block_size_bytes, o.block_sizes[i / 2]);
    EXPECT_EQ(p.io.queue_depth, o.queue_depths[i % 2]);
    EXPECT_EQ(p.io.num_rings, 1u);
    EXPECT_EQ(p.in_flight, 2u);
    EXPECT_GT(p.raw_write_gb_per_second, 0);
    EXPECT_GT(p.raw_read_gb_per_second, 0);
  }
  const NvmeTunePoint stage1 = *std::min_element(
      r->points.begin(), r->points.begin() + 4,
      [](const NvmeTunePoint& a, const NvmeTunePoint& b) { return BothWays(a) < BothWays(b); });
  for (size_t i = 4; i < r->points.size(); ++i) {
    const NvmeTunePoint& p = r->points[i];
    EXPECT_EQ(p.io.block_size_bytes, stage1.io.block_size_bytes);
    EXPECT_EQ(p.io.queue_depth, stage1.io.queue_depth);
    EXPECT_FALSE(p.io.num_rings == 1 && p.in_flight == 2) << "measured twice";
    EXPECT_EQ(p.raw_write_gb_per_second, 0) << "no raw loop in stage 2";
  }
  for (const NvmeTunePoint& p : r->points) {
    EXPECT_LE(BothWays(r->chosen), BothWays(p));
    EXPECT_GE(r->best_write.write_gb_per_second, p.write_gb_per_second);
    EXPECT_GE(r->best_read.read_gb_per_second, p.read_gb_per_second);
    EXPECT_GE(r->raw_best_write_gb_per_second, p.raw_write_gb_per_second);
    EXPECT_GE(r->raw_best_read_gb_per_second, p.raw_read_gb_per_second);
  }
  EXPECT_TRUE(r->raw_best_write_block_bytes == (64u << 10) ||
              r->raw_best_write_block_bytes == (256u << 10));
  EXPECT_TRUE(Entries(dir.path()).empty()) << ::testing::PrintToString(Entries(dir.path()));
}

TEST(NvmeTune, RepeatsMeasureEveryPointRoundAfterRoundAndKeepTheBest) {
  ScratchDir dir;
  NvmeTuneOptions o;
  o.directories = {dir.path()};
  o.bytes_per_point = 1u << 20;
  o.chunk_bytes = 256u << 10;
  o.block_sizes = {64u << 10};
  o.queue_depths = {2, 4};
  o.rings = {1};
  o.in_flights = {2};
  o.repeat = 3;
  std::vector<NvmeTunePoint> runs;
  o.on_point = [&](const NvmeTunePoint& p) { runs.push_back(p); };
  auto r = TuneNvme(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->points.size(), 2u);  // stage 2 has nothing new to measure
  ASSERT_EQ(runs.size(), 6u);
  for (size_t i = 0; i < runs.size(); ++i) {
    // Round after round: depth 2, depth 4, depth 2, ...
    EXPECT_EQ(runs[i].io.queue_depth, i % 2 == 0 ? 2u : 4u);
  }
  for (size_t k = 0; k < 2; ++k) {
    double w = 0, rd = 0;
    for (size_t i = k; i < runs.size(); i += 2) {
      w = std::max(w, runs[i].write_gb_per_second);
      rd = std::max(rd, runs[i].read_gb_per_second);
    }
    EXPECT_EQ(r->points[k].write_gb_per_second, w);
    EXPECT_EQ(r->points[k].read_gb_per_second, rd);
  }
}

TEST(NvmeTune, RefusesEmptyOrOutOfRangeCandidates) {
  ScratchDir dir;
  NvmeTuneOptions o;
  o.directories = {dir.path()};
  o.block_sizes = {};
  EXPECT_THAT(TuneNvme(o).status().message(), HasSubstr("no block size to try"));
  o.block_sizes = {1u << 20};
  o.rings = {0};
  EXPECT_THAT(TuneNvme(o).status().message(), HasSubstr("ring count 0 is out of range"));
  o.rings = {1};
  o.in_flights = {65};
  EXPECT_THAT(TuneNvme(o).status().message(), HasSubstr("transfers in flight 65"));
  o.directories.clear();
  EXPECT_THAT(TuneNvme(o).status().message(), HasSubstr("no directory"));
}

TEST(NvmeProbe, MeasuresEachCandidateChoosesTheLeastTimeAndCleansUp) {
  ScratchDir dir;
  NvmeProbeOptions o;
  o.directories = {dir.path()};
  o.bytes_per_point = 2u << 20;
  o.chunk_bytes = 512u << 10;
  o.block_sizes = {64u << 10, 128u << 10, 512u << 10};
  auto r = ProbeNvme(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->points.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r->points[i].io.block_size_bytes, o.block_sizes[i]);
    EXPECT_EQ(r->points[i].io.queue_depth, ProbeQueueDepth(o.block_sizes[i]));
    EXPECT_EQ(r->points[i].io.num_rings, 1u);
    EXPECT_EQ(r->points[i].raw_write_gb_per_second, 0) << "the probe runs the store only";
    EXPECT_LE(BothWays(r->chosen), BothWays(r->points[i]));
  }
  EXPECT_NE(std::find(o.block_sizes.begin(), o.block_sizes.end(), r->chosen.io.block_size_bytes),
            o.block_sizes.end());
  EXPECT_TRUE(Entries(dir.path()).empty()) << ::testing::PrintToString(Entries(dir.path()));
}

TEST(NvmeProbe, PairsAboutSixtyFourMiBInFlightWithEachBlockSize) {
  EXPECT_EQ(ProbeQueueDepth(4096), 32u);
  EXPECT_EQ(ProbeQueueDepth(1u << 20), 32u);
  EXPECT_EQ(ProbeQueueDepth(4u << 20), 16u);
  EXPECT_EQ(ProbeQueueDepth(16u << 20), 4u);
  EXPECT_EQ(ProbeQueueDepth(64u << 20), 2u);
  EXPECT_EQ(ProbeQueueDepth(256u << 20), 2u);
}

}  // namespace
}  // namespace tierflow::offload
