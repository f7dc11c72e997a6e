// LaunchGradStats: the statistics a step of one micro-batch decides on, made
// on the device. On the CPU device they are optim's GradStats bit for bit
// (what the host computed before); on CUDA within rounding of them (skipped,
// with the reason, without a GPU); on the simulated device those of its zero
// gradients; bad arguments enqueue nothing.
#include "engine/device_grad_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/half.h"
#include "optim/grad_stats.h"
#include "tests/common/require.h"
#include "tierflow/sim_profile.h"

namespace tierflow {
namespace {

std::unique_ptr<Device> Make(DeviceChoice kind) {
  DeviceOptions o;
  o.kind = kind;
  if (kind == DeviceChoice::kSim) o.sim = *FindBuiltinSimProfile("h100-pcie");
  auto d = CreateDevice(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

// Statistics of `host` (n elements of dtype) computed on `device`.
GradSquares OnDevice(Device& device, DType dtype, const std::vector<char>& host, size_t n) {
  auto stream = device.CreateStream("test");
  EXPECT_TRUE(stream.ok());
  auto grads = device.Allocate(host.size(), "grads");
  auto out = device.Allocate(sizeof(GradSquares), "stats");
  auto scratch = device.Allocate(kGradSquaresScratchBytes, "scratch");
  EXPECT_TRUE(grads.ok() && out.ok() && scratch.ok());
  EXPECT_TRUE((*stream)->CopyHostToDevice(grads->data(), host.data(), host.size()).ok());
  EXPECT_TRUE(LaunchGradStats(**stream, dtype, grads->data(), static_cast<int64_t>(n),
                              out->as<GradSquares>(), scratch->as<double>())
                  .ok());
  GradSquares result;
  result.sum_squares = -1;
  result.non_finite = 7;
  EXPECT_TRUE((*stream)->CopyDeviceToHost(&result, out->data(), sizeof(result)).ok());
  EXPECT_TRUE((*stream)->Synchronize().ok());
  return result;
}

std::vector<char> Grads(DType dtype, size_t n, float poison_at_end) {
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = std::sin(0.37f * static_cast<float>(i)) * 1e-2f;
  f[n - 1] = poison_at_end;
  std::vector<char> bytes(n * DTypeSize(dtype));
  ConvertBuffer(DType::kF32, f.data(), dtype, bytes.data(), n);
  return bytes;
}

TEST(DeviceGradStats, CpuDeviceGivesTheHostsBits) {
  auto device = Make(DeviceChoice::kCpu);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t n : {size_t{1}, size_t{1000}, size_t{100003}}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " n=" + std::to_string(n));
      const std::vector<char> g = Grads(dtype, n, 0.25f);
      auto want = GradStats(g.data(), dtype, n);
      ASSERT_TRUE(want.ok());
      const GradSquares got = OnDevice(*device, dtype, g, n);
      EXPECT_EQ(got.sum_squares, want->sum_squares);
      EXPECT_GT(got.sum_squares, 0.0);
      EXPECT_EQ(got.non_finite, 0u);
    }
  }
}

TEST(DeviceGradStats, NonFiniteElementsAreFlagged) {
  auto device = Make(DeviceChoice::kCpu);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      const std::vector<char> g = Grads(dtype, 4099, bad);
      const GradSquares got = OnDevice(*device, dtype, g, 4099);
      EXPECT_EQ(got.non_finite, 1u) << DTypeName(dtype) << " " << bad;
      EXPECT_TRUE(std::isnan(got.sum_squares));
    }
  }
}

TEST(DeviceGradStats, SimulatedDeviceReportsItsZeroGradients) {
  auto device = Make(DeviceChoice::kSim);
  const std::vector<char> g = Grads(DType::kBF16, 1 << 16, 0.5f);
  const GradSquares got = OnDevice(*device, DType::kBF16, g, 1 << 16);
  EXPECT_EQ(got.sum_squares, 0.0);  // kernels do not run: the result is never written
  EXPECT_EQ(got.non_finite, 0u);
}

// CUDA's reduction (kernels/grad_squares.h) adds in another order than the
// CPU's, in double: within GradStats' own relative error of the host's sum,
// the same bits run to run, and non-finite elements flagged.
TEST(DeviceGradStats, CudaMatchesTheHostAndIsDeterministic) {
  const std::string why = CudaUnavailableReason();
  if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
  auto device = Make(DeviceChoice::kCuda);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t n : {size_t{1}, size_t{1000}, size_t{3} << 20}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " n=" + std::to_string(n));
      const std::vector<char> g = Grads(dtype, n, 0.25f);
      auto want = GradStats(g.data(), dtype, n);
      ASSERT_TRUE(want.ok());
      const GradSquares got = OnDevice(*device, dtype, g, n);
      EXPECT_NEAR(got.sum_squares, want->sum_squares, 2e-6 * want->sum_squares);
      EXPECT_EQ(got.non_finite, 0u);
      EXPECT_EQ(OnDevice(*device, dtype, g, n).sum_squares, got.sum_squares);
    }
    const std::vector<char> bad = Grads(dtype, 4099, std::numeric_limits<float>::quiet_NaN());
    const GradSquares flagged = OnDevice(*device, dtype, bad, 4099);
    EXPECT_EQ(flagged.non_finite, 1u);
    EXPECT_TRUE(std::isnan(flagged.sum_squares));
  }
}

TEST(DeviceGradStats, BadArgumentsAreRefusedBeforeEnqueueing) {
  auto device = Make(DeviceChoice::kCpu);
  auto stream = device->CreateStream("test");
  ASSERT_TRUE(stream.ok());
  GradSquares out;
  float g = 1;
  EXPECT_EQ(LaunchGradStats(**stream, DType::kF32, &g, 0, &out, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchGradStats(**stream, DType::kF32, nullptr, 1, &out, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchGradStats(**stream, DType::kF32, &g, 1, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*stream)->Synchronize().ok());
}

}  // namespace
}  // namespace tierflow
