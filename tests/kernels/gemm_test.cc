// GEMM: the Eigen/oneTBB path and cuBLAS against the plain reference, over
// transposes, dtypes, strided batches, padded leading dimensions and beta.
#include <tbb/global_control.h>

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "common/half.h"
#include "kernels/gemm.h"

namespace tierflow {
namespace {

struct GemmCase {
  int64_t m, n, k, batch;
  bool ta, tb;
  DType ab, c;
  float beta;
  int64_t pad;  // extra elements per row of every matrix
};

std::string CaseName(const testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& g = info.param;
  return "m" + std::to_string(g.m) + "n" + std::to_string(g.n) + "k" + std::to_string(g.k) + "b" +
         std::to_string(g.batch) + (g.ta ? "T" : "N") + (g.tb ? "T" : "N") + "_" +
         std::string(DTypeName(g.ab)) + "_" + std::string(DTypeName(g.c)) +
         (g.beta != 0 ? "_beta" : "") + (g.pad ? "_pad" : "");
}

// Buffers for one case, filled with values exactly representable in every dtype.
struct GemmData {
  GemmParams p;
  std::vector<uint8_t> a, b, c;
};

GemmData MakeData(const GemmCase& g, uint32_t seed) {
  GemmData d;
  GemmParams& p = d.p;
  p = PackedGemm(g.m, g.n, g.k, g.ta, g.tb, g.ab, g.c, g.batch);
  p.lda += g.pad;
  p.ldb += g.pad;
  p.ldc += g.pad;
  p.stride_a = (g.ta ? g.k : g.m) * p.lda + 3;
  p.stride_b = (g.tb ? g.n : g.k) * p.ldb + 5;
  p.stride_c = g.m * p.ldc + 7;
  p.beta = g.beta;
  p.alpha = 0.75f;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-16, 16);
  auto fill = [&](std::vector<uint8_t>& buf, DType t, int64_t count) {
    buf.assign(static_cast<size_t>(count) * DTypeSize(t), 0);
    for (int64_t i = 0; i < count; ++i) {
      float v = static_cast<float>(dist(rng)) / 8.0f;  // exact in bf16/fp16
      ConvertBuffer(DType::kF32, &v, t, buf.data() + i * DTypeSize(t), 1);
    }
  };
  fill(d.a, g.ab, p.stride_a * g.batch);
  fill(d.b, g.ab, p.stride_b * g.batch);
  fill(d.c, g.c, p.stride_c * g.batch);
  p.a = d.a.data();
  p.b = d.b.data();
  p.c = d.c.data();
  return d;
}

double ValueAt(DType t, const std::vector<uint8_t>& buf, int64_t i) {
  float f;
  ConvertBuffer(t, buf.data() + i * DTypeSize(t), DType::kF32, &f, 1);
  return f;
}

double Eps(DType t) { return t == DType::kF32 ? 1.2e-7 : (t == DType::kBF16 ? 7.9e-3 : 9.8e-4); }

void ExpectCloseToReference(const GemmCase& g, const GemmData& fast, const GemmData& ref) {
  // Products of the inputs are exact in fp32; the only error is fp32
  // accumulation order (k terms) and the final rounding to C's dtype.
  for (int64_t bt = 0; bt < g.batch; ++bt) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        int64_t idx = bt * ref.p.stride_c + i * ref.p.ldc + j;
        double r = ValueAt(g.c, ref.c, idx), f = ValueAt(g.c, fast.c, idx);
        double tol = 1e-5 * g.k + std::fabs(r) * Eps(g.c);
        ASSERT_NEAR(f, r, tol) << "batch " << bt << " (" << i << ", " << j << ")";
      }
    }
  }
  // Padding between rows and batches must be untouched.
  for (int64_t bt = 0; bt < g.batch; ++bt) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = g.n; j < ref.p.ldc; ++j) {
        int64_t idx = bt * ref.p.stride_c + i * ref.p.ldc + j;
        ASSERT_EQ(ValueAt(g.c, fast.c, idx), ValueAt(g.c, ref.c, idx));
      }
    }
  }
}

class GemmTest : public testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, CpuMatchesReference) {
  const GemmCase& g = GetParam();
  GemmData fast = MakeData(g, 1), ref = MakeData(g, 1);
  ASSERT_TRUE(GemmCpu(fast.p).ok());
  ASSERT_TRUE(GemmReference(ref.p).ok());
  ExpectCloseToReference(g, fast, ref);
}

TEST_P(GemmTest, CudaMatchesReference) {
  std::string why = CudaUnavailableReason();
  if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
  const GemmCase& g = GetParam();
  GemmData host = MakeData(g, 2), ref = MakeData(g, 2);
  ASSERT_TRUE(GemmReference(ref.p).ok());
  auto dev = std::move(CreateDevice({.kind = DeviceChoice::kCuda})).value();
  auto stream = std::move(dev->CreateStream("gemm")).value();
  auto da = std::move(dev->Allocate(host.a.size(), "a")).value();
  auto db = std::move(dev->Allocate(host.b.size(), "b")).value();
  auto dc = std::move(dev->Allocate(host.c.size(), "c")).value();
  ASSERT_TRUE(stream->CopyHostToDevice(da.data(), host.a.data(), host.a.size()).ok());
  ASSERT_TRUE(stream->CopyHostToDevice(db.data(), host.b.data(), host.b.size()).ok());
  ASSERT_TRUE(stream->CopyHostToDevice(dc.data(), host.c.data(), host.c.size()).ok());
  GemmParams p = host.p;
  p.a = da.data();
  p.b = db.data();
  p.c = dc.data();
  ASSERT_TRUE(Gemm(*stream, p).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(host.c.data(), dc.data(), host.c.size()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  ExpectCloseToReference(g, host, ref);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    testing::Values(GemmCase{1, 1, 1, 1, false, false, DType::kF32, DType::kF32, 0, 0},
                    GemmCase{7, 5, 3, 1, false, false, DType::kF32, DType::kF32, 0, 0},
                    GemmCase{70, 33, 65, 1, false, true, DType::kF32, DType::kF32, 0.5f, 0},
                    GemmCase{65, 17, 40, 3, true, false, DType::kBF16, DType::kBF16, 0, 2},
                    GemmCase{130, 9, 31, 2, true, true, DType::kF16, DType::kF32, 1.0f, 1},
                    GemmCase{64, 64, 64, 1, false, false, DType::kBF16, DType::kF32, 0, 0},
                    GemmCase{3, 8, 0, 1, false, false, DType::kF32, DType::kF32, 1.0f, 0},
                    GemmCase{33, 12, 16, 4, false, true, DType::kF16, DType::kF16, 0.25f, 3}),
    CaseName);

TEST(Gemm, CpuResultIsIdenticalForAnyThreadCount) {
  GemmCase g{300, 40, 200, 2, false, true, DType::kBF16, DType::kF32, 0, 0};
  GemmData one = MakeData(g, 3), two = MakeData(g, 3);
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
    ASSERT_TRUE(GemmCpu(one.p).ok());
  }
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
    ASSERT_TRUE(GemmCpu(two.p).ok());
  }
  EXPECT_EQ(one.c, two.c);
}

TEST(Gemm, RunsOnACpuDeviceStream) {
  auto dev = std::move(CreateDevice({.kind = DeviceChoice::kCpu})).value();
  auto stream = std::move(dev->CreateStream("compute")).value();
  GemmCase g{20, 10, 30, 1, false, false, DType::kF32, DType::kF32, 0, 0};
  GemmData host = MakeData(g, 4), ref = MakeData(g, 4);
  ASSERT_TRUE(GemmReference(ref.p).ok());
  auto da = std::move(dev->Allocate(host.a.size(), "a")).value();
  auto db = std::move(dev->Allocate(host.b.size(), "b")).value();
  auto dc = std::move(dev->Allocate(host.c.size(), "c")).value();
  ASSERT_TRUE(stream->CopyHostToDevice(da.data(), host.a.data(), host.a.size()).ok());
  ASSERT_TRUE(stream->CopyHostToDevice(db.data(), host.b.data(), host.b.size()).ok());
  GemmParams p = host.p;
  p.a = da.data();
  p.b = db.data();
  p.c = dc.data();
  ASSERT_TRUE(Gemm(*stream, p).ok());
  ASSERT_TRUE(stream->CopyDeviceToHost(host.c.data(), dc.data(), host.c.size()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  ExpectCloseToReference(g, host, ref);
}

TEST(Gemm, RejectsBadShapesAndDtypes) {
  GemmParams p = PackedGemm(4, 4, 4, false, false, DType::kBF16, DType::kF16);
  float buf[64];
  p.a = p.b = p.c = buf;
  EXPECT_EQ(ValidateGemm(p).code(), StatusCode::kInvalidArgument);  // C must be bf16 or f32
  p.c_type = DType::kF32;
  p.lda = 3;
  Status s = ValidateGemm(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lda"), std::string::npos);
}

}  // namespace
}  // namespace tierflow
