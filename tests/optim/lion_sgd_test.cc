// LionStep and SgdStep against their scalar double-precision references,
// over the dtype combinations, sizes and alignments the Adam tests use, and
// their edge cases: sign(0) = 0 in Lion, the momentum buffer initialised from
// the gradient at step 1 in SGD, nesterov, and plain SGD without a buffer.
//
// Tolerance: |v - ref| <= rtol * (|ref| + s), rtol = 16 * steps * 2^-24, s =
// lr for weights and |g| for the moment/momentum buffer (see adam_test.cc).
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "optim/lion.h"
#include "optim/optim_reference.h"
#include "optim/sgd.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

using optim_test::GradBuffer;
using optim_test::GradGenerator;
using optim_test::kF32Eps;
using optim_test::OffsetBuffer;

const size_t kLarge = 3 * kOptimChunkElems + 77;

// State shared by the Lion and SGD runs: weights, one buffer, gradients, out.
struct OneMomentRun {
  OneMomentRun(size_t n, DType grad_dtype, std::optional<DType> out_dtype, size_t offset)
      : n(n),
        params(n, offset),
        buffer(n, offset + 1),
        out(4 * n, offset * (out_dtype ? DTypeSize(*out_dtype) : 1)),
        grads(grad_dtype, n, offset),
        generator(n, 3),
        out_dtype(out_dtype) {
    auto p0 = optim_test::RandomFloats(n, 4, -1.0f, 1.0f);
    auto m0 = optim_test::RandomFloats(n, 5, -0.1f, 0.1f);
    for (size_t i = 0; i < n; ++i) {
      params[i] = p0[i];
      buffer[i] = m0[i] * static_cast<float>(generator.magnitude(i));
    }
    ref_params.assign(params.data(), params.data() + n);
    ref_buffer.assign(buffer.data(), buffer.data() + n);
  }
  OptimSpans Spans(bool with_buffer = true) {
    OptimSpans s;
    s.params = params.data();
    s.exp_avg = with_buffer ? buffer.data() : nullptr;
    s.grads = grads.data();
    s.grad_dtype = grads.dtype();
    if (out_dtype) {
      s.out = out.data();
      s.out_dtype = *out_dtype;
    }
    s.n = n;
    return s;
  }
  void Expect(double lr, double g_factor, int num_steps, bool check_buffer = true) {
    std::vector<double> p_scale(n, lr), g_scale(n);
    for (size_t i = 0; i < n; ++i) g_scale[i] = generator.magnitude(i) * g_factor;
    const double rtol = 16.0 * num_steps * kF32Eps;
    optim_test::ExpectClose(params.data(), ref_params.data(), p_scale, rtol, "params");
    if (check_buffer) {
      optim_test::ExpectClose(buffer.data(), ref_buffer.data(), g_scale, rtol, "buffer");
    }
    if (out_dtype) optim_test::ExpectOutIsRoundedParams(out.data(), *out_dtype, params.data(), n);
  }

  size_t n;
  OffsetBuffer<float> params, buffer;
  OffsetBuffer<unsigned char> out;
  GradBuffer grads;
  GradGenerator generator;
  std::optional<DType> out_dtype;
  std::vector<double> ref_params, ref_buffer;
};

// At every instruction-set level this CPU runs (isa_paths_test.cc checks
// that the levels agree bit for bit, special values included).
TEST(LionStep, MatchesReferenceForEveryDtypeSizeAlignmentAndLevel) {
  LionOptions o;
  o.lr = 1e-2f;
  o.weight_decay = 0.1f;
  for (Isa isa : SupportedIsas()) {
    for (DType grad : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (std::optional<DType> out : {std::optional<DType>(), std::optional<DType>(DType::kBF16),
                                       std::optional<DType>(DType::kF16)}) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4096 + 3}, kLarge}) {
          for (size_t offset : {0, 3}) {
            SCOPED_TRACE(::testing::Message()
                         << IsaName(isa) << " grad " << DTypeName(grad) << " out "
                         << (out ? DTypeName(*out) : "none") << " n " << n << " offset " << offset);
            OneMomentRun run(n, grad, out, offset);
            const int kSteps = 3;
            for (int s = 1; s <= kSteps; ++s) {
              run.generator.Fill(run.grads);
              LionStepArgs args{0.5f};
              auto r = LionStep(o, args, run.Spans(), isa);
              ASSERT_TRUE(r.ok()) << r.status().ToString();
              LionReferenceStep(o, args, run.grads.data(), grad, n, run.ref_params.data(),
                                run.ref_buffer.data());
            }
            run.Expect(o.lr, 0.5, kSteps);
          }
        }
      }
    }
  }
}

