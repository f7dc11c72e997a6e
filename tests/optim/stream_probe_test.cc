// StreamProbe touches every stream an optimizer step touches (so its time is
// an honest bandwidth limit) and leaves live buffers unchanged with addend 0;
// TrafficBytesPerParam counts the bytes of each layout.
#include <vector>

#include <gtest/gtest.h>

#include "optim/stream_probe.h"
#include "tests/optim/optim_test_util.h"

namespace tierflow {
namespace {

TEST(StreamProbe, ReadsTheGradientsAndUpdatesEveryStateStreamInPlace) {
  const size_t n = 2 * kOptimChunkElems + 33;
  for (DType grad_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto p0 = optim_test::RandomFloats(n, 1, -1, 1);
    std::vector<float> p = p0, m(n, 2.0f), v(n, 3.0f);
    optim_test::GradBuffer g(grad_dtype, n, 1);
    for (size_t i = 0; i < n; ++i) g.Set(i, 0.5f);
    std::vector<uint16_t> out(n, 0);
    OptimSpans s{p.data(), m.data(), v.data(), g.data(), grad_dtype, out.data(), DType::kBF16, n};

    ASSERT_TRUE(StreamProbe(s, 0.0f).ok());  // addend 0: values unchanged
    EXPECT_EQ(p, p0);
    EXPECT_EQ(m, std::vector<float>(n, 2.0f));
    optim_test::ExpectOutIsRoundedParams(out.data(), DType::kBF16, p.data(), n);

    ASSERT_TRUE(StreamProbe(s, 2.0f).ok());  // each state stream gets grad * 2 = 1 added
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(p[i], p0[i] + 1.0f) << i;
      ASSERT_EQ(m[i], 3.0f) << i;
      ASSERT_EQ(v[i], 4.0f) << i;
    }
    optim_test::ExpectOutIsRoundedParams(out.data(), DType::kBF16, p.data(), n);
  }
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
