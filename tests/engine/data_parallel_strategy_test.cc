// The data-parallel strategy on its own: one process is a world of one
// (whole units, every micro-batch, an exchange with itself), several ranks
// cut every unit at the norm's chunks, and the decision's exchange combines
// the ranks' reports into the same sums and loss as one process's.
#include "engine/data_parallel_strategy.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/grad_stats.h"

namespace tierflow {
namespace {

// Rank `rank` of `world` over `kind` buffers; no collective is ever called.
class FakeRank final : public comm::Communicator {
 public:
  FakeRank(int rank, int world, comm::BufferKind kind = comm::BufferKind::kHost)
      : rank_(rank), world_(world), kind_(kind) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  comm::BufferKind buffers() const override { return kind_; }
  std::string_view backend() const override { return "fake"; }
  Status ReduceScatterSum(const void*, DType, const comm::Partition&, float*, bool) override {
    return Called();
  }
  Status AllGather(const void*, size_t, const comm::Partition&, void*) override { return Called(); }
  Status Broadcast(void*, size_t, int) override { return Called(); }
  Status Barrier() override { return Called(); }

 private:
  static Status Called() { return InternalError("a collective was called"); }
  int rank_, world_;
  comm::BufferKind kind_;
};

bool Mentions(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

const uint64_t kChunk = kGradStatsChunkElems;
// Units of 3.5 chunks and of a third of one.
const std::vector<UnitInfo> kUnits = {{"big", 3 * kChunk + kChunk / 2}, {"small", kChunk / 3}};

DataParallelStrategy Make(comm::Communicator* comm, int micro_batches,
                          comm::Communicator* device_comm = nullptr) {
  auto s = DataParallelStrategy::Create(kUnits, {comm, device_comm, micro_batches});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(DataParallelStrategy, OneProcessIsAWorldOfOne) {
  const DataParallelStrategy one = Make(nullptr, 0);
  EXPECT_FALSE(one.collective());
  EXPECT_EQ(one.rank(), 0);
  EXPECT_EQ(one.world(), 1);
  EXPECT_EQ(one.local_micro(), 0);  // any number
  EXPECT_EQ(one.part(0).size(0), kUnits[0].num_params);
  EXPECT_EQ(one.Chunks(0), 4u + 1u);
  EXPECT_EQ(one.LocalMicroBatches(5).value(), 5);
  EXPECT_EQ(one.GlobalMicroBatch(3), 3);
  // Its layout is MakeSubGroups' of the whole units.
  const SubGroupRule rule{SubGroupCut::kSlices, 5000};
  const SubGroupLayout a = one.Layout(kUnits, rule).value();
  const SubGroupLayout b = MakeSubGroups(kUnits, rule).value();
  ASSERT_EQ(a.groups.size(), b.groups.size());
  for (size_t g = 0; g < a.groups.size(); ++g) {
    EXPECT_EQ(a.groups[g].global_offset, b.groups[g].global_offset);
    EXPECT_EQ(a.groups[g].num_params, b.groups[g].num_params);
    EXPECT_EQ(a.groups[g].name, b.groups[g].name);
  }
  // A host communicator of one rank without device collectives is one process too.
  FakeRank self(0, 1);
  EXPECT_FALSE(Make(&self, 2).collective());
}

TEST(DataParallelStrategy, SeveralRanksShareUnitsAtChunksAndMicroBatchesInTurn) {
  FakeRank r1(1, 3);
  const DataParallelStrategy s = Make(&r1, 6);
  EXPECT_TRUE(s.collective());
  EXPECT_EQ(s.local_micro(), 2);
  // 4 chunks over 3 ranks: 2, 2, 0; the small unit's one chunk on rank 0.
  EXPECT_EQ(s.part(0).size(0), 2 * kChunk);
  EXPECT_EQ(s.part(0).size(1), kChunk + kChunk / 2);
  EXPECT_EQ(s.part(0).size(2), 0u);
  EXPECT_EQ(s.part(1).size(1), 0u);
  EXPECT_EQ(s.Chunks(0), 3u);
  EXPECT_EQ(s.Chunks(1), 2u);
  EXPECT_EQ(s.Chunks(2), 0u);
  EXPECT_EQ(s.ChunkBegin(0, 1), 2u);
  EXPECT_EQ(s.GlobalMicroBatch(0), 1);
  EXPECT_EQ(s.GlobalMicroBatch(1), 4);
  const SubGroupLayout layout =
      s.Layout(kUnits, SubGroupRule{SubGroupCut::kSlices, 1 << 20}).value();
  EXPECT_EQ(layout.total_params, kChunk + kChunk / 2);
  EXPECT_TRUE(Mentions(s.LocalMicroBatches(4).status(), "4 micro-batches cannot be shared by 3"));
  EXPECT_TRUE(Mentions(s.Layout({kUnits[0]}, SubGroupRule{SubGroupCut::kSlices, 1}).status(),
                       "a layout of 1 units from a strategy made for 2"));
}

TEST(DataParallelStrategy, TheExchangeOfOneIsItsOwnReport) {
  const DataParallelStrategy one = Make(nullptr, 2);
  // Chunk sums: 4 for "big", 1 for "small".
  auto t = one.Exchange({1, 2, 3, 4, 10}, {0.5, 0.25}, true, {0.75, 0.25}, nullptr);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->unit_sum_squares, (std::vector<double>{10, 10}));
  EXPECT_EQ(t->unit_non_finite, (std::vector<char>{0, 0}));
  EXPECT_EQ(t->loss, static_cast<float>(0.75 * 0.5 + 0.25 * 0.25));
  EXPECT_TRUE(t->stop_requested);
  EXPECT_TRUE(Mentions(one.Exchange({1, 2, 3, 4, 10}, {0.5}, false, {1}, nullptr).status(),
                       "step posted 1 losses, expected 2"));
}

TEST(DataParallelStrategy, SeveralRanksCombineToOneProcesssSumsAndLoss) {
  // Three ranks of two micro-batches each report what one process would
  // see over six: the combined unit sums and loss are its bits.
  FakeRank r0(0, 3);
  const DataParallelStrategy s = Make(&r0, 6);
  const comm::Partition reports = s.Reports().value();
  const std::vector<double> chunk = {0.1, 0.2, 0.3, 0.4, 0.7};  // big's 4, small's 1, in order
  const std::vector<double> losses = {1.5, 2.5, 3.5, 4.5, 5.5, 6.5};  // global micro-batch k
  const std::vector<double> weights = {0.1, 0.2, 0.3, 0.15, 0.15, 0.1};
  std::vector<double> all(reports.total());
  // Rank 0: chunks 0-1 of big, small's; rank 1: chunks 2-3 of big; rank 2: none.
  const std::vector<std::vector<double>> sums = {{0.1, 0.2, 0.7}, {0.3, 0.4}, {}};
  for (int r = 0; r < 3; ++r) {
    double* own = all.data() + reports.begin(r);
    std::copy(sums[r].begin(), sums[r].end(), own);
    own[sums[r].size()] = losses[r];
    own[sums[r].size() + 1] = losses[3 + r];
    own[sums[r].size() + 2] = r == 2 ? 1.0 : 0.0;
  }
  const DataParallelStrategy::StepTotals t = s.Combine(all, reports, weights);
  const DataParallelStrategy one = Make(nullptr, 6);
  std::vector<double> one_losses = losses;
  auto o = one.Exchange(chunk, one_losses, false, weights, nullptr);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(t.unit_sum_squares, o->unit_sum_squares);
  EXPECT_EQ(t.loss, o->loss);
  EXPECT_TRUE(t.stop_requested);  // rank 2 asked
  EXPECT_FALSE(o->stop_requested);
}

TEST(DataParallelStrategy, ANonFiniteChunkMarksItsUnit) {
  const DataParallelStrategy one = Make(nullptr, 1);
  auto t = one.Exchange({1, NAN, 3, 4, 10}, {0.5}, false, {1}, nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->unit_non_finite, (std::vector<char>{1, 0}));
}

TEST(DataParallelStrategy, RefusesCommunicatorsThatDisagree) {
  FakeRank device(0, 2, comm::BufferKind::kDevice), host(0, 2),
      other(1, 2, comm::BufferKind::kDevice);
  auto refused = [](comm::Communicator* c, comm::Communicator* d, int m) {
    return DataParallelStrategy::Create(kUnits, {c, d, m}).status();
  };
  EXPECT_TRUE(Mentions(refused(&device, nullptr, 2), "comm must be over host buffers"));
  EXPECT_TRUE(Mentions(refused(&host, &host, 2), "device_comm (fake) is not over device buffers"));
  EXPECT_TRUE(Mentions(refused(&host, &other, 2), "device_comm is rank 1 of 2 but comm is rank 0"));
  EXPECT_TRUE(Mentions(refused(nullptr, &device, 2), "device_comm without comm"));
  EXPECT_TRUE(Mentions(refused(&host, nullptr, 3), "multiple of the world size"));
  EXPECT_TRUE(Mentions(refused(&host, nullptr, 0), "multiple of the world size"));
}

}  // namespace
}  // namespace tierflow
