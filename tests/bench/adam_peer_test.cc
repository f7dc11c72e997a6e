// AdamPeerStep (the DeepSpeed-shaped yardstick of `bench adam`) against the
// scalar double-precision reference: every grad/out dtype, AdamW and Adam-L2,
// with and without bias correction, sizes that exercise the 8-vector body,
// the one-vector loop and the scalar tail, 1 and 3 threads, misaligned spans,
// at each vector level this CPU runs.
//
// The peer fuses with FMA, so it is not bit-identical to AdamStep; it is
// held to adam_test.cc's tolerance: |v - ref| <= rtol * (|ref| + s) with
// rtol = 16 * steps * 2^-24 and s the size of the terms that built v (|g| for
// m, g^2 for v, lr for p). A wrong formula is off by orders of magnitude more.
// The copy out must be exactly the rounded weights.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/adam_peer.h"
#include "optim/optim_reference.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

using optim_test::GradBuffer;
using optim_test::GradGenerator;
using optim_test::kF32Eps;
using optim_test::OffsetBuffer;

std::vector<Isa> PeerLevels() {
  std::vector<Isa> levels;
  for (Isa isa : SupportedIsas()) {
    if (isa != Isa::kBaseline) levels.push_back(isa);
  }
  return levels;
}

AdamOptions TestOptions(bool decoupled, bool bias_correction) {
  AdamOptions o;
  o.lr = 1e-2f;
  o.beta1 = 0.9f;
  o.beta2 = 0.99f;
  o.eps = 1e-6f;
  o.weight_decay = 0.1f;
  o.decoupled = decoupled;
  o.bias_correction = bias_correction;
  return o;
}

// Runs `steps` peer steps and the reference side by side and compares them.
void CheckAgainstReference(Isa isa, size_t n, int threads, DType grad_dtype,
                           std::optional<DType> out_dtype, const AdamOptions& o) {
  const size_t offset = 1;
  OffsetBuffer<float> p(n, offset), m(n, offset), v(n, offset);
  OffsetBuffer<unsigned char> out(n * 4, offset * 2);
  GradBuffer g(grad_dtype, n, offset);
  GradGenerator generator(n, 5);
  const auto p0 = optim_test::RandomFloats(n, 6, -1.0f, 1.0f);
  const auto m0 = optim_test::RandomFloats(n, 7, -0.1f, 0.1f);
  const auto v0 = optim_test::RandomFloats(n, 8, 0.0f, 0.01f);
  std::vector<double> ref_p(n), ref_m(n), ref_v(n);
  for (size_t i = 0; i < n; ++i) {
    const auto mag = static_cast<float>(generator.magnitude(i));
    p[i] = p0[i];
    m[i] = m0[i] * mag;
    v[i] = v0[i] * mag * mag;
    ref_p[i] = p[i];
    ref_m[i] = m[i];
    ref_v[i] = v[i];
  }
  OptimSpans s{p.data(), m.data(), v.data(), g.data(), grad_dtype, nullptr, DType::kBF16, n};
  if (out_dtype) {
    s.out = out.data();
    s.out_dtype = *out_dtype;
  }
  const int kSteps = 3;
  for (int64_t step = 1; step <= kSteps; ++step) {
    generator.Fill(g);
    optim_test::WithThreads(threads, [&] {
      Status st = AdamPeerStep(o, AdamStepArgs{step, 1.0f}, s, isa);
      ASSERT_TRUE(st.ok()) << st.ToString();
    });
    AdamReferenceStep(o, AdamStepArgs{step, 1.0f}, g.data(), grad_dtype, n, ref_p.data(),
                      ref_m.data(), ref_v.data());
  }
  std::vector<double> g_scale(n), g2_scale(n), p_scale(n, o.lr);
  for (size_t i = 0; i < n; ++i) {
    double gs = generator.magnitude(i);
    if (!o.decoupled) gs += o.weight_decay * 1.1;  // the L2 term, |p| < ~1.1
    g_scale[i] = gs;
    g2_scale[i] = gs * gs;
  }
  const double rtol = 16.0 * kSteps * kF32Eps;
  optim_test::ExpectClose(p.data(), ref_p.data(), p_scale, rtol, "params");
  optim_test::ExpectClose(m.data(), ref_m.data(), g_scale, rtol, "exp_avg");
  optim_test::ExpectClose(v.data(), ref_v.data(), g2_scale, rtol, "exp_avg_sq");
  if (out_dtype) optim_test::ExpectOutIsRoundedParams(out.data(), *out_dtype, p.data(), n);
}

TEST(AdamPeerStep, MatchesTheReferenceForEveryDtypeSizeAndLevel) {
  if (PeerLevels().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: no peer";
  const std::vector<std::optional<DType>> outs = {std::nullopt, DType::kF32, DType::kBF16,
                                                  DType::kF16};
  // 0; one element; under one vector; 8-vector body + one-vector loop + tail;
  // several slices of each.
  const std::vector<size_t> sizes = {0, 1, 7, 3 * 128 + 2 * 16 + 5, 5 * 4096 + 77};
  for (Isa isa : PeerLevels()) {
    for (DType grad : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const auto& out : outs) {
        for (size_t n : sizes) {
          for (int threads : {1, 3}) {
            for (bool decoupled : {true, false}) {
              SCOPED_TRACE(::testing::Message()
                           << IsaName(isa) << " grad " << DTypeName(grad) << " out "
                           << (out ? DTypeName(*out) : "none") << " n " << n << " threads "
                           << threads << (decoupled ? " AdamW" : " Adam-L2"));
              CheckAgainstReference(isa, n, threads, grad, out, TestOptions(decoupled, true));
            }
          }
        }
      }
    }
  }
}

TEST(AdamPeerStep, WithoutBiasCorrectionMatchesTheReference) {
  if (PeerLevels().empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: no peer";
  for (Isa isa : PeerLevels()) {
    SCOPED_TRACE(IsaName(isa));
    CheckAgainstReference(isa, 4096 + 3, 2, DType::kBF16, DType::kBF16, TestOptions(true, false));
  }
}

TEST(AdamPeerStep, RunsAtTheWidestLevelAndRefusesWhatItCannotDo) {
  if (PeerLevels().empty()) {
    EXPECT_EQ(AdamPeerIsa().status().code(), StatusCode::kUnavailable);
    GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512: no peer";
  }
  ASSERT_TRUE(AdamPeerIsa().ok());
  const std::vector<Isa> levels = PeerLevels();
  EXPECT_EQ(*AdamPeerIsa(), *std::max_element(levels.begin(), levels.end()));

  std::vector<float> p(4, 0.5f), m(4, 0.0f), v(4, 0.0f), g(4, 0.1f);
  OptimSpans s{p.data(), m.data(), v.data(), g.data(), DType::kF32, nullptr, DType::kBF16, 4};
  const AdamOptions o;
  const Isa isa = *AdamPeerIsa();
  const auto message = [&](const Status& st) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    return st.message();
  };
  EXPECT_NE(message(AdamPeerStep(o, AdamStepArgs{1, 0.5f}, s, isa)).find("grad_scale"),
            std::string::npos);
  EXPECT_NE(message(AdamPeerStep(o, AdamStepArgs{0, 1.0f}, s, isa)).find("step"),
            std::string::npos);
  EXPECT_NE(message(AdamPeerStep(o, AdamStepArgs{1, 1.0f}, s, Isa::kBaseline)).find("baseline"),
            std::string::npos);
  AdamOptions bad = o;
  bad.beta1 = 1.5f;
  message(AdamPeerStep(bad, AdamStepArgs{1, 1.0f}, s, isa));
  s.exp_avg_sq = nullptr;
  EXPECT_NE(message(AdamPeerStep(o, AdamStepArgs{1, 1.0f}, s, isa)).find("exp_avg_sq"),
            std::string::npos);
  EXPECT_EQ(p, std::vector<float>(4, 0.5f)) << "a refused step touched the weights";
}

}  // namespace
}  // namespace tierflow
