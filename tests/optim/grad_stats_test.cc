// GradStats against a double-precision sum, the non-finite flag wherever the
// bad value sits, finite gradients whose squares overflow fp32, and
// bit-identical sums for any alignment (thread counts: concurrency_test.cc).
//
// Tolerance: the sum is accumulated in fp32 within 64-element blocks (4
// additions per lane, then a 4-level tree over 16 lanes: 8 additions deep,
// all terms non-negative), then in double: relative error <= ~8 * 2^-24 =
// 5e-7; we allow 2e-6.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "optim/grad_accumulate.h"
#include "optim/grad_stats.h"
#include "optim/optim_reference.h"
#include "optim/optim_spans.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

using optim_test::GradBuffer;
using optim_test::GradGenerator;

double ReferenceSumSquares(const GradBuffer& g) {
  double sum = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = ReferenceGrad(g.data(), g.dtype(), i);
    sum += x * x;
  }
  return sum;
}

const size_t kLarge = 6 * kOptimChunkElems + 999;

TEST(GradStats, SumOfSquaresMatchesDoubleReferenceAtEveryLevel) {
  for (Isa isa : SupportedIsas()) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4096 + 3}, kLarge}) {
        for (size_t offset : {0, 1, 7}) {
          SCOPED_TRACE(::testing::Message() << IsaName(isa) << " " << DTypeName(dtype) << " n " << n
                                            << " offset " << offset);
          GradBuffer g(dtype, n, offset);
          GradGenerator(n, 9).Fill(g);
          auto stats = GradStats(g.data(), dtype, n, isa);
          ASSERT_TRUE(stats.ok()) << stats.status().ToString();
          EXPECT_FALSE(stats->has_non_finite);
          const double want = ReferenceSumSquares(g);
          EXPECT_NEAR(stats->sum_squares, want, 2e-6 * want);
        }
      }
    }
  }
}

TEST(GradStats, FlagsInfAndNanAnywhere) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t bad_index : {size_t{0}, size_t{128}, kLarge / 2, kLarge - 1}) {
      for (float bad : {INFINITY, -INFINITY, NAN}) {
        GradBuffer g(dtype, kLarge, 0);
        for (size_t i = 0; i < kLarge; ++i) g.Set(i, 0.25f);
        g.Set(bad_index, bad);
        auto stats = GradStats(g.data(), dtype, kLarge);
        ASSERT_TRUE(stats.ok());
        EXPECT_TRUE(stats->has_non_finite)
            << DTypeName(dtype) << " index " << bad_index << " value " << bad;
        EXPECT_TRUE(std::isnan(stats->sum_squares));
      }
    }
  }
}

TEST(GradStats, FiniteGradientsWhoseSquaresOverflowFp32AreNotNonFinite) {
  // bf16 reaches 3e38; 1e30^2 = 1e60 overflows fp32 but not double.
  const size_t n = 1000;
  GradBuffer g(DType::kBF16, n, 0);
  for (size_t i = 0; i < n; ++i) g.Set(i, i == 500 ? 1e30f : 1.0f);
  auto stats = GradStats(g.data(), DType::kBF16, n);
  ASSERT_TRUE(stats.ok());
  EXPECT_FALSE(stats->has_non_finite);
  const double want = ReferenceSumSquares(g);
  EXPECT_TRUE(std::isfinite(stats->sum_squares));
  EXPECT_NEAR(stats->sum_squares, want, 1e-12 * want);
}

TEST(GradStats, BitIdenticalForAnyAlignment) {
  std::vector<double> sums;
  for (size_t offset : {0, 1, 3}) {
    GradBuffer g(DType::kF32, kLarge, offset);
    GradGenerator(kLarge, 2).Fill(g);
    auto stats = GradStats(g.data(), DType::kF32, kLarge);
    ASSERT_TRUE(stats.ok());
    sums.push_back(stats->sum_squares);
  }
  for (double s : sums) EXPECT_EQ(s, sums[0]);
}

