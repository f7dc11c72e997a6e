// The optimizers under threads: results bit-identical for any oneTBB thread
// count (fixed chunks, per-chunk results reduced in order), and concurrent
// calls from several engine threads on disjoint sub-groups (re-entrancy)
// giving exactly what the same calls give one after another. Runs under TSan.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "optim/adam.h"
#include "optim/grad_stats.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

// Adam state for n parameters with bf16 gradients and an fp16 copy out.
struct AdamState {
  explicit AdamState(size_t n, uint32_t seed)
      : params(optim_test::RandomFloats(n, seed, -1, 1)),
        exp_avg(optim_test::RandomFloats(n, seed + 1, -0.01f, 0.01f)),
        exp_avg_sq(optim_test::RandomFloats(n, seed + 2, 0, 1e-4f)),
        grads(n),
        out(n) {
    auto g = optim_test::RandomFloats(n, seed + 3, -0.1f, 0.1f);
    for (size_t i = 0; i < n; ++i) grads[i] = FloatToBf16(g[i]);
  }
  OptimSpans Spans() {
    return OptimSpans{params.data(), exp_avg.data(), exp_avg_sq.data(), grads.data(),
                      DType::kBF16,  out.data(),     DType::kF16,       params.size()};
  }
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::vector<bf16> grads;
  std::vector<uint16_t> out;
};

AdamOptions Options() {
  AdamOptions o;
  o.lr = 1e-2f;
  o.weight_decay = 0.1f;
  return o;
}

TEST(OptimConcurrency, AdamIsBitIdenticalForAnyThreadCount) {
  const size_t n = 6 * kOptimChunkElems + 1234;
  std::vector<AdamState> runs;
  for (int threads : {1, 2, 3, 8}) {
    runs.emplace_back(n, 21);
    optim_test::WithThreads(threads, [&] {
      for (int64_t step = 1; step <= 2; ++step) {
        auto r = AdamStep(Options(), AdamStepArgs{step, 0.5f}, runs.back().Spans());
        ASSERT_TRUE(r.ok()) << r.status().ToString();
      }
    });
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    EXPECT_EQ(runs[0].params, runs[r].params) << "run " << r;
    EXPECT_EQ(runs[0].exp_avg, runs[r].exp_avg) << "run " << r;
    EXPECT_EQ(runs[0].exp_avg_sq, runs[r].exp_avg_sq) << "run " << r;
    EXPECT_EQ(runs[0].out, runs[r].out) << "run " << r;
  }
}

TEST(OptimConcurrency, NonFiniteFlagAndGradStatsDoNotDependOnThreadCount) {
  const size_t n = 5 * kOptimChunkElems + 77;
  auto g = optim_test::RandomFloats(n, 8, -3, 3);
  std::vector<double> sums;
  for (int threads : {1, 2, 5}) {
    optim_test::WithThreads(threads, [&] {
      auto stats = GradStats(g.data(), DType::kF32, n);
      ASSERT_TRUE(stats.ok());
      EXPECT_FALSE(stats->has_non_finite);
      sums.push_back(stats->sum_squares);

      AdamState state(n, 3);
      state.grads[4 * kOptimChunkElems + 5] = bf16{0x7f80};  // +Inf in the fifth chunk
      auto r = AdamStep(Options(), AdamStepArgs{}, state.Spans());
      ASSERT_TRUE(r.ok());
      EXPECT_TRUE(r->has_non_finite_grads) << threads << " threads";
    });
  }
  for (double s : sums) EXPECT_EQ(s, sums[0]);
}

TEST(OptimConcurrency, ConcurrentCallsOnDisjointSubGroupsMatchSequentialCalls) {
  // The engine steps several sub-groups at once from its own threads.
  const int kSubGroups = 4;
  const size_t n = 2 * kOptimChunkElems + 99;
  std::vector<AdamState> sequential, concurrent;
  for (int s = 0; s < kSubGroups; ++s) {
    sequential.emplace_back(n, 100 + s);
    concurrent.emplace_back(n, 100 + s);
  }
  for (int s = 0; s < kSubGroups; ++s) {
    for (int64_t step = 1; step <= 2; ++step) {
      ASSERT_TRUE(AdamStep(Options(), AdamStepArgs{step, 1.0f}, sequential[s].Spans()).ok());
    }
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(kSubGroups, 0);
  for (int s = 0; s < kSubGroups; ++s) {
    threads.emplace_back([&, s] {
      for (int64_t step = 1; step <= 2; ++step) {
        if (!AdamStep(Options(), AdamStepArgs{step, 1.0f}, concurrent[s].Spans()).ok()) {
          ++failures[s];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int s = 0; s < kSubGroups; ++s) {
    EXPECT_EQ(failures[s], 0);
    EXPECT_EQ(sequential[s].params, concurrent[s].params) << "sub-group " << s;
    EXPECT_EQ(sequential[s].exp_avg_sq, concurrent[s].exp_avg_sq) << "sub-group " << s;
    EXPECT_EQ(sequential[s].out, concurrent[s].out) << "sub-group " << s;
  }
}

}  // namespace
}  // namespace tierflow
