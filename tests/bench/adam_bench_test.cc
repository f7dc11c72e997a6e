// `bench adam`'s measurement loop on a small span: one result per case, in
// order, with the ratios taken against the faster probe shape; bad cases and
// options refused by name; and the --threads forms.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/adam_bench.h"

namespace tierflow {
namespace {

TEST(RunAdamBench, GivesOneResultPerCaseAgainstTheFastestProbe) {
  AdamBenchOptions o;
  o.params = 3 * 4096 + 5;
  o.iterations = 2;
  o.rounds = 1;  // one round: every figure is that round's, so the ratios are exact quotients
  const std::vector<Isa> levels = SupportedIsas();
  std::vector<AdamBenchCase> cases = {{1, levels.front(), DType::kF32, std::nullopt},
                                      {2, levels.back(), DType::kBF16, DType::kF16}};
  auto report = RunAdamBench(o, cases);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->probe_isa, StreamProbeIsa());
  ASSERT_EQ(report->results.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const AdamBenchResult& r = report->results[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(r.what.threads, cases[i].threads);
    EXPECT_EQ(r.what.isa, cases[i].isa);
    EXPECT_EQ(r.what.grad_dtype, cases[i].grad_dtype);
    EXPECT_EQ(r.what.out_dtype, cases[i].out_dtype);
    // One round: the limit is the fastest shape's rate, and names it.
    double fastest = 0;
    ProbeShape fastest_shape = ProbeShape::kBlocked;
    for (ProbeShape shape : kProbeShapes) {
      const double rate = r.probe_params_per_second[static_cast<int>(shape)];
      EXPECT_GT(rate, 0) << ProbeShapeName(shape);
      if (rate > fastest) fastest = rate, fastest_shape = shape;
    }
    EXPECT_DOUBLE_EQ(r.limit_params_per_second, fastest);
    EXPECT_EQ(r.limit_shape, fastest_shape);
    EXPECT_DOUBLE_EQ(r.ratio_to_limit, r.step_params_per_second / r.limit_params_per_second);
    EXPECT_EQ(r.peer_params_per_second.has_value(), report->peer_isa.has_value());
    if (r.peer_params_per_second) {
      EXPECT_DOUBLE_EQ(*r.ratio_to_peer, r.step_params_per_second / *r.peer_params_per_second);
      EXPECT_DOUBLE_EQ(*r.peer_ratio_to_limit,
                       *r.peer_params_per_second / r.limit_params_per_second);
    }
  }
  EXPECT_EQ(report->results[0].bytes_per_param, 28u);
  EXPECT_EQ(report->results[1].bytes_per_param, 28u);  // 24 for the state, bf16 grads, f16 out
}

TEST(RunAdamBench, RefusesBadOptionsAndCases) {
  AdamBenchOptions o;
  o.params = 64;
  const std::vector<AdamBenchCase> one = {{1, Isa::kBaseline, DType::kF32, std::nullopt}};
  o.rounds = 0;
  EXPECT_NE(RunAdamBench(o, one).status().message().find("--rounds"), std::string::npos);
  o.rounds = 1;
  o.params = 0;
  EXPECT_NE(RunAdamBench(o, one).status().message().find("--params"), std::string::npos);
  o.params = (uint64_t{1} << 62) + 1;  // 4 B a parameter would wrap a 64-bit size
  EXPECT_NE(RunAdamBench(o, one).status().message().find("beyond 2^40"), std::string::npos);
  o.params = 64;
  EXPECT_EQ(RunAdamBench(o, {{0, Isa::kBaseline, DType::kF32, std::nullopt}}).status().code(),
            StatusCode::kInvalidArgument);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (CpuSupportsIsa(isa)) continue;
    auto r = RunAdamBench(o, {{1, isa, DType::kF32, std::nullopt}});
    EXPECT_NE(r.status().message().find(IsaName(isa)), std::string::npos);
  }
}

TEST(ParseThreadRange, ReadsACountAllOrARange) {
  auto one = ParseThreadRange("3", 8);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->first, 3);
  EXPECT_EQ(one->last, 3);
  auto all = ParseThreadRange("0", 8);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->first, 8);
  EXPECT_EQ(all->last, 8);
  auto range = ParseThreadRange("2..8", 8);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->first, 2);
  EXPECT_EQ(range->last, 8);
  auto single = ParseThreadRange("1..1", 8);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->last, 1);
}

TEST(ParseThreadRange, RefusesBadFormsNamingTheTextAndTheLimit) {
  for (const char* bad : {"", "-1", "x", "9", "3..1", "0..2", "1..9", "1..", "..4", "1...4",
                          "1..2..3", " 2", "2 ", "1.5", "99999999999999999999"}) {
    auto r = ParseThreadRange(bad, 8);
    ASSERT_FALSE(r.ok()) << "'" << bad << "' was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--threads '" + std::string(bad) + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("<= 8"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tierflow
