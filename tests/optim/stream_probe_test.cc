// StreamProbe touches every stream an optimizer step touches (so its time is
// an honest bandwidth limit), in both shapes, at every instruction-set level
// this CPU runs, for any thread count; it leaves live buffers unchanged with
// addend 0 and narrows the copy exactly as FloatToBf16/FloatToFp16 do;
// TrafficBytesPerParam counts the bytes of each layout.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "optim/stream_probe.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

// Weights in [-1, 1) with awkward values at places in the vector body and
// the scalar tail: bf16 and fp16 rounding ties both ways, fp32 subnormals,
// fp16 overflow and subnormals, Inf and (for the bf16 copy) NaN.
std::vector<float> Weights(size_t n, bool with_nan) {
  std::vector<float> p = optim_test::RandomFloats(n, 1, -1, 1);
  const std::vector<float> specials = {
      BitsToFloat(0x3f808000u),  // bf16 tie, rounds down to even
      BitsToFloat(0x3f818000u),  // bf16 tie, rounds up to even
      1.0f + 0x1p-11f,           // fp16 tie, rounds down to even
      1.0f + 3 * 0x1p-11f,       // fp16 tie, rounds up to even
      1e-40f,                    // fp32 subnormal
      3e-6f,                     // fp16 subnormal
      65520.0f,                  // fp16 overflow: Inf
      -3e38f,
      std::numeric_limits<float>::infinity(),
  };
  for (size_t k = 0; k < specials.size(); ++k) {
    for (size_t at : {k * 5 + 3, n - 1 - k}) {
      if (at < n) p[at] = specials[k];
    }
  }
  if (with_nan && n > 40) p[40] = std::numeric_limits<float>::quiet_NaN();
  return p;
}

// Equal as values, NaN equal to NaN.
void ExpectSameValues(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << "[" << i << "]";
  }
}

TEST(StreamProbe, EveryShapeAndLevelReadsTheGradientsAndUpdatesEveryStateStream) {
  const size_t n = 2 * kOptimChunkElems + 33;
  const std::vector<std::optional<DType>> outs = {std::nullopt, DType::kF32, DType::kBF16,
                                                  DType::kF16};
  for (Isa isa : SupportedIsas()) {
    for (ProbeShape shape : kProbeShapes) {
      for (int threads : {1, 3}) {
        for (DType grad_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
          for (const auto& out_dtype : outs) {
            SCOPED_TRACE(::testing::Message()
                         << IsaName(isa) << " " << ProbeShapeName(shape) << " " << threads
                         << " threads, grads " << DTypeName(grad_dtype) << " out "
                         << (out_dtype ? DTypeName(*out_dtype) : "none"));
            // F16C keeps a NaN's payload where FloatToFp16 makes it canonical.
            const auto p0 = Weights(n, out_dtype != DType::kF16);
            std::vector<float> p = p0, m(n, 2.0f), v(n, 3.0f);
            optim_test::GradBuffer g(grad_dtype, n, 1);
            for (size_t i = 0; i < n; ++i) g.Set(i, 0.5f);
            std::vector<float> out(n, 0.0f);  // room for any out dtype
            OptimSpans s{p.data(),   m.data(), v.data(),    g.data(),
                         grad_dtype, nullptr,  DType::kF32, n};
            if (out_dtype) {
              s.out = out.data();
              s.out_dtype = *out_dtype;
            }
            optim_test::WithThreads(threads, [&] {
              ASSERT_TRUE(StreamProbe(s, 0.0f, shape, isa).ok());  // values unchanged
              ExpectSameValues(p, p0, "params");
              ASSERT_EQ(m, std::vector<float>(n, 2.0f));
              if (out_dtype) {
                optim_test::ExpectOutIsRoundedParams(out.data(), *out_dtype, p.data(), n);
              }

              ASSERT_TRUE(StreamProbe(s, 2.0f, shape, isa).ok());  // each gets 0.5 * 2 = 1
              for (size_t i = 0; i < n; ++i) {
                const float want = p0[i] + 1.0f;
                ASSERT_TRUE(p[i] == want || (std::isnan(p[i]) && std::isnan(want))) << i;
                ASSERT_EQ(m[i], 3.0f) << i;
                ASSERT_EQ(v[i], 4.0f) << i;
              }
              if (out_dtype) {
                optim_test::ExpectOutIsRoundedParams(out.data(), *out_dtype, p.data(), n);
              }
            });
          }
        }
      }
    }
  }
}

