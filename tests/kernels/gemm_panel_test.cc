// The CPU GEMM's k panels (kGemmCpuKPanel, kernels/gemm.h): a GEMM split
// along k at panel multiples into accumulating calls (beta = 1, fp32 C) is
// bit-identical to the single call; BiasBackward's row sum likewise. The
// model's MLP row tiles rely on both for their weight and bias gradients.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/half.h"
#include "kernels/gemm.h"
#include "kernels/pointwise.h"

namespace tierflow {
namespace {

// Random (not exactly summable) values in dtype t.
std::vector<uint8_t> RandomValues(DType t, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint8_t> buf(static_cast<size_t>(count) * DTypeSize(t));
  for (int64_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    ConvertBuffer(DType::kF32, &v, t, buf.data() + i * DTypeSize(t), 1);
  }
  return buf;
}

void ExpectKSplitIsBitIdentical(bool trans_a, bool trans_b, DType ab) {
  SCOPED_TRACE(std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N") + DTypeName(ab).data());
  const int64_t m = 70, n = 33, k = 3 * kGemmCpuKPanel + 100, split = 2 * kGemmCpuKPanel;
  const std::vector<uint8_t> a = RandomValues(ab, m * k, 1), b = RandomValues(ab, k * n, 2);
  const std::vector<uint8_t> c0 = RandomValues(DType::kF32, m * n, 3);
  GemmParams whole = PackedGemm(m, n, k, trans_a, trans_b, ab, DType::kF32);
  whole.a = a.data();
  whole.b = b.data();
  whole.beta = 1.0f;
  std::vector<uint8_t> c_whole = c0, c_split = c0;
  whole.c = c_whole.data();
  ASSERT_TRUE(GemmCpu(whole).ok());
  const size_t es = DTypeSize(ab);
  for (const auto& [k0, kn] : {std::pair<int64_t, int64_t>{0, split}, {split, k - split}}) {
    GemmParams part = whole;
    part.k = kn;
    // A is (m, k) or stored (k, m); B is (k, n) or stored (n, k).
    part.a = a.data() + (trans_a ? k0 * whole.lda : k0) * es;
    part.b = b.data() + (trans_b ? k0 : k0 * whole.ldb) * es;
    part.c = c_split.data();
    ASSERT_TRUE(GemmCpu(part).ok());
  }
  EXPECT_EQ(std::memcmp(c_whole.data(), c_split.data(), c_whole.size()), 0);
}

TEST(GemmPanels, KSplitAtPanelMultiplesIsBitIdentical) {
  for (DType ab : {DType::kF32, DType::kBF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) ExpectKSplitIsBitIdentical(ta, tb, ab);
    }
  }
}

TEST(GemmPanels, BiasBackwardSplitAtPanelMultiplesIsBitIdentical) {
  const int64_t rows = 3 * kGemmCpuKPanel + 37, channels = 300, split = kGemmCpuKPanel;
  const std::vector<uint8_t> dout = RandomValues(DType::kBF16, rows * channels, 4);
  const auto* d = reinterpret_cast<const bf16*>(dout.data());
  std::vector<float> whole(channels, 0.5f), parts(channels, 0.5f);
  ASSERT_TRUE(BiasBackwardCpu<bf16>(whole.data(), d, rows, channels).ok());
  ASSERT_TRUE(BiasBackwardCpu<bf16>(parts.data(), d, split, channels).ok());
  ASSERT_TRUE(
      BiasBackwardCpu<bf16>(parts.data(), d + split * channels, rows - split, channels).ok());
  EXPECT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace tierflow
