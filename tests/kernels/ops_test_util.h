// Helpers of the op tests: seeded random tensors in any storage type,
// value-scaled closeness checks (atol + |ref| * rtol), and central-difference
// numeric gradients.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "tierflow/dtype.h"

namespace tierflow::testing_ops {

// Machine epsilon of the storage type: the spacing of values near 1.
template <typename T>
constexpr double Eps();
template <>
constexpr double Eps<float>() {
  return 1.1920929e-7;
}
template <>
constexpr double Eps<bf16>() {
  return 0.0078125;
}
template <>
constexpr double Eps<fp16>() {
  return 0.0009765625;
}

template <typename T>
std::vector<T> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = FromFloat<T>(dist(rng));
  return v;
}

template <typename T>
std::vector<float> Widen(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = ToFloat(v[i]);
  return out;
}

template <typename T>
std::vector<T> Narrow(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FromFloat<T>(v[i]);
  return out;
}

// Expects |got - ref| <= atol + |ref| * rtol elementwise; reports the worst
// element (and stops after a few failures so logs stay readable).
template <typename A, typename B>
void ExpectClose(const std::vector<A>& ref, const std::vector<B>& got, double atol, double rtol,
                 const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < ref.size() && failures < 5; ++i) {
    const double r = ToFloat(ref[i]), g = ToFloat(got[i]);
    const double tol = atol + std::fabs(r) * rtol;
    if (!(std::fabs(r - g) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: ref " << r << " got " << g << " (tol " << tol << ")";
      ++failures;
    }
  }
}

template <typename T>
void ExpectBitIdentical(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0) << what << " differs";
}

// Central difference of loss() with respect to x[i]: (L(x+h) - L(x-h)) / 2h.
inline double NumericGrad(std::vector<float>* x, size_t i, double h,
                          const std::function<double()>& loss) {
  const float saved = (*x)[i];
  (*x)[i] = static_cast<float>(saved + h);
  const double plus = loss();
  (*x)[i] = static_cast<float>(saved - h);
  const double minus = loss();
  (*x)[i] = saved;
  return (plus - minus) / (2.0 * h);
}

// Gradient check: compares analytic[i] with the numeric gradient at up to
// `max_checks` evenly spread coordinates. Tolerance |a - n| <= 5e-3 + 1e-2 |n|:
// fp32 forward outputs summed in double with h = 1e-2 leave about 1e-4 of
// truncation and round-off error on O(1) gradients, far below a real bug.
inline void CheckGradient(std::vector<float>* x, const std::vector<float>& analytic,
                          const std::function<double()>& loss, const std::string& what,
                          size_t max_checks = 48, double h = 1e-2) {
  ASSERT_EQ(x->size(), analytic.size()) << what;
  const size_t step = std::max<size_t>(1, x->size() / max_checks);
  int failures = 0;
  for (size_t i = 0; i < x->size() && failures < 5; i += step) {
    const double numeric = NumericGrad(x, i, h, loss);
    const double tol = 5e-3 + 1e-2 * std::fabs(numeric);
    if (!(std::fabs(numeric - analytic[i]) <= tol)) {
      ADD_FAILURE() << what << " grad[" << i << "]: analytic " << analytic[i] << " numeric "
                    << numeric << " (tol " << tol << ")";
      ++failures;
    }
  }
}

// sum_i w[i] * y[i] in double: the scalar whose gradient wrt y is w.
inline double Dot(const std::vector<float>& w, const std::vector<float>& y) {
  double s = 0.0;
  for (size_t i = 0; i < w.size(); ++i) s += static_cast<double>(w[i]) * y[i];
  return s;
}

}  // namespace tierflow::testing_ops
