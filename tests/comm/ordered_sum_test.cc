// The rank-ordered sum against a plain scalar reference, for every dtype.
#include "comm/ordered_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/half.h"

namespace tierflow::comm {
namespace {

std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float mant = static_cast<float>(static_cast<int>(x >> 9) - (1 << 22)) / (1 << 22);
    const int exp = static_cast<int>((x >> 3) % 24) - 12;
    v[i] = std::ldexp(mant, exp);
  }
  v[0] = std::numeric_limits<float>::denorm_min();
  if (n > 1) v[1] = -0.0f;
  if (n > 2) v[2] = std::numeric_limits<float>::infinity();
  return v;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

template <typename T>
std::vector<T> Narrow(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = v[i];
    } else if constexpr (std::is_same_v<T, bf16>) {
      out[i] = FloatToBf16(v[i]);
    } else {
      out[i] = FloatToFp16(v[i]);
    }
  }
  return out;
}

template <typename T>
void CheckType(DType dtype) {
  const size_t n = 1037;  // ragged
  std::vector<std::vector<T>> contribs;
  for (uint32_t r = 0; r < 4; ++r) contribs.push_back(Narrow<T>(Values(n, r)));
  std::vector<float> out(n);
  WidenInto(out.data(), contribs[0].data(), dtype, n);
  for (size_t r = 1; r < contribs.size(); ++r) AddWidened(out.data(), contribs[r].data(), dtype, n);
  for (size_t i = 0; i < n; ++i) {
    float want = ToFloat(contribs[0][i]);
    for (size_t r = 1; r < contribs.size(); ++r) want += ToFloat(contribs[r][i]);
    ASSERT_EQ(Bits(out[i]), Bits(want)) << "element " << i;
  }
}

TEST(OrderedSum, MatchesTheScalarRankOrderedSumForEveryDtype) {
  CheckType<float>(DType::kF32);
  CheckType<bf16>(DType::kBF16);
  CheckType<fp16>(DType::kF16);
}

TEST(OrderedSum, TheOrderIsObservable) {
  // (a + b) + c != a + (b + c) here: a reduction that reorders is caught.
  const float a[1] = {1e8f}, b[1] = {-1e8f}, c[1] = {1.0f};
  float out[1];
  WidenInto(out, a, DType::kF32, 1);
  AddWidened(out, b, DType::kF32, 1);
  AddWidened(out, c, DType::kF32, 1);
  EXPECT_EQ(out[0], 1.0f);
  WidenInto(out, b, DType::kF32, 1);
  AddWidened(out, c, DType::kF32, 1);
  AddWidened(out, a, DType::kF32, 1);
  EXPECT_EQ(out[0], 0.0f);
}

}  // namespace
}  // namespace tierflow::comm
