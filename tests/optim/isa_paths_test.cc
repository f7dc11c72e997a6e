// Every instruction-set level this CPU runs (common/cpu_isa.h) gives the same
// bits as every other: AdamW and Adam-L2, Lion, SGD (plain, momentum at the
// first and a later step, nesterov), gradient accumulation, GradStats and the
// fused accumulate-and-stats pass, for every grad/out dtype combination, on
// inputs full of subnormals, ties, huge values, Inf and NaN, for every length
// 0..200 and large odd ones at several misalignments. (The same kernels
// against the double references: adam_test.cc, lion_sgd_test.cc,
// grad_stats_test.cc, which loop over the levels too.)
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/cpu_isa.h"
#include "optim/adam.h"
#include "optim/grad_accumulate.h"
#include "optim/grad_stats.h"
#include "optim/lion.h"
#include "optim/sgd.h"
#include "tests/common/special_floats.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

using optim_test::GradBuffer;
using optim_test::OffsetBuffer;
using testing_common::FiniteSpecialFloatBits;
using testing_common::MixedFloatBits;
using testing_common::NonFiniteFloatBits;

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
const std::optional<DType> kOuts[] = {std::nullopt, DType::kF32, DType::kBF16, DType::kF16};

std::vector<uint32_t> AllSpecials() {
  std::vector<uint32_t> bits = FiniteSpecialFloatBits();
  for (uint32_t b : NonFiniteFloatBits()) bits.push_back(b);
  return bits;
}

// Raw 16-bit codes no fp32 value rounds to, or worth having exactly: fp16
// signalling NaNs and subnormals, bf16 subnormals, negative zero.
const uint16_t kRaw16Codes[] = {0x0001, 0x03ff, 0x8001, 0x7c01, 0xfd55, 0x7e00,
                                0x0080, 0x807f, 0x8000, 0x7f81, 0xffc1, 0x7bff};

// Fills g with mixed normal values of `scale` and `specials` (every 3rd), and
// for 16-bit dtypes every 17th element with one of kRaw16Codes.
void FillMixed(GradBuffer& g, uint32_t seed, float scale, const std::vector<uint32_t>& specials,
               bool raw_codes) {
  const auto bits = MixedFloatBits(g.size(), seed, scale, specials, 3);
  for (size_t i = 0; i < g.size(); ++i) {
    if (raw_codes && g.dtype() != DType::kF32 && i % 17 == 16) {
      g.SetBits(i, kRaw16Codes[(i / 17) % (sizeof(kRaw16Codes) / sizeof(kRaw16Codes[0]))]);
    } else {
      g.Set(i, BitsToFloat(bits[i]));
    }
  }
}

// The lengths every test runs: 0..200 (every vector tail at every width) and
// large odd ones spanning several chunks.
std::vector<size_t> Lengths() {
  std::vector<size_t> n;
  for (size_t i = 0; i <= 200; ++i) n.push_back(i);
  n.push_back(3 * kOptimChunkElems + 777);
  n.push_back(kOptimChunkElems + 1);
  return n;
}

