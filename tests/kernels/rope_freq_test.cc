// RoPE frequencies with Hugging Face's rope_scaling rules, against a plain
// double-precision transcription of transformers' _compute_llama3_parameters
// (modeling_rope_utils.py), and through the rotation kernels.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/rope.h"
#include "kernels/rope_freq.h"

namespace tierflow {
namespace {

// transformers, written out: inv_freq = 1 / base^(arange(0, dim, 2) / dim);
// wavelen = 2 pi / inv_freq; where(wavelen > low_wavelen, inv / factor, inv);
// smoothed for the medium band.
double HfLlama3InvFreq(int i, int dim, double base, double factor, double low, double high,
                       double old_context) {
  const double inv = 1.0 / std::pow(base, 2.0 * i / dim);
  const double wavelen = 2 * M_PI / inv;
  const double low_wavelen = old_context / low, high_wavelen = old_context / high;
  double out = wavelen > low_wavelen ? inv / factor : inv;
  const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
  if (medium) {
    const double smooth = (old_context / wavelen - low) / (high - low);
    out = (1 - smooth) * out / factor + smooth * out;
  }
  return out;
}

RopeFreq Llama32() {  // Llama-3.2-1B's config.json
  return RopeFreq{.theta = 500000.0f,
                  .scaling = RopeScaling::kLlama3,
                  .factor = 32.0f,
                  .low_freq_factor = 1.0f,
                  .high_freq_factor = 4.0f,
                  .original_max_positions = 8192.0f};
}

TEST(RopeFreq, Llama3MatchesTransformersInEveryBand) {
  const RopeFreq f = Llama32();
  const int dim = 64;
  int high = 0, low = 0, medium = 0;
  for (int i = 0; i < dim / 2; ++i) {
    const double expected = HfLlama3InvFreq(i, dim, 500000, 32, 1, 4, 8192);
    const double plain = 1.0 / std::pow(500000.0, 2.0 * i / dim);
    const float got = RopeInvFreq(i, dim, f);
    EXPECT_NEAR(got, expected, 2e-6 * expected) << "i " << i;
    if (std::fabs(expected - plain) < 1e-9 * plain) {
      ++high;
    } else if (std::fabs(expected - plain / 32) < 1e-9 * plain) {
      ++low;
    } else {
      ++medium;
    }
    if (i > 0) {
      EXPECT_LT(got, RopeInvFreq(i - 1, dim, f)) << "frequencies must fall with i";
    }
  }
  // head_dim 64, base 5e5: all three bands occur.
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeFreq, NoneAndLinear) {
  for (int i = 0; i < 8; ++i) {
    const double plain = 1.0 / std::pow(10000.0, 2.0 * i / 16);
    EXPECT_FLOAT_EQ(RopeInvFreq(i, 16, RopeFreq{}), static_cast<float>(plain));
    EXPECT_FLOAT_EQ(RopeInvFreq(i, 16, RopeFreq{.scaling = RopeScaling::kLinear, .factor = 4.0f}),
                    static_cast<float>(plain) / 4.0f);
  }
}

// The kernels use the scaled frequencies: at position t a pair rotates by
// t * inv_freq[i], which a llama3-scaled rotation shows in its low band.
TEST(RopeFreq, KernelsRotateByTheScaledAngle) {
  const RopeShape s{.batch = 1, .seq_len = 9, .heads = 1, .head_size = 64};
  const RopeFreq f = Llama32();
  std::vector<float> x(s.seq_len * 64, 0.0f), ref(x.size()), fast(x.size());
  for (int t = 0; t < s.seq_len; ++t) x[t * 64 + 31] = 1.0f;  // the lowest frequency pair
  ASSERT_TRUE(RopeForwardReference(ref.data(), x.data(), s, f).ok());
  ASSERT_TRUE(RopeForwardCpu(fast.data(), x.data(), s, f).ok());
  for (int t = 0; t < s.seq_len; ++t) {
    const double angle = static_cast<float>(t) * RopeInvFreq(31, 64, f);
    EXPECT_NEAR(ref[t * 64 + 31], std::cos(angle), 1e-7);
    EXPECT_NEAR(ref[t * 64 + 63], std::sin(angle), 1e-7);
    EXPECT_NEAR(fast[t * 64 + 31], ref[t * 64 + 31], 1e-6);
    EXPECT_NEAR(fast[t * 64 + 63], ref[t * 64 + 63], 1e-6);
  }
}

TEST(RopeFreq, ImpossibleScalingIsInvalid) {
  const RopeShape s{.batch = 1, .seq_len = 2, .heads = 1, .head_size = 4};
  std::vector<float> x(8, 1.0f);
  RopeFreq bad = Llama32();
  bad.high_freq_factor = bad.low_freq_factor;  // division by zero in the smooth band
  Status st = RopeForwardCpu(x.data(), x.data(), s, bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("high_freq_factor"), std::string::npos) << st.message();
  EXPECT_EQ(RopeForwardCpu(x.data(), x.data(), s, RopeFreq{.theta = 0.0f}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(RopeForwardCpu(x.data(), x.data(), s,
                           RopeFreq{.scaling = RopeScaling::kLinear, .factor = -1.0f})
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow
