// Test helpers for the CPU optimizers: buffers with a chosen misalignment,
// gradient generators, and the tolerance check against the double reference.
#pragma once

#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "optim/optim_spans.h"
#include "tierflow/dtype.h"

namespace tierflow::optim_test {

// fp32 ulp at 1.0 / 2: the unit roundoff of one fp32 operation.
inline constexpr double kF32Eps = 5.9604644775390625e-8;  // 2^-24

// n elements of T starting `offset_elems` past a 64-byte boundary, so tests
// can put a span at any alignment.
template <typename T>
class OffsetBuffer {
 public:
  OffsetBuffer(size_t n, size_t offset_elems)
      : storage_((n + offset_elems) * sizeof(T) + 64), n_(n), offset_elems_(offset_elems) {
    auto base = reinterpret_cast<uintptr_t>(storage_.data());
    base = (base + 63) & ~uintptr_t{63};
    data_ = reinterpret_cast<T*>(base) + offset_elems;
  }
  // A copy owns new storage (at the same misalignment) holding the same values.
  OffsetBuffer(const OffsetBuffer& other) : OffsetBuffer(other.n_, other.offset_elems_) {
    if (n_ > 0) std::memcpy(data_, other.data_, n_ * sizeof(T));
  }
  OffsetBuffer& operator=(const OffsetBuffer&) = delete;
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  size_t size() const { return n_; }

 private:
  std::vector<unsigned char> storage_;
  T* data_ = nullptr;
  size_t n_;
  size_t offset_elems_;
};

// Gradients in any dtype, stored as raw bytes with a chosen misalignment.
class GradBuffer {
 public:
  GradBuffer(DType dtype, size_t n, size_t offset_elems)
      : dtype_(dtype),
        bytes_((n + offset_elems) * DTypeSize(dtype) + 64 + 1),
        n_(n),
        offset_elems_(offset_elems) {
    auto base = reinterpret_cast<uintptr_t>(bytes_.data());
    base = (base + 63) & ~uintptr_t{63};
    data_ = reinterpret_cast<unsigned char*>(base) + offset_elems * DTypeSize(dtype);
  }
  GradBuffer(const GradBuffer& other) : GradBuffer(other.dtype_, other.n_, other.offset_elems_) {
    if (n_ > 0) std::memcpy(data_, other.data_, n_ * DTypeSize(dtype_));
  }
  GradBuffer& operator=(const GradBuffer&) = delete;
  void Set(size_t i, float value) {
    switch (dtype_) {
      case DType::kF32:
        std::memcpy(data_ + 4 * i, &value, 4);
        return;
      case DType::kBF16: {
        bf16 h = FloatToBf16(value);
        std::memcpy(data_ + 2 * i, &h, 2);
        return;
      }
      case DType::kF16: {
        fp16 h = FloatToFp16(value);
        std::memcpy(data_ + 2 * i, &h, 2);
        return;
      }
    }
  }
  // Stores raw bits: the low 16 for bf16/fp16 (any code, signalling NaNs included).
  void SetBits(size_t i, uint32_t bits) {
    if (dtype_ == DType::kF32) {
      std::memcpy(data_ + 4 * i, &bits, 4);
    } else {
      const uint16_t h = static_cast<uint16_t>(bits);
      std::memcpy(data_ + 2 * i, &h, 2);
    }
  }
  const void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  size_t size() const { return n_; }

 private:
  DType dtype_;
  std::vector<unsigned char> bytes_;
  unsigned char* data_;
  size_t n_;
  size_t offset_elems_;
};

// Per-element magnitudes over four decades with a fresh sign and a +-50%
// wobble each step: moments see both cancelling and reinforcing gradients,
// while every element's gradient stays within a factor of 2 of its own scale
// (so the error of m / sqrt(v) stays a few ulps; see the tolerance notes).
class GradGenerator {
 public:
  GradGenerator(size_t n, uint32_t seed) : rng_(seed), magnitude_(n) {
    std::uniform_real_distribution<double> exponent(-3.0, 1.0);
    for (double& m : magnitude_) m = std::pow(10.0, exponent(rng_));
  }
  double magnitude(size_t i) const { return magnitude_[i]; }
  void Fill(GradBuffer& g) {
    std::uniform_real_distribution<double> wobble(0.5, 1.0);
    std::bernoulli_distribution negative(0.5);
    for (size_t i = 0; i < g.size(); ++i) {
      double x = magnitude_[i] * wobble(rng_);
      g.Set(i, static_cast<float>(negative(rng_) ? -x : x));
    }
  }

 private:
  std::mt19937 rng_;
  std::vector<double> magnitude_;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Asserts |actual - expected| <= rtol * (|expected| + scale[i]) for every
// element, where scale[i] is the size of the terms that built the value (so a
// value that cancelled to near zero keeps the error its terms allow), i.e.
// atol_i = rtol * scale[i]. Reports the first few failures with their index.
inline void ExpectClose(const float* actual, const double* expected,
                        const std::vector<double>& scale, double rtol, const std::string& what) {
  int failures = 0;
  for (size_t i = 0; i < scale.size() && failures < 5; ++i) {
    const double tol = rtol * (std::fabs(expected[i]) + scale[i]);
    const double err = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (!(err <= tol)) {
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", reference " << expected[i]
                    << ", error " << err << " > tolerance " << tol;
      ++failures;
    }
  }
}

// The 16-bit (or fp32) copy must be exactly the rounded fp32 weights.
inline void ExpectOutIsRoundedParams(const void* out, DType out_dtype, const float* params,
                                     size_t n) {
  int failures = 0;
  for (size_t i = 0; i < n && failures < 5; ++i) {
    uint32_t got = 0, want = 0;
    switch (out_dtype) {
      case DType::kF32:
        std::memcpy(&got, static_cast<const float*>(out) + i, 4);
        std::memcpy(&want, params + i, 4);
        break;
      case DType::kBF16:
        got = static_cast<const bf16*>(out)[i].bits;
        want = FloatToBf16(params[i]).bits;
        break;
      case DType::kF16:
        got = static_cast<const fp16*>(out)[i].bits;
        want = FloatToFp16(params[i]).bits;
        break;
    }
    if (got != want) {
      ADD_FAILURE() << DTypeName(out_dtype) << " out[" << i << "] bits " << got << " != rounded "
                    << params[i] << " bits " << want;
      ++failures;
    }
  }
}

inline bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Runs fn with exactly `num_threads` threads available to oneTBB (also more
// than this machine's cores: global_control raises the worker limit).
template <typename Fn>
void WithThreads(int num_threads, const Fn& fn) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, num_threads);
  tbb::task_arena arena(num_threads);
  arena.execute(fn);
}

}  // namespace tierflow::optim_test