TEST(LionStep, ZeroUpdateDirectionOnlyDecaysTheWeights) {
  std::vector<float> p(5, 2.0f), m(5, 0.0f), g(5, 0.0f);
  LionOptions o;
  o.lr = 0.25f;
  o.weight_decay = 1.0f;
  OptimSpans s{p.data(), m.data(), nullptr, g.data(), DType::kF32, nullptr, DType::kBF16, 5};
  ASSERT_TRUE(LionStep(o, LionStepArgs{}, s).ok());
  for (float x : p) EXPECT_EQ(x, 1.5f);  // 2 * (1 - 0.25 * 1), no sign term
}

struct SgdCase {
  const char* name;
  SgdOptions options;
};

std::vector<SgdCase> SgdCases() {
  SgdOptions momentum;
  momentum.lr = 0.1f;
  momentum.momentum = 0.9f;
  momentum.dampening = 0.1f;
  momentum.weight_decay = 0.01f;
  SgdOptions nesterov = momentum;
  nesterov.dampening = 0.0f;
  nesterov.nesterov = true;
  SgdOptions plain;
  plain.lr = 0.1f;
  plain.weight_decay = 0.01f;
  return {{"momentum", momentum}, {"nesterov", nesterov}, {"plain", plain}};
}

TEST(SgdStep, MatchesReferenceForEveryVariantDtypeSizeAlignmentAndLevel) {
  for (Isa isa : SupportedIsas()) {
    for (const SgdCase& c : SgdCases()) {
      const bool use_buffer = c.options.momentum > 0;
      for (DType grad : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4096 + 3}, kLarge}) {
          for (size_t offset : {0, 1}) {
            SCOPED_TRACE(::testing::Message()
                         << IsaName(isa) << " " << c.name << " grad " << DTypeName(grad) << " n "
                         << n << " offset " << offset);
            OneMomentRun run(n, grad, DType::kF32, offset);
            const int kSteps = 4;
            for (int s = 1; s <= kSteps; ++s) {
              run.generator.Fill(run.grads);
              SgdStepArgs args{s, 2.0f};
              auto r = SgdStep(c.options, args, run.Spans(use_buffer), isa);
              ASSERT_TRUE(r.ok()) << r.status().ToString();
              SgdReferenceStep(c.options, args, run.grads.data(), grad, n, run.ref_params.data(),
                               use_buffer ? run.ref_buffer.data() : nullptr);
            }
            // The buffer sums up to 1/(1-momentum) = 10 gradients of scale 2.
            run.Expect(c.options.lr * 20, 20.0, kSteps, use_buffer);
          }
        }
      }
    }
  }
}

TEST(SgdStep, FirstStepInitialisesTheMomentumBufferFromTheGradient) {
  std::vector<float> p(4, 1.0f), buf(4, 1e30f), g = {1.0f, -2.0f, 0.5f, 0.0f};
  SgdOptions o;
  o.lr = 0.5f;
  o.momentum = 0.9f;
  o.dampening = 0.5f;  // ignored at step 1, as in torch.optim.SGD
  OptimSpans s{p.data(), buf.data(), nullptr, g.data(), DType::kF32, nullptr, DType::kBF16, 4};
  ASSERT_TRUE(SgdStep(o, SgdStepArgs{1, 1.0f}, s).ok());
  EXPECT_EQ(buf, g);
  EXPECT_EQ(p, (std::vector<float>{0.5f, 2.0f, 0.75f, 1.0f}));
  ASSERT_TRUE(SgdStep(o, SgdStepArgs{2, 1.0f}, s).ok());
  EXPECT_FLOAT_EQ(buf[0], 0.9f * 1.0f + 0.5f * 1.0f);
}

TEST(SgdStep, RejectsNesterovWithDampeningAndMissingBuffer) {
  std::vector<float> p(4, 1.0f), g(4, 1.0f);
  OptimSpans s{p.data(), nullptr, nullptr, g.data(), DType::kF32, nullptr, DType::kBF16, 4};
  SgdOptions nesterov;
  nesterov.momentum = 0.9f;
  nesterov.dampening = 0.1f;
  nesterov.nesterov = true;
  EXPECT_EQ(SgdStep(nesterov, SgdStepArgs{}, s).status().code(), StatusCode::kInvalidArgument);
  SgdOptions momentum;
  momentum.momentum = 0.9f;
  auto missing = SgdStep(momentum, SgdStepArgs{}, s);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("exp_avg"), std::string::npos);
  EXPECT_EQ(p, std::vector<float>(4, 1.0f));
}

TEST(SgdStep, ReportsNonFiniteGradients) {
  std::vector<float> p(kLarge, 1.0f), g(kLarge, 1.0f);
  g[kLarge - 1] = NAN;
  OptimSpans s{p.data(), nullptr, nullptr, g.data(), DType::kF32, nullptr, DType::kBF16, kLarge};
  auto r = SgdStep(SgdOptions{}, SgdStepArgs{}, s);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->has_non_finite_grads);
}

}  // namespace
}  // namespace tierflow