// Everything one optimizer step reads and writes, at a misalignment of
// `offset` elements, filled with mixed normal and special values.
struct StepState {
  StepState(size_t n, size_t offset, DType grad_dtype, std::optional<DType> out_dtype,
            uint32_t seed, const std::vector<uint32_t>& grad_specials)
      : n(n),
        params(n, offset),
        exp_avg(n, (offset + 1) % 4),
        exp_avg_sq(n, (offset + 2) % 4),
        grads(grad_dtype, n, (offset + 3) % 4),
        out(4 * n + 4, offset * 2),
        out_dtype(out_dtype) {
    // The state gets the gradients' specials too: NaN meets NaN in the update.
    const auto p = MixedFloatBits(n, seed, 1.0f, grad_specials, 7);
    const auto m = MixedFloatBits(n, seed + 1, 0.01f, grad_specials, 11);
    const auto v = MixedFloatBits(n, seed + 2, 1e-4f, grad_specials, 13);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(&params[i], &p[i], 4);
      std::memcpy(&exp_avg[i], &m[i], 4);
      exp_avg_sq[i] = std::fabs(BitsToFloat(v[i]));  // a second moment is >= 0
    }
    // Raw codes include NaNs: only where the specials do.
    FillMixed(grads, seed + 3, 0.01f, grad_specials,
              grad_specials.size() > FiniteSpecialFloatBits().size());
    std::memset(out.data(), 0x5a, out.size());
  }
  StepState(const StepState&) = default;

  OptimSpans Spans() {
    OptimSpans s;
    s.params = params.data();
    s.exp_avg = exp_avg.data();
    s.exp_avg_sq = exp_avg_sq.data();
    s.grads = grads.data();
    s.grad_dtype = grads.dtype();
    if (out_dtype) {
      s.out = out.data();
      s.out_dtype = *out_dtype;
    }
    s.n = n;
    return s;
  }

  size_t n;
  OffsetBuffer<float> params, exp_avg, exp_avg_sq;
  GradBuffer grads;
  OffsetBuffer<unsigned char> out;
  std::optional<DType> out_dtype;
};

bool SameBytes(const void* a, const void* b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

// Runs `step` on a copy of `initial` at every supported level and expects
// every output bit (and the non-finite report) to equal the first level's.
void ExpectLevelsAgree(const StepState& initial,
                       const std::function<StatusOr<StepResult>(OptimSpans, Isa)>& step,
                       const std::string& what) {
  std::optional<StepState> first;
  bool first_non_finite = false;
  Isa first_isa = Isa::kBaseline;
  for (Isa isa : SupportedIsas()) {
    StepState run = initial;
    auto r = step(run.Spans(), isa);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().ToString();
    if (!first) {
      first.emplace(run);
      first_non_finite = r->has_non_finite_grads;
      first_isa = isa;
      continue;
    }
    const size_t n = run.n;
    const std::string levels =
        what + ": " + std::string(IsaName(isa)) + " vs " + std::string(IsaName(first_isa));
    EXPECT_EQ(r->has_non_finite_grads, first_non_finite) << levels;
    EXPECT_TRUE(SameBytes(run.params.data(), first->params.data(), 4 * n)) << levels << " params";
    EXPECT_TRUE(SameBytes(run.exp_avg.data(), first->exp_avg.data(), 4 * n))
        << levels << " exp_avg";
    EXPECT_TRUE(SameBytes(run.exp_avg_sq.data(), first->exp_avg_sq.data(), 4 * n))
        << levels << " exp_avg_sq";
    EXPECT_TRUE(SameBytes(run.out.data(), first->out.data(), run.out.size())) << levels << " out";
  }
}

std::string Describe(const char* optimizer, DType grad, const std::optional<DType>& out, size_t n,
                     size_t offset) {
  return std::string(optimizer) + " grad " + std::string(DTypeName(grad)) + " out " +
         (out ? std::string(DTypeName(*out)) : "none") + " n " + std::to_string(n) + " offset " +
         std::to_string(offset);
}

// Each step function of the tests: a name and the call at a level.
struct StepCase {
  const char* name;
  std::function<StatusOr<StepResult>(OptimSpans, Isa)> step;
};

std::vector<StepCase> StepCases() {
  AdamOptions adamw;
  adamw.lr = 1e-2f;
  adamw.weight_decay = 0.1f;
  adamw.eps = 1e-8f;
  AdamOptions adam_l2 = adamw;
  adam_l2.decoupled = false;
  LionOptions lion;
  lion.lr = 1e-3f;
  lion.weight_decay = 0.1f;
  SgdOptions plain;
  plain.lr = 0.1f;
  plain.weight_decay = 0.01f;
  SgdOptions momentum = plain;
  momentum.momentum = 0.9f;
  momentum.dampening = 0.1f;
  SgdOptions nesterov = momentum;
  nesterov.dampening = 0;
  nesterov.nesterov = true;
  return {
      {"AdamW",
       [=](OptimSpans s, Isa isa) {
         return AdamStep(adamw, {3, 0.75f}, s, isa);
       }},
      {"Adam-L2",
       [=](OptimSpans s, Isa isa) {
         return AdamStep(adam_l2, {3, 0.75f}, s, isa);
       }},
      {"Lion", [=](OptimSpans s, Isa isa) { return LionStep(lion, {0.5f}, s, isa); }},
      {"SGD",
       [=](OptimSpans s, Isa isa) {
         s.exp_avg = nullptr;
         return SgdStep(plain, {2, 2.0f}, s, isa);
       }},
      {"SGD-momentum-first",
       [=](OptimSpans s, Isa isa) {
         return SgdStep(momentum, {1, 2.0f}, s, isa);
       }},
      {"SGD-momentum",
       [=](OptimSpans s, Isa isa) {
         return SgdStep(momentum, {5, 2.0f}, s, isa);
       }},
      {"SGD-nesterov",
       [=](OptimSpans s, Isa isa) {
         return SgdStep(nesterov, {5, 2.0f}, s, isa);
       }},
  };
}

TEST(IsaPaths, OptimizerStepsAreBitIdenticalAcrossLevels) {
  if (SupportedIsas().size() < 2) GTEST_SKIP() << "this CPU runs one level only";
  const std::vector<uint32_t> specials = AllSpecials();
  for (const StepCase& c : StepCases()) {
    for (DType grad : kDtypes) {
      for (const auto& out : kOuts) {
        for (size_t n : Lengths()) {
          const size_t offset = n % 4;
          const StepState initial(n, offset, grad, out, static_cast<uint32_t>(n), specials);
          ExpectLevelsAgree(initial, c.step, Describe(c.name, grad, out, n, offset));
          if (HasFailure()) return;
        }
      }
    }
  }
}

// A step that also backs up the old state (OptimSpans' backup, the engine's
// speculative updates) updates exactly as one without, at every level, and
// leaves the state as it was before in the backup: every optimizer, grad and
// out dtype, tails of every width, a copy out that is vector-aligned (all of
// it streams) and one that is not (plain stores, the loop unsplit), and
// lengths over several chunks.
TEST(IsaPaths, StepsWithABackupUpdateTheSameAndKeepTheOldState) {
  const std::vector<uint32_t> specials = AllSpecials();
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 40; ++n) lengths.push_back(n);
  lengths.push_back(3 * kOptimChunkElems + 777);
  for (const StepCase& c : StepCases()) {
    const std::string name = c.name;
    const bool backs_up_m = name != "SGD";
    const bool backs_up_v = name.rfind("Adam", 0) == 0;
    for (Isa isa : SupportedIsas()) {
      for (DType grad : kDtypes) {
        for (const std::optional<DType> out :
             {std::optional<DType>(), std::optional<DType>(DType::kBF16),
              std::optional<DType>(DType::kF32)}) {
          for (size_t n : lengths) {
            for (size_t offset : {size_t{0}, size_t{3}}) {
              const std::string what =
                  Describe(c.name, grad, out, n, offset) + " " + std::string(IsaName(isa));
              const StepState initial(n, offset, grad, out, static_cast<uint32_t>(n) + 5, specials);
              StepState plain = initial, backed = initial;
              auto r_plain = c.step(plain.Spans(), isa);
              ASSERT_TRUE(r_plain.ok()) << what << ": " << r_plain.status().ToString();
              OffsetBuffer<float> bp(n, 0), bm(n, 0), bv(n, 0);
              OptimSpans spans = backed.Spans();
              spans.backup_params = bp.data();
              spans.backup_exp_avg = backs_up_m ? bm.data() : nullptr;
              spans.backup_exp_avg_sq = backs_up_v ? bv.data() : nullptr;
              auto r_backed = c.step(spans, isa);
              ASSERT_TRUE(r_backed.ok()) << what << ": " << r_backed.status().ToString();
              EXPECT_EQ(r_backed->has_non_finite_grads, r_plain->has_non_finite_grads) << what;
              EXPECT_TRUE(SameBytes(backed.params.data(), plain.params.data(), 4 * n)) << what;
              EXPECT_TRUE(SameBytes(backed.exp_avg.data(), plain.exp_avg.data(), 4 * n)) << what;
              EXPECT_TRUE(SameBytes(backed.exp_avg_sq.data(), plain.exp_avg_sq.data(), 4 * n))
                  << what;
              EXPECT_TRUE(SameBytes(backed.out.data(), plain.out.data(), plain.out.size())) << what;
              EXPECT_TRUE(SameBytes(bp.data(), initial.params.data(), 4 * n)) << what;
              if (backs_up_m) {
                EXPECT_TRUE(SameBytes(bm.data(), initial.exp_avg.data(), 4 * n)) << what;
              }
              if (backs_up_v) {
                EXPECT_TRUE(SameBytes(bv.data(), initial.exp_avg_sq.data(), 4 * n)) << what;
              }
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(IsaPaths, SubnormalAndHugeGradientsAreNotReportedNonFinite) {
  // Subnormal and huge (up to 1e30) gradients without Inf or NaN: no level
  // reports them as non-finite, yet their squares overflow v to Inf, the same
  // way at each.
  if (SupportedIsas().size() < 2) GTEST_SKIP() << "this CPU runs one level only";
  std::vector<uint32_t> finite;
  for (uint32_t b : FiniteSpecialFloatBits()) {
    if ((b & 0x7fffffffu) <= 0x7149f2cau) finite.push_back(b);  // |x| <= 1e30
  }
  for (const StepCase& c : StepCases()) {
    for (DType grad : kDtypes) {
      const size_t n = 2 * kOptimChunkElems + 333;
      const StepState initial(n, 1, grad, DType::kBF16, 77, finite);
      ExpectLevelsAgree(initial, c.step, Describe(c.name, grad, DType::kBF16, n, 1));
      StepState run = initial;
      auto r = c.step(run.Spans(), SupportedIsas().back());
      ASSERT_TRUE(r.ok());
      if (grad != DType::kF16) {
        // fp16 cannot hold 1e10 and larger: they become Inf when stored.
        EXPECT_FALSE(r->has_non_finite_grads) << c.name << " " << DTypeName(grad);
      }
    }
  }
}

// Gradient buffers of mixed values and specials, for the accumulation and
// statistics tests.
GradBuffer MixedGrads(DType dtype, size_t n, size_t offset, uint32_t seed,
                      const std::vector<uint32_t>& specials, bool raw_codes) {
  GradBuffer g(dtype, n, offset);
  FillMixed(g, seed, 0.01f, specials, raw_codes);
  return g;
}

bool SameDouble(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(IsaPaths, AccumulationAndStatisticsAreBitIdenticalAcrossLevels) {
  if (SupportedIsas().size() < 2) GTEST_SKIP() << "this CPU runs one level only";
  const std::vector<uint32_t> finite = FiniteSpecialFloatBits();
  const std::vector<uint32_t> all = AllSpecials();
  for (DType dtype : kDtypes) {
    for (size_t n : Lengths()) {
      const size_t offset = n % 4;
      // Finite specials exercise the double fallback (squares that overflow
      // fp32); all specials the non-finite report.
      for (const auto* specials : {&finite, &all}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n " << n << " offset " << offset
                                          << (specials == &all ? " with Inf/NaN" : " finite"));
        const bool raw = specials == &all;
        const GradBuffer g1 =
            MixedGrads(dtype, n, offset, static_cast<uint32_t>(n), *specials, raw);
        const GradBuffer g2 =
            MixedGrads(dtype, n, offset + 1, static_cast<uint32_t>(n) + 9, *specials, raw);
        std::optional<std::vector<uint32_t>> first_acc, first_fused;
        std::optional<GradStatsResult> first_stats, first_fused_stats;
        for (Isa isa : SupportedIsas()) {
          SCOPED_TRACE(IsaName(isa));
          OffsetBuffer<float> acc(n, (offset + 2) % 4), fused(n, (offset + 3) % 4);
          ASSERT_TRUE(AccumulateGrads(acc.data(), g1.data(), dtype, n, true, isa).ok());
          ASSERT_TRUE(AccumulateGrads(acc.data(), g2.data(), dtype, n, false, isa).ok());
          auto stats = GradStats(g1.data(), dtype, n, isa);
          ASSERT_TRUE(stats.ok());
          ASSERT_TRUE(AccumulateGradsWithStats(fused.data(), g1.data(), dtype, n, true, isa).ok());
          auto fused_stats =
              AccumulateGradsWithStats(fused.data(), g2.data(), dtype, n, false, isa);
          ASSERT_TRUE(fused_stats.ok());
          std::vector<uint32_t> acc_bits(n), fused_bits(n);
          if (n > 0) {
            std::memcpy(acc_bits.data(), acc.data(), 4 * n);
            std::memcpy(fused_bits.data(), fused.data(), 4 * n);
          }
          EXPECT_EQ(acc_bits, fused_bits) << "fused accumulation differs from the plain one";
          if (!first_acc) {
            first_acc = acc_bits;
            first_stats = *stats;
            first_fused_stats = *fused_stats;
            continue;
          }
          EXPECT_EQ(acc_bits, *first_acc);
          EXPECT_EQ(stats->has_non_finite, first_stats->has_non_finite);
          EXPECT_TRUE(SameDouble(stats->sum_squares, first_stats->sum_squares))
              << stats->sum_squares << " vs " << first_stats->sum_squares;
          EXPECT_EQ(fused_stats->has_non_finite, first_fused_stats->has_non_finite);
          EXPECT_TRUE(SameDouble(fused_stats->sum_squares, first_fused_stats->sum_squares))
              << fused_stats->sum_squares << " vs " << first_fused_stats->sum_squares;
        }
        if (HasFailure()) return;
      }
    }
  }
}

TEST(IsaPaths, SquaresThatOverflowFp32AreSummedInDoubleAtEveryLevel) {
  const size_t n = 300;
  std::vector<float> g(n, 1.0f);
  g[5] = 1e30f;
  g[250] = -3e20f;
  double want = 0;
  for (float x : g) want += static_cast<double>(x) * x;
  for (Isa isa : SupportedIsas()) {
    auto stats = GradStats(g.data(), DType::kF32, n, isa);
    ASSERT_TRUE(stats.ok());
    EXPECT_FALSE(stats->has_non_finite) << IsaName(isa);
    EXPECT_NEAR(stats->sum_squares, want, 1e-12 * want) << IsaName(isa);
  }
}

TEST(IsaPaths, UnsupportedLevelIsFailedPreconditionAndTouchesNothing) {
  if (CpuSupportsIsa(Isa::kAvx512)) GTEST_SKIP() << "this CPU runs every level";
  const Isa missing = CpuSupportsIsa(Isa::kAvx2) ? Isa::kAvx512 : Isa::kAvx2;
  std::vector<float> p(8, 1.0f), m(8, 0.0f), v(8, 0.0f), g(8, 1.0f);
  OptimSpans s{p.data(), m.data(), v.data(), g.data(), DType::kF32, nullptr, DType::kBF16, 8};
  EXPECT_EQ(AdamStep(AdamOptions{}, AdamStepArgs{}, s, missing).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(LionStep(LionOptions{}, LionStepArgs{}, s, missing).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(SgdStep(SgdOptions{}, SgdStepArgs{}, s, missing).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(GradStats(g.data(), DType::kF32, 8, missing).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(AccumulateGrads(p.data(), g.data(), DType::kF32, 8, false, missing).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      AccumulateGradsWithStats(p.data(), g.data(), DType::kF32, 8, false, missing).status().code(),
      StatusCode::kFailedPrecondition);
  EXPECT_EQ(p, std::vector<float>(8, 1.0f));
}

}  // namespace
}  // namespace tierflow