// AccumulateGrads against a plain loop (acc = g, then acc += g, in fp32), and
// the fused accumulate-and-stats pass against the two calls: the same
// accumulator bits and the same sum bits, non-finite values included.
TEST(AccumulateGrads, MatchesPlainLoopAndFusedStatsMatchTwoPasses) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t n : {size_t{1}, size_t{63}, size_t{65}, kOptimChunkElems + 65, kLarge}) {
      for (bool poison : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " n " << n << " poison " << poison);
        GradBuffer g1(dtype, n, 1), g2(dtype, n, 0);
        GradGenerator(n, 4).Fill(g1);
        GradGenerator(n, 5).Fill(g2);
        if (poison) g2.Set(n / 2, NAN);
        std::vector<float> want(n), two_pass(n), fused(n);
        for (size_t i = 0; i < n; ++i) {
          want[i] = static_cast<float>(ReferenceGrad(g1.data(), dtype, i));
          want[i] += static_cast<float>(ReferenceGrad(g2.data(), dtype, i));
        }
        AccumulateGrads(two_pass.data(), g1.data(), dtype, n, /*first=*/true);
        AccumulateGrads(two_pass.data(), g2.data(), dtype, n, /*first=*/false);
        auto separate = GradStats(two_pass.data(), DType::kF32, n);
        ASSERT_TRUE(separate.ok());
        auto first = AccumulateGradsWithStats(fused.data(), g1.data(), dtype, n, true);
        ASSERT_TRUE(first.ok());
        auto both = AccumulateGradsWithStats(fused.data(), g2.data(), dtype, n, false);
        ASSERT_TRUE(both.ok());
        for (size_t i = 0; i < n; ++i) {
          if (std::isnan(want[i])) {
            ASSERT_TRUE(std::isnan(two_pass[i]) && std::isnan(fused[i])) << i;
            continue;
          }
          ASSERT_EQ(two_pass[i], want[i]) << i;
          ASSERT_EQ(fused[i], want[i]) << i;
        }
        EXPECT_EQ(both->has_non_finite, poison);
        EXPECT_EQ(separate->has_non_finite, poison);
        if (!poison) {
          EXPECT_EQ(both->sum_squares, separate->sum_squares);
        }
      }
    }
  }
  EXPECT_EQ(AccumulateGradsWithStats(nullptr, nullptr, DType::kF32, 2, true).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(GradStats, RejectsNullWithElements) {
  EXPECT_EQ(GradStats(nullptr, DType::kF32, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(GradStats(nullptr, DType::kF32, 0).ok());
}

// The per-chunk partials, added in chunk order, are GradStats' sum bit for
// bit, and so are the partials of pieces cut at chunk boundaries (a rank's
// partition) put back in order: the data-parallel norm rests on this.
TEST(GradChunkSquares, PartialsInChunkOrderAreGradStatsBitForBit) {
  for (Isa isa : SupportedIsas()) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " " << DTypeName(dtype));
      GradBuffer g(dtype, kLarge, 0);
      GradGenerator(kLarge, 11).Fill(g);
      const size_t chunks = GradStatsChunks(kLarge);
      ASSERT_EQ(chunks, 7u);
      std::vector<double> whole(chunks, -1.0);
      ASSERT_TRUE(GradChunkSquares(g.data(), dtype, kLarge, whole.data(), isa).ok());
      // Two pieces cut at chunk 3, as two ranks would hold them.
      const size_t cut = 3 * kGradStatsChunkElems;
      std::vector<double> pieces(chunks, -1.0);
      ASSERT_TRUE(GradChunkSquares(g.data(), dtype, cut, pieces.data(), isa).ok());
      const char* second = static_cast<const char*>(g.data()) + cut * DTypeSize(dtype);
      ASSERT_TRUE(GradChunkSquares(second, dtype, kLarge - cut, pieces.data() + 3, isa).ok());
      double sum_whole = 0, sum_pieces = 0;
      for (size_t c = 0; c < chunks; ++c) {
        sum_whole += whole[c];
        sum_pieces += pieces[c];
      }
      auto stats = GradStats(g.data(), dtype, kLarge, isa);
      ASSERT_TRUE(stats.ok());
      EXPECT_EQ(sum_whole, stats->sum_squares);
      EXPECT_EQ(sum_pieces, stats->sum_squares);
    }
  }
}

TEST(GradChunkSquares, ANonFiniteChunkIsNanAndTheOthersStay) {
  GradBuffer g(DType::kF32, kLarge, 0);
  GradGenerator(kLarge, 12).Fill(g);
  g.Set(2 * kGradStatsChunkElems + 5, INFINITY);
  std::vector<double> out(GradStatsChunks(kLarge));
  ASSERT_TRUE(GradChunkSquares(g.data(), DType::kF32, kLarge, out.data()).ok());
  for (size_t c = 0; c < out.size(); ++c) {
    EXPECT_EQ(std::isnan(out[c]), c == 2) << "chunk " << c;
  }
  EXPECT_EQ(GradChunkSquares(nullptr, DType::kF32, 5, out.data()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow
