// AdamStep (AdamW and Adam-L2) against the scalar double-precision reference:
// every grad/out dtype combination, sizes 0 to several chunks, misaligned
// spans, several steps in a row, a resumed step counter, bit-identical
// results for any alignment, and the non-finite report. (Thread-count
// independence and concurrent calls: concurrency_test.cc.)
//
// Tolerances: each fp32 value v is checked as |v - ref| <= rtol * (|ref| + s),
// with rtol = 16 * steps * 2^-24 and s the size of the terms that built it
// (|g| for m, g^2 for v, lr for p): one step rounds a handful of fp32
// operations per value, each adding at most 2^-24 relative to its terms, and
// errors from earlier steps are carried, not amplified (the gradients below
// keep each element within a factor of two of its own scale, so
// m / sqrt(v) is well conditioned). A wrong formula (bias correction, decay,
// eps, grad_scale) is off by orders of magnitude more than this.
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "optim/adam.h"
#include "optim/lion.h"
#include "optim/optim_reference.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

using optim_test::GradBuffer;
using optim_test::GradGenerator;
using optim_test::kF32Eps;
using optim_test::OffsetBuffer;

// One Adam run on fast fp32 buffers and on double reference buffers.
class AdamRun {
 public:
  AdamRun(size_t n, DType grad_dtype, std::optional<DType> out_dtype, size_t offset,
          uint32_t seed = 1)
      : n_(n),
        params_(n, offset),
        exp_avg_(n, offset),
        exp_avg_sq_(n, (offset * 3) % 16),
        out_(n * 4, offset * (out_dtype ? DTypeSize(*out_dtype) : 1)),
        grads_(grad_dtype, n, offset),
        generator_(n, seed),
        out_dtype_(out_dtype) {
    // Start from a mid-training state: non-zero moments.
    auto p0 = optim_test::RandomFloats(n, seed + 1, -1.0f, 1.0f);
    auto m0 = optim_test::RandomFloats(n, seed + 2, -0.1f, 0.1f);
    auto v0 = optim_test::RandomFloats(n, seed + 3, 0.0f, 0.01f);
    for (size_t i = 0; i < n; ++i) {
      params_[i] = p0[i];
      exp_avg_[i] = m0[i] * static_cast<float>(generator_.magnitude(i));
      exp_avg_sq_[i] =
          v0[i] * static_cast<float>(generator_.magnitude(i) * generator_.magnitude(i));
    }
    ref_params_.assign(params_.data(), params_.data() + n);
    ref_exp_avg_.assign(exp_avg_.data(), exp_avg_.data() + n);
    ref_exp_avg_sq_.assign(exp_avg_sq_.data(), exp_avg_sq_.data() + n);
  }

  OptimSpans Spans() {
    OptimSpans s;
    s.params = params_.data();
    s.exp_avg = exp_avg_.data();
    s.exp_avg_sq = exp_avg_sq_.data();
    s.grads = grads_.data();
    s.grad_dtype = grads_.dtype();
    if (out_dtype_) {
      s.out = out_.data();
      s.out_dtype = *out_dtype_;
    }
    s.n = n_;
    return s;
  }

  // Draws new gradients and applies step `step` to both implementations, the
  // fast one at level `isa` (default: the process's level).
  StepResult Step(const AdamOptions& o, int64_t step, float grad_scale,
                  std::optional<Isa> isa = std::nullopt) {
    generator_.Fill(grads_);
    AdamStepArgs args{step, grad_scale};
    auto result = isa ? AdamStep(o, args, Spans(), *isa) : AdamStep(o, args, Spans());
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    AdamReferenceStep(o, args, grads_.data(), grads_.dtype(), n_, ref_params_.data(),
                      ref_exp_avg_.data(), ref_exp_avg_sq_.data());
    return result.ok() ? *result : StepResult{};
  }

  void ExpectMatchesReference(const AdamOptions& o, int num_steps, float grad_scale) {
    std::vector<double> g_scale(n_), g2_scale(n_), p_scale(n_, o.lr);
    for (size_t i = 0; i < n_; ++i) {
      double g = generator_.magnitude(i) * std::fabs(grad_scale);
      if (!o.decoupled) g += o.weight_decay * 1.1;  // the L2 term, |p| < ~1.1
      g_scale[i] = g;
      g2_scale[i] = g * g;
    }
    const double rtol = 16.0 * num_steps * kF32Eps;
    optim_test::ExpectClose(params_.data(), ref_params_.data(), p_scale, rtol, "params");
    optim_test::ExpectClose(exp_avg_.data(), ref_exp_avg_.data(), g_scale, rtol, "exp_avg");
    optim_test::ExpectClose(exp_avg_sq_.data(), ref_exp_avg_sq_.data(), g2_scale, rtol,
                            "exp_avg_sq");
    if (out_dtype_) {
      optim_test::ExpectOutIsRoundedParams(out_.data(), *out_dtype_, params_.data(), n_);
    }
  }

  const float* params() const { return params_.data(); }
  const float* exp_avg() const { return exp_avg_.data(); }
  const float* exp_avg_sq() const { return exp_avg_sq_.data(); }
  const double* ref_params() const { return ref_params_.data(); }
  const unsigned char* out() const { return out_.data(); }

 private:
  size_t n_;
  OffsetBuffer<float> params_, exp_avg_, exp_avg_sq_;
  OffsetBuffer<unsigned char> out_;
  GradBuffer grads_;
  GradGenerator generator_;
  std::optional<DType> out_dtype_;
  std::vector<double> ref_params_, ref_exp_avg_, ref_exp_avg_sq_;
};

AdamOptions TestOptions(bool decoupled) {
  AdamOptions o;
  o.lr = 1e-2f;
  o.beta1 = 0.9f;
  o.beta2 = 0.99f;
  o.eps = 1e-6f;
  o.weight_decay = 0.1f;
  o.decoupled = decoupled;
  return o;
}

const size_t kLarge = 5 * kOptimChunkElems + 77;  // several chunks, ragged end

// At every instruction-set level this CPU runs (isa_paths_test.cc checks
// that the levels agree bit for bit, special values included).
TEST(AdamStep, MatchesReferenceForEveryDtypeSizeAlignmentAndLevel) {
  const std::vector<std::optional<DType>> outs = {std::nullopt, DType::kF32, DType::kBF16,
                                                  DType::kF16};
  for (Isa isa : SupportedIsas()) {
    for (DType grad : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const auto& out : outs) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4096 + 3}, kLarge}) {
          for (size_t offset : {0, 1, 3}) {
            for (bool decoupled : {true, false}) {
              SCOPED_TRACE(::testing::Message()
                           << IsaName(isa) << " grad " << DTypeName(grad) << " out "
                           << (out ? DTypeName(*out) : "none") << " n " << n << " offset " << offset
                           << (decoupled ? " AdamW" : " Adam-L2"));
              AdamRun run(n, grad, out, offset);
              const AdamOptions o = TestOptions(decoupled);
              const int kSteps = 3;
              for (int s = 1; s <= kSteps; ++s) run.Step(o, s, 0.75f, isa);
              run.ExpectMatchesReference(o, kSteps, 0.75f);
            }
          }
        }
      }
    }
  }
}

TEST(AdamStep, ManyStepsWithoutBiasCorrectionStayWithinTolerance) {
  AdamOptions o = TestOptions(true);
  o.bias_correction = false;
  o.eps = 1e-3f;  // large enough to matter for the small gradients
  AdamRun run(4096 + 3, DType::kBF16, DType::kBF16, 1);
  const int kSteps = 20;
  for (int s = 1; s <= kSteps; ++s) run.Step(o, s, 2.0f);
  run.ExpectMatchesReference(o, kSteps, 2.0f);
}

TEST(AdamStep, FirstStepMovesEachWeightByLrAgainstItsGradient) {
  // With zero moments and bias correction, m_hat / sqrt(v_hat) = sign(g) at
  // step 1: the classic check that both corrections are applied.
  const size_t n = 1000;
  std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f), g(n);
  for (size_t i = 0; i < n; ++i) g[i] = (i % 2 ? 1.0f : -1.0f) * (1e-3f + i * 1e-3f);
  AdamOptions o;
  o.lr = 1e-3f;
  o.eps = 0;
  OptimSpans s{p.data(), m.data(), v.data(), g.data(), DType::kF32, nullptr, DType::kBF16, n};
  ASSERT_TRUE(AdamStep(o, AdamStepArgs{1, 1.0f}, s).ok());
  for (size_t i = 0; i < n; ++i) {
    const float expected = 0.5f - (g[i] > 0 ? 1e-3f : -1e-3f);
    EXPECT_NEAR(p[i], expected, 4 * kF32Eps) << i;
  }
}

TEST(AdamStep, ResumedStepCounterGivesTheSameBitsAsAnUnbrokenRun) {
  const size_t n = 3 * kOptimChunkElems + 5;
  const AdamOptions o = TestOptions(true);
  AdamRun unbroken(n, DType::kF16, DType::kBF16, 0, 7);
  for (int s = 1; s <= 6; ++s) unbroken.Step(o, s, 1.0f);

  // Same seed: same initial state and gradients. Steps 1-3, then the state is
  // "saved" (copied) into fresh buffers and resumed at 4.
  AdamRun first_half(n, DType::kF16, DType::kBF16, 0, 7);
  for (int s = 1; s <= 3; ++s) first_half.Step(o, s, 1.0f);
  AdamRun resumed = first_half;  // a copy: new storage, same contents
  for (int s = 4; s <= 6; ++s) resumed.Step(o, s, 1.0f);
  EXPECT_TRUE(optim_test::SameBits(unbroken.params(), resumed.params(), n));
  EXPECT_TRUE(optim_test::SameBits(unbroken.exp_avg_sq(), resumed.exp_avg_sq(), n));

  // Restarting the counter at 1 instead is wrong, and visibly so.
  AdamRun restarted = first_half;
  for (int s = 1; s <= 3; ++s) restarted.Step(o, s, 1.0f);
  EXPECT_FALSE(optim_test::SameBits(unbroken.params(), restarted.params(), n));
  restarted.ExpectMatchesReference(o, 6, 1.0f);  // ... yet it is the step it was asked for
}

TEST(AdamStep, BitIdenticalForAnyAlignment) {
  // Vector body and scalar tail round the same way, so where a span starts
  // does not change any element's result.
  const size_t n = 2 * kOptimChunkElems + 100;
  const AdamOptions o = TestOptions(false);
  AdamRun aligned(n, DType::kF32, DType::kBF16, 0, 5);
  AdamRun shifted(n, DType::kF32, DType::kBF16, 5, 5);
  for (int s = 1; s <= 2; ++s) {
    aligned.Step(o, s, 1.0f);
    shifted.Step(o, s, 1.0f);
  }
  EXPECT_TRUE(optim_test::SameBits(aligned.params(), shifted.params(), n));
  EXPECT_TRUE(optim_test::SameBits(aligned.exp_avg(), shifted.exp_avg(), n));
  EXPECT_TRUE(optim_test::SameBits(aligned.exp_avg_sq(), shifted.exp_avg_sq(), n));
}

TEST(AdamStep, ReportsNonFiniteGradientsInTheSamePass) {
  const size_t n = 4 * kOptimChunkElems + 9;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t bad_index : {size_t{0}, n / 2, n - 1}) {
      for (float bad : {INFINITY, -INFINITY, NAN}) {
        std::vector<float> p(n, 1.0f), m(n, 0.0f), v(n, 0.0f);
        GradBuffer g(dtype, n, 0);
        for (size_t i = 0; i < n; ++i) g.Set(i, 1e-3f);
        OptimSpans s{p.data(), m.data(), v.data(), g.data(), dtype, nullptr, DType::kBF16, n};
        auto clean = AdamStep(AdamOptions{}, AdamStepArgs{}, s);
        ASSERT_TRUE(clean.ok());
        EXPECT_FALSE(clean->has_non_finite_grads);
        g.Set(bad_index, bad);
        auto dirty = AdamStep(AdamOptions{}, AdamStepArgs{2, 1.0f}, s);
        ASSERT_TRUE(dirty.ok());
        EXPECT_TRUE(dirty->has_non_finite_grads)
            << DTypeName(dtype) << " index " << bad_index << " value " << bad;
      }
    }
  }
}

TEST(AdamStep, GradScaleThatOverflowsTheGradientIsReportedAsNonFinite) {
  // fp16 gradient 60000 (finite) times 1e35 overflows fp32: the scaled
  // gradient the step would use is Inf.
  std::vector<float> p(16, 1.0f), m(16, 0.0f), v(16, 0.0f);
  GradBuffer g(DType::kF16, 16, 0);
  for (size_t i = 0; i < 16; ++i) g.Set(i, 60000.0f);
  OptimSpans s{p.data(), m.data(), v.data(), g.data(), DType::kF16, nullptr, DType::kBF16, 16};
  auto r = AdamStep(AdamOptions{}, AdamStepArgs{1, 1e35f}, s);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->has_non_finite_grads);
}

TEST(AdamStep, RejectsBadArgumentsWithoutTouchingState) {
  std::vector<float> p(8, 1.0f), m(8, 0.0f), v(8, 0.0f), g(8, 1.0f);
  OptimSpans s{p.data(), m.data(), v.data(), g.data(), DType::kF32, nullptr, DType::kBF16, 8};
  auto step0 = AdamStep(AdamOptions{}, AdamStepArgs{0, 1.0f}, s);
  EXPECT_EQ(step0.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(step0.status().message().find("steps count from 1"), std::string::npos);

  AdamOptions bad_beta;
  bad_beta.beta1 = 1.0f;
  EXPECT_EQ(AdamStep(bad_beta, AdamStepArgs{}, s).status().code(), StatusCode::kInvalidArgument);
  AdamOptions negative_lr;
  negative_lr.lr = -1.0f;
  EXPECT_EQ(AdamStep(negative_lr, AdamStepArgs{}, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AdamStep(AdamOptions{}, AdamStepArgs{1, NAN}, s).status().code(),
            StatusCode::kInvalidArgument);

  OptimSpans no_v = s;
  no_v.exp_avg_sq = nullptr;
  auto missing = AdamStep(AdamOptions{}, AdamStepArgs{}, no_v);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("exp_avg_sq"), std::string::npos);

  EXPECT_EQ(p, std::vector<float>(8, 1.0f));
  EXPECT_EQ(m, std::vector<float>(8, 0.0f));
  EXPECT_EQ(v, std::vector<float>(8, 0.0f));
}

// A backup must cover exactly the arrays the step updates, 64-byte aligned
// (its stores are non-temporal); anything else is refused before any state
// changes, naming the backup at fault.
TEST(AdamStep, RejectsAnIncompleteOrMisalignedBackupWithoutTouchingState) {
  const size_t n = 40;
  optim_test::OffsetBuffer<float> p(n, 0), m(n, 0), v(n, 0), g(n, 0), bp(n, 0), bm(n, 0), bv(n, 1);
  for (size_t i = 0; i < n; ++i) {
    p[i] = 1.0f;
    m[i] = v[i] = 0.0f;
    g[i] = 0.5f;
  }
  OptimSpans s;
  s.params = p.data();
  s.exp_avg = m.data();
  s.exp_avg_sq = v.data();
  s.grads = g.data();
  s.n = n;
  s.backup_params = bp.data();
  s.backup_exp_avg = bm.data();
  auto expect_refused = [&](const OptimSpans& spans, const std::string& names) {
    auto r = AdamStep(AdamOptions{}, AdamStepArgs{}, spans);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << names;
    EXPECT_NE(r.status().message().find(names), std::string::npos) << r.status().ToString();
  };
  expect_refused(s, "backup_exp_avg_sq is null");
  s.backup_exp_avg_sq = bv.data();  // one float past a 64-byte boundary
  expect_refused(s, "backup_exp_avg_sq is not 64-byte aligned");
  OptimSpans no_params = s;
  no_params.backup_params = nullptr;
  expect_refused(no_params, "backup_params is null");
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(p[i], 1.0f);
    EXPECT_EQ(m[i], 0.0f);
    EXPECT_EQ(v[i], 0.0f);
  }
  // Lion updates no second moment: a backup of one is refused, not ignored.
  OptimSpans lion = s;
  lion.exp_avg_sq = nullptr;
  lion.backup_exp_avg_sq = bm.data();
  auto r = LionStep(LionOptions{}, LionStepArgs{}, lion);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("does not update that array"), std::string::npos)
      << r.status().ToString();
}

TEST(AdamStep, EmptySpanIsANoOpEvenWithNullPointers) {
  OptimSpans s;
  auto r = AdamStep(AdamOptions{}, AdamStepArgs{}, s);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_non_finite_grads);
}

}  // namespace
}  // namespace tierflow
