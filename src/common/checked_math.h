// Overflow-checked and saturating integer arithmetic for sizes computed from
// outside input (config.json dimensions, CLI sizes, file headers).
//
// Checked*: report overflow, for counts that must be exact or refused.
// Saturating*: clamp at the type's maximum, for byte budgets that are only
// compared against a capacity: a saturated total never "fits", whereas a
// wrapped one could look small. All arguments must be non-negative for the
// Saturating* int64_t overloads (negative inputs are clamped to 0 first).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "tierflow/status.h"

namespace tierflow {

// True and *out = a * b (a + b) when the result fits; false (and *out
// unspecified) on overflow.
template <typename T>
[[nodiscard]] constexpr bool CheckedMul(T a, T b, T* out) {
  return !__builtin_mul_overflow(a, b, out);
}
template <typename T>
[[nodiscard]] constexpr bool CheckedAdd(T a, T b, T* out) {
  return !__builtin_add_overflow(a, b, out);
}

constexpr uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
constexpr uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
// SaturatingProduct(n, c, a) = n * c * a and SaturatingSum(x, y, z) = x + y
// + z in uint64_t, clamped at UINT64_MAX. Arguments are converted to
// uint64_t: pass only non-negative values.
template <typename... T>
constexpr uint64_t SaturatingProduct(T... values) {
  uint64_t r = 1;
  ((r = SaturatingMul(r, static_cast<uint64_t>(values))), ...);
  return r;
}
template <typename... T>
constexpr uint64_t SaturatingSum(T... values) {
  uint64_t r = 0;
  ((r = SaturatingAdd(r, static_cast<uint64_t>(values))), ...);
  return r;
}

constexpr int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
constexpr int64_t SaturatingAdd(int64_t a, int64_t b) {
  a = a < 0 ? 0 : a;
  b = b < 0 ? 0 : b;
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

// `value` as T when it fits; otherwise InvalidArgument "<what> is <value>,
// which is more than <max of T>". For narrowing outside values (a
// --block-size into a uint32_t) without silently wrapping.
template <typename T, typename U>
StatusOr<T> CheckedNarrow(U value, std::string_view what) {
  if (!std::in_range<T>(value)) {
    return InvalidArgumentError(std::string(what) + " is " + std::to_string(value) +
                                ", which is outside " +
                                std::to_string(std::numeric_limits<T>::min()) + ".." +
                                std::to_string(std::numeric_limits<T>::max()));
  }
  return static_cast<T>(value);
}

}  // namespace tierflow