TEST(StreamProbe, LeavesAbsentStateStreamsAloneAndHandlesSmallSpans) {
  for (Isa isa : SupportedIsas()) {
    for (ProbeShape shape : kProbeShapes) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{100}}) {
        SCOPED_TRACE(::testing::Message()
                     << IsaName(isa) << " " << ProbeShapeName(shape) << " n " << n);
        std::vector<float> p(n, 1.0f), m(n, 2.0f), g(n, 1.0f);
        OptimSpans lion{p.data(),    m.data(), nullptr,      g.data(),
                        DType::kF32, nullptr,  DType::kBF16, n};
        ASSERT_TRUE(StreamProbe(lion, 1.0f, shape, isa).ok());
        EXPECT_EQ(p, std::vector<float>(n, 2.0f));
        EXPECT_EQ(m, std::vector<float>(n, 3.0f));
        OptimSpans sgd{p.data(), nullptr, nullptr, g.data(), DType::kF32, nullptr, DType::kBF16, n};
        ASSERT_TRUE(StreamProbe(sgd, 1.0f, shape, isa).ok());
        EXPECT_EQ(p, std::vector<float>(n, 3.0f));
      }
    }
  }
}

TEST(StreamProbe, RefusesAnUnknownShapeAndMissingSpans) {
  float f = 0;
  OptimSpans s{&f, nullptr, nullptr, &f, DType::kF32, nullptr, DType::kBF16, 1};
  Status bad_shape = StreamProbe(s, 0.0f, static_cast<ProbeShape>(7), Isa::kBaseline);
  EXPECT_EQ(bad_shape.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_shape.message().find("shape"), std::string::npos) << bad_shape.message();
  s.grads = nullptr;
  EXPECT_NE(StreamProbe(s, 0.0f, ProbeShape::kBlocked, Isa::kBaseline).message().find("grads"),
            std::string::npos);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (CpuSupportsIsa(isa)) continue;
    s.grads = &f;
    Status missing = StreamProbe(s, 0.0f, ProbeShape::kBlocked, isa);
    EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(missing.message().find(IsaName(isa)), std::string::npos) << missing.message();
  }
}

TEST(StreamProbe, RunsAtTheWidestLevelThisCpuHas) {
  const std::vector<Isa> levels = SupportedIsas();
  EXPECT_EQ(StreamProbeIsa(), *std::max_element(levels.begin(), levels.end()));
}

TEST(TrafficBytesPerParam, CountsEachStreamAtItsDtype) {
  float f = 0;
  uint16_t h = 0;
  OptimSpans adam{&f, &f, &f, &f, DType::kF32, nullptr, DType::kBF16, 1};
  EXPECT_EQ(TrafficBytesPerParam(adam), 28u);  // 3 x (4 read + 4 write) + 4
  adam.out = &h;
  EXPECT_EQ(TrafficBytesPerParam(adam), 30u);  // + bf16 copy for the device
  adam.grad_dtype = DType::kBF16;
  EXPECT_EQ(TrafficBytesPerParam(adam), 28u);
  OptimSpans lion{&f, &f, nullptr, &f, DType::kF16, nullptr, DType::kBF16, 1};
  EXPECT_EQ(TrafficBytesPerParam(lion), 18u);
  OptimSpans sgd{&f, nullptr, nullptr, &f, DType::kF32, &f, DType::kF32, 1};
  EXPECT_EQ(TrafficBytesPerParam(sgd), 16u);  // params 8 + grads 4 + f32 out 4
}

TEST(ValidateOptimSpans, NamesTheMissingSpan) {
  float f = 0;
  OptimSpans s{&f, nullptr, nullptr, &f, DType::kF32, nullptr, DType::kBF16, 10};
  Status st = ValidateOptimSpans(s, true, false, "Lion");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Lion"), std::string::npos);
  EXPECT_NE(st.message().find("exp_avg"), std::string::npos);
  s.grads = nullptr;
  s.exp_avg = &f;
  EXPECT_NE(ValidateOptimSpans(s, true, false, "x").message().find("grads"), std::string::npos);
  s.grads = &f;
  s.grad_dtype = static_cast<DType>(7);
  EXPECT_EQ(ValidateOptimSpans(s, true, false, "x").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow
