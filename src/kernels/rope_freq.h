// RoPE frequencies: inv_freq[i] for each rotated pair i < HS/2, from the base
// theta and, optionally, a Hugging Face rope_scaling rule. Shared by the CPU
// kernels and the CUDA kernel (host/device inline), so the two devices derive
// the same fp32 frequencies.
//
//   none    inv_freq[i] = theta^(-2i/HS)   (computed in double, rounded to fp32)
//   linear  inv_freq[i] / factor           (HF rope_type "linear")
//   llama3  HF rope_type "llama3" (Llama 3.1/3.2): with wavelen = 2 pi / inv_freq,
//           low = original_max_positions / low_freq_factor,
//           high = original_max_positions / high_freq_factor:
//             wavelen < high          -> inv_freq           (high frequencies kept)
//             wavelen > low           -> inv_freq / factor  (low frequencies stretched)
//             otherwise, s = (original_max_positions / wavelen - low_freq_factor)
//                            / (high_freq_factor - low_freq_factor):
//                                     -> (1 - s) inv_freq / factor + s inv_freq
//           in fp32, in the order transformers computes it.
#pragma once

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define TF_ROPE_HOST_DEVICE __host__ __device__
#else
#define TF_ROPE_HOST_DEVICE
#endif

namespace tierflow {

enum class RopeScaling : int { kNone = 0, kLinear = 1, kLlama3 = 2 };

struct RopeFreq {
  float theta = 10000.0f;
  RopeScaling scaling = RopeScaling::kNone;
  float factor = 1.0f;                  // linear, llama3
  float low_freq_factor = 1.0f;         // llama3
  float high_freq_factor = 4.0f;        // llama3; > low_freq_factor
  float original_max_positions = 8192;  // llama3
};

TF_ROPE_HOST_DEVICE inline float RopeInvFreq(int64_t i, int64_t head_size, const RopeFreq& f) {
  const float inv =
      static_cast<float>(1.0 / pow(static_cast<double>(f.theta),
                                   static_cast<double>(2 * i) / static_cast<double>(head_size)));
  switch (f.scaling) {
    case RopeScaling::kNone:
      return inv;
    case RopeScaling::kLinear:
      return inv / f.factor;
    case RopeScaling::kLlama3: {
      const float two_pi = 6.283185307179586f;
      const float wavelen = two_pi / inv;
      const float low_wavelen = f.original_max_positions / f.low_freq_factor;
      const float high_wavelen = f.original_max_positions / f.high_freq_factor;
      if (wavelen < high_wavelen) return inv;
      if (wavelen > low_wavelen) return inv / f.factor;
      const float s = (f.original_max_positions / wavelen - f.low_freq_factor) /
                      (f.high_freq_factor - f.low_freq_factor);
      return (1.0f - s) * inv / f.factor + s * inv;
    }
  }
  return inv;
}

}  // namespace tierflow
