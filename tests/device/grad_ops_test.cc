// The device operations that prepare gradients for PCIe (tierflow/device.h):
// Stream::Cast and Stream::SumSquares, each against its plain reference.
//   Cast: every (from, to) pair bit for bit with FromFloat<To>(ToFloat(x))
//     elementwise, specials included (zeros, subnormals, rounding ties, fp16
//     overflow, Inf, NaN), on the CPU device and on CUDA.
//   SumSquares: on the CPU device GradStats' bits (common/grad_stats.h, what
//     the host computes), and both devices within GradStats' own rounding of
//     a plain double sum; the same bits run to run; non-finite elements
//     flagged. On the simulated device neither op runs (the result stays
//     that of its zero memory).
// CUDA tests skip, with the reason, without a GPU. Bad arguments enqueue
// nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/grad_stats.h"
#include "common/half.h"
#include "tests/common/require.h"
#include "tests/common/special_floats.h"
#include "tierflow/device.h"
#include "tierflow/sim_profile.h"

namespace tierflow {
namespace {

constexpr DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

std::unique_ptr<Device> Make(DeviceChoice kind) {
  DeviceOptions o;
  o.kind = kind;
  if (kind == DeviceChoice::kSim) o.sim = *FindBuiltinSimProfile("h100-pcie");
  auto d = CreateDevice(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

// ---- plain references ----

float PlainLoad(DType dtype, const char* p, size_t i) {
  switch (dtype) {
    case DType::kF32: {
      float x;
      std::memcpy(&x, p + 4 * i, 4);
      return x;
    }
    case DType::kBF16: {
      bf16 x;
      std::memcpy(&x, p + 2 * i, 2);
      return ToFloat(x);
    }
    case DType::kF16: {
      fp16 x;
      std::memcpy(&x, p + 2 * i, 2);
      return ToFloat(x);
    }
  }
  return 0;
}

void PlainStore(DType dtype, char* p, size_t i, float v) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(p + 4 * i, &v, 4);
      return;
    case DType::kBF16: {
      const bf16 x = FromFloat<bf16>(v);
      std::memcpy(p + 2 * i, &x, 2);
      return;
    }
    case DType::kF16: {
      const fp16 x = FromFloat<fp16>(v);
      std::memcpy(p + 2 * i, &x, 2);
      return;
    }
  }
}

// Element by element: each element is FromFloat<To>(ToFloat(x)).
std::vector<char> PlainCast(DType from, const std::vector<char>& src, DType to, size_t n) {
  std::vector<char> dst(n * DTypeSize(to));
  for (size_t i = 0; i < n; ++i) PlainStore(to, dst.data(), i, PlainLoad(from, src.data(), i));
  return dst;
}

// The sum of squares in double, element by element in order.
double PlainSumSquares(DType dtype, const std::vector<char>& g, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = PlainLoad(dtype, g.data(), i);
    sum += x * x;
  }
  return sum;
}

// n values of `dtype`: mostly normal(0, scale), every fifth one a special
// (finite ones only unless `non_finite`), stored through the plain reference.
std::vector<char> Values(DType dtype, size_t n, uint32_t seed, bool non_finite) {
  std::vector<uint32_t> specials = testing_common::FiniteSpecialFloatBits();
  if (non_finite) {
    for (uint32_t b : testing_common::NonFiniteFloatBits()) specials.push_back(b);
  }
  const std::vector<uint32_t> bits = testing_common::MixedFloatBits(n, seed, 3.0f, specials);
  std::vector<char> f32(n * 4);
  std::memcpy(f32.data(), bits.data(), n * 4);
  return dtype == DType::kF32 ? f32 : PlainCast(DType::kF32, f32, dtype, n);
}

// Small finite gradients, the last one `poison_at_end`.
std::vector<char> Grads(DType dtype, size_t n, float poison_at_end) {
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = std::sin(0.37f * static_cast<float>(i)) * 1e-2f;
  f[n - 1] = poison_at_end;
  std::vector<char> bytes(n * DTypeSize(dtype));
  for (size_t i = 0; i < n; ++i) PlainStore(dtype, bytes.data(), i, f[i]);
  return bytes;
}

// ---- the ops on a device ----

std::vector<char> CastOn(Device& device, DType from, const std::vector<char>& host, DType to,
                         size_t n) {
  auto stream = device.CreateStream("cast");
  EXPECT_TRUE(stream.ok());
  auto src = device.Allocate(n * DTypeSize(from), "src");
  auto dst = device.Allocate(n * DTypeSize(to), "dst");
  EXPECT_TRUE(src.ok() && dst.ok());
  std::vector<char> got(n * DTypeSize(to), 0x5a);
  EXPECT_TRUE((*stream)->CopyHostToDevice(src->data(), host.data(), host.size()).ok());
  const Status s = (*stream)->Cast(from, src->data(), to, dst->data(), static_cast<int64_t>(n));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE((*stream)->CopyDeviceToHost(got.data(), dst->data(), got.size()).ok());
  const Status sync = (*stream)->Synchronize();
  EXPECT_TRUE(sync.ok()) << sync.ToString();
  return got;
}

GradSquares SquaresOn(Device& device, DType dtype, const std::vector<char>& host, size_t n) {
  auto stream = device.CreateStream("squares");
  EXPECT_TRUE(stream.ok());
  auto grads = device.Allocate(host.size(), "grads");
  auto out = device.Allocate(sizeof(GradSquares), "stats");
  auto scratch = device.Allocate(kGradSquaresScratchBytes, "scratch");
  EXPECT_TRUE(grads.ok() && out.ok() && scratch.ok());
  EXPECT_TRUE((*stream)->CopyHostToDevice(grads->data(), host.data(), host.size()).ok());
  const Status s = (*stream)->SumSquares(dtype, grads->data(), static_cast<int64_t>(n),
                                         out->as<GradSquares>(), scratch->as<double>());
  EXPECT_TRUE(s.ok()) << s.ToString();
  GradSquares result;
  result.sum_squares = -1;
  result.non_finite = 7;
  EXPECT_TRUE((*stream)->CopyDeviceToHost(&result, out->data(), sizeof(result)).ok());
  EXPECT_TRUE((*stream)->Synchronize().ok());
  return result;
}

uint16_t Bits16(const std::vector<char>& v, size_t i) {
  uint16_t b;
  std::memcpy(&b, v.data() + 2 * i, 2);
  return b;
}

// Bit for bit, except that a NaN only has to be a NaN when `any_nan` (the
// NaN a GPU's conversion makes may carry another payload).
void ExpectSameBits(DType dtype, const std::vector<char>& want, const std::vector<char>& got,
                    size_t n, bool any_nan) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    const float w = PlainLoad(dtype, want.data(), i), g = PlainLoad(dtype, got.data(), i);
    if (any_nan && std::isnan(w)) {
      ASSERT_TRUE(std::isnan(g)) << "element " << i;
      continue;
    }
    if (dtype == DType::kF32) {
      ASSERT_EQ(0, std::memcmp(want.data() + 4 * i, got.data() + 4 * i, 4))
          << "element " << i << ": want " << w << ", got " << g;
    } else {
      ASSERT_EQ(Bits16(want, i), Bits16(got, i))
          << "element " << i << ": want " << w << ", got " << g;
    }
  }
}

// ---- Cast ----

TEST(StreamCast, CpuDeviceMatchesThePlainConversionBitForBit) {
  auto device = Make(DeviceChoice::kCpu);
  for (DType from : kDtypes) {
    for (DType to : kDtypes) {
      for (size_t n : {size_t{1}, size_t{4097}, size_t{100003}}) {
        SCOPED_TRACE(std::string(DTypeName(from)) + " -> " + std::string(DTypeName(to)) +
                     " n=" + std::to_string(n));
        const std::vector<char> src = Values(from, n, 11 + static_cast<uint32_t>(n), true);
        const std::vector<char> got = CastOn(*device, from, src, to, n);
        ExpectSameBits(to, PlainCast(from, src, to, n), got, n, /*any_nan=*/false);
        // The same bits run to run.
        EXPECT_EQ(CastOn(*device, from, src, to, n), got);
      }
    }
  }
}

TEST(StreamCast, CudaMatchesThePlainConversionAndIsDeterministic) {
  const std::string why = CudaUnavailableReason();
  if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
  auto device = Make(DeviceChoice::kCuda);
  for (DType from : kDtypes) {
    for (DType to : kDtypes) {
      for (size_t n : {size_t{1}, size_t{4097}, size_t{3} << 20}) {
        SCOPED_TRACE(std::string(DTypeName(from)) + " -> " + std::string(DTypeName(to)) +
                     " n=" + std::to_string(n));
        const std::vector<char> src = Values(from, n, 23 + static_cast<uint32_t>(n), true);
        const std::vector<char> got = CastOn(*device, from, src, to, n);
        ExpectSameBits(to, PlainCast(from, src, to, n), got, n, /*any_nan=*/true);
        EXPECT_EQ(CastOn(*device, from, src, to, n), got);
      }
    }
  }
}

TEST(StreamCast, SimulatedDeviceDoesNotRunIt) {
  auto device = Make(DeviceChoice::kSim);
  const std::vector<char> src = Values(DType::kF32, 1 << 16, 5, false);
  const std::vector<char> got = CastOn(*device, DType::kF32, src, DType::kBF16, 1 << 16);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], 0) << i;  // never written
}

TEST(StreamCast, BadArgumentsAreRefusedBeforeEnqueueing) {
  auto device = Make(DeviceChoice::kCpu);
  auto stream = device->CreateStream("test");
  ASSERT_TRUE(stream.ok());
  float src = 1;
  uint16_t dst = 0;
  EXPECT_EQ((*stream)->Cast(DType::kF32, &src, DType::kBF16, &dst, 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->Cast(DType::kF32, nullptr, DType::kBF16, &dst, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->Cast(DType::kF32, &src, DType::kBF16, nullptr, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(dst, 0);
}

// ---- SumSquares ----

TEST(StreamSumSquares, CpuDeviceGivesTheHostsBits) {
  auto device = Make(DeviceChoice::kCpu);
  for (DType dtype : kDtypes) {
    for (size_t n : {size_t{1}, size_t{1000}, size_t{100003}}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " n=" + std::to_string(n));
      const std::vector<char> g = Grads(dtype, n, 0.25f);
      auto want = GradStats(g.data(), dtype, n);
      ASSERT_TRUE(want.ok());
      const GradSquares got = SquaresOn(*device, dtype, g, n);
      EXPECT_EQ(got.sum_squares, want->sum_squares);
      EXPECT_GT(got.sum_squares, 0.0);
      EXPECT_EQ(got.non_finite, 0u);
      const double plain = PlainSumSquares(dtype, g, n);
      EXPECT_NEAR(got.sum_squares, plain, 2e-6 * plain);
      EXPECT_EQ(SquaresOn(*device, dtype, g, n).sum_squares, got.sum_squares);
    }
  }
}

TEST(StreamSumSquares, NonFiniteElementsAreFlagged) {
  auto device = Make(DeviceChoice::kCpu);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (DType dtype : kDtypes) {
      const std::vector<char> g = Grads(dtype, 4099, bad);
      const GradSquares got = SquaresOn(*device, dtype, g, 4099);
      EXPECT_EQ(got.non_finite, 1u) << DTypeName(dtype) << " " << bad;
      EXPECT_TRUE(std::isnan(got.sum_squares));
    }
  }
}

TEST(StreamSumSquares, SimulatedDeviceReportsItsZeroGradients) {
  auto device = Make(DeviceChoice::kSim);
  const std::vector<char> g = Grads(DType::kBF16, 1 << 16, 0.5f);
  const GradSquares got = SquaresOn(*device, DType::kBF16, g, 1 << 16);
  EXPECT_EQ(got.sum_squares, 0.0);  // kernels do not run: the result is never written
  EXPECT_EQ(got.non_finite, 0u);
}

// CUDA's reduction adds in another order than the CPU's, in double: within
// GradStats' own relative error of the host's sum and of the plain one, the
// same bits run to run, and non-finite elements flagged.
TEST(StreamSumSquares, CudaMatchesTheHostAndIsDeterministic) {
  const std::string why = CudaUnavailableReason();
  if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
  auto device = Make(DeviceChoice::kCuda);
  for (DType dtype : kDtypes) {
    for (size_t n : {size_t{1}, size_t{1000}, size_t{3} << 20}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " n=" + std::to_string(n));
      const std::vector<char> g = Grads(dtype, n, 0.25f);
      auto want = GradStats(g.data(), dtype, n);
      ASSERT_TRUE(want.ok());
      const GradSquares got = SquaresOn(*device, dtype, g, n);
      EXPECT_NEAR(got.sum_squares, want->sum_squares, 2e-6 * want->sum_squares);
      const double plain = PlainSumSquares(dtype, g, n);
      EXPECT_NEAR(got.sum_squares, plain, 2e-6 * plain);
      EXPECT_EQ(got.non_finite, 0u);
      EXPECT_EQ(SquaresOn(*device, dtype, g, n).sum_squares, got.sum_squares);
    }
    for (float bad :
         {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      const std::vector<char> g = Grads(dtype, 4099, bad);
      const GradSquares flagged = SquaresOn(*device, dtype, g, 4099);
      EXPECT_EQ(flagged.non_finite, 1u) << DTypeName(dtype) << " " << bad;
      EXPECT_TRUE(std::isnan(flagged.sum_squares));
    }
  }
}

TEST(StreamSumSquares, BadArgumentsAreRefusedBeforeEnqueueing) {
  auto device = Make(DeviceChoice::kCpu);
  auto stream = device->CreateStream("test");
  ASSERT_TRUE(stream.ok());
  GradSquares out;
  out.sum_squares = -1;
  float g = 1;
  EXPECT_EQ((*stream)->SumSquares(DType::kF32, &g, 0, &out, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->SumSquares(DType::kF32, nullptr, 1, &out, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->SumSquares(DType::kF32, &g, 1, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*stream)->Synchronize().ok());
  EXPECT_EQ(out.sum_squares, -1);
}

}  // namespace
}  // namespace tierflow
