// RoPE: reference (double trigonometry of the fp32 angle), fast CPU path
// (one cos/sin table per call, shared by all heads and sequences), dispatch.
#include "kernels/rope.h"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/op_costs.h"

namespace tierflow {
namespace {

template <typename T>
void RotateReference(T* out, const T* inp, const RopeShape& s, const RopeFreq& freq, double sign) {
  const int64_t half = s.head_size / 2, stride = s.stride();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t t = 0; t < s.seq_len; ++t) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t base = (b * s.seq_len + t) * stride + h * s.head_size;
        const int64_t pos = s.positions != nullptr ? s.positions[b * s.seq_len + t] : t;
        for (int64_t i = 0; i < half; ++i) {
          const float angle = static_cast<float>(pos) * RopeInvFreq(i, s.head_size, freq);
          const double c = std::cos(static_cast<double>(angle));
          const double sn = sign * std::sin(static_cast<double>(angle));
          const double x0 = ToFloat(inp[base + i]), x1 = ToFloat(inp[base + i + half]);
          out[base + i] = FromFloat<T>(static_cast<float>(x0 * c - x1 * sn));
          out[base + i + half] = FromFloat<T>(static_cast<float>(x1 * c + x0 * sn));
        }
      }
    }
  }
}

template <typename T>
void RotateCpu(T* out, const T* inp, const RopeShape& s, const RopeFreq& freq, float sign) {
  const int64_t half = s.head_size / 2, stride = s.stride();
  std::vector<float> cos_table(s.seq_len * half), sin_table(s.seq_len * half);
  for (int64_t t = 0; t < s.seq_len; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * RopeInvFreq(i, s.head_size, freq);
      cos_table[t * half + i] = std::cos(angle);
      sin_table[t * half + i] = sign * std::sin(angle);
    }
  }
  ops_internal::ForEachChunk(
      s.batch * s.seq_len, ops_internal::kRowChunk, [&](int64_t, int64_t r0, int64_t r1) {
        ops_internal::FloatArray x0(half), x1(half), y0(half), y1(half);
        for (int64_t row = r0; row < r1; ++row) {
          const int64_t t = s.positions != nullptr ? s.positions[row] : row % s.seq_len;
          Eigen::Map<const ops_internal::FloatArray> c(cos_table.data() + t * half, half);
          Eigen::Map<const ops_internal::FloatArray> sn(sin_table.data() + t * half, half);
          for (int64_t h = 0; h < s.heads; ++h) {
            const int64_t base = row * stride + h * s.head_size;
            ops_internal::WidenRow(inp + base, half, x0.data());
            ops_internal::WidenRow(inp + base + half, half, x1.data());
            y0 = x0 * c - x1 * sn;
            y1 = x1 * c + x0 * sn;
            ops_internal::NarrowRow(y0.data(), half, out + base);
            ops_internal::NarrowRow(y1.data(), half, out + base + half);
          }
        }
      });
}

}  // namespace

Status ValidateRope(const char* op, const RopeShape& s, const RopeFreq& f) {
  if (!(f.theta > 0) || !std::isfinite(f.theta)) {
    return InvalidArgumentError(std::string(op) + ": theta " + std::to_string(f.theta) +
                                " must be positive and finite");
  }
  if (f.scaling != RopeScaling::kNone && (!(f.factor > 0) || !std::isfinite(f.factor))) {
    return InvalidArgumentError(std::string(op) + ": scaling factor " + std::to_string(f.factor) +
                                " must be positive and finite");
  }
  if (f.scaling == RopeScaling::kLlama3 &&
      (!(f.low_freq_factor > 0) || !(f.high_freq_factor > f.low_freq_factor) ||
       !(f.original_max_positions > 0) || !std::isfinite(f.high_freq_factor) ||
       !std::isfinite(f.original_max_positions))) {
    return InvalidArgumentError(std::string(op) + ": llama3 scaling needs 0 < low_freq_factor (" +
                                std::to_string(f.low_freq_factor) + ") < high_freq_factor (" +
                                std::to_string(f.high_freq_factor) +
                                ") and original_max_positions > 0 (" +
                                std::to_string(f.original_max_positions) + ")");
  }
  TF_RETURN_IF_ERROR(ops_internal::CheckAllPositive(op, {{"batch", s.batch},
                                                         {"seq_len", s.seq_len},
                                                         {"heads", s.heads},
                                                         {"head_size", s.head_size}}));
  if (s.head_size % 2 != 0) {
    return InvalidArgumentError(std::string(op) + ": head_size " + std::to_string(s.head_size) +
                                " is odd; rotate-half RoPE needs an even head size");
  }
  if (s.token_stride != 0 && s.token_stride < s.heads * s.head_size) {
    return InvalidArgumentError(std::string(op) + ": token_stride " +
                                std::to_string(s.token_stride) + " < heads * head_size " +
                                std::to_string(s.heads * s.head_size));
  }
  return Status::Ok();
}

// ---- reference ----

template <typename T>
Status RopeForwardReference(T* out, const T* inp, const RopeShape& s, const RopeFreq& freq) {
  TF_RETURN_IF_ERROR(ValidateRope("RopeForwardReference", s, freq));
  RotateReference(out, inp, s, freq, 1.0);
  return Status::Ok();
}

template <typename T>
Status RopeBackwardReference(T* dinp, const T* dout, const RopeShape& s, const RopeFreq& freq) {
  TF_RETURN_IF_ERROR(ValidateRope("RopeBackwardReference", s, freq));
  RotateReference(dinp, dout, s, freq, -1.0);
  return Status::Ok();
}

// ---- fast CPU path ----

template <typename T>
Status RopeForwardCpu(T* out, const T* inp, const RopeShape& s, const RopeFreq& freq) {
  TF_RETURN_IF_ERROR(ValidateRope("RopeForwardCpu", s, freq));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull("RopeForwardCpu", "out", out));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull("RopeForwardCpu", "inp", inp));
  RotateCpu(out, inp, s, freq, 1.0f);
  return Status::Ok();
}

template <typename T>
Status RopeBackwardCpu(T* dinp, const T* dout, const RopeShape& s, const RopeFreq& freq) {
  TF_RETURN_IF_ERROR(ValidateRope("RopeBackwardCpu", s, freq));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull("RopeBackwardCpu", "dinp", dinp));
  TF_RETURN_IF_ERROR(ops_internal::CheckNotNull("RopeBackwardCpu", "dout", dout));
  RotateCpu(dinp, dout, s, freq, -1.0f);
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status RopeForward(Stream& stream, T* out, const T* inp, const RopeShape& s, const RopeFreq& freq) {
  TF_RETURN_IF_ERROR(ValidateRope("RopeForward", s, freq));
  return stream.Launch({"RopeForward",
                        op_costs::Rope(s.batch * s.seq_len * s.heads * s.head_size, sizeof(T)),
                        [=] { return RopeForwardCpu(out, inp, s, freq); },
                        TF_CUDA_KERNEL(RopeCuda(cuda_stream, out, inp, s, freq, 1.0f))});
}

template <typename T>
Status RopeBackward(Stream& stream, T* dinp, const T* dout, const RopeShape& s,
                    const RopeFreq& freq) {
  TF_RETURN_IF_ERROR(ValidateRope("RopeBackward", s, freq));
  return stream.Launch({"RopeBackward",
                        op_costs::Rope(s.batch * s.seq_len * s.heads * s.head_size, sizeof(T)),
                        [=] { return RopeBackwardCpu(dinp, dout, s, freq); },
                        TF_CUDA_KERNEL(RopeCuda(cuda_stream, dinp, dout, s, freq, -1.0f))});
}

#define TF_INSTANTIATE_ROPE(T)                                                               \
  template Status RopeForwardReference<T>(T*, const T*, const RopeShape&, const RopeFreq&);  \
  template Status RopeForwardCpu<T>(T*, const T*, const RopeShape&, const RopeFreq&);        \
  template Status RopeForward<T>(Stream&, T*, const T*, const RopeShape&, const RopeFreq&);  \
  template Status RopeBackwardReference<T>(T*, const T*, const RopeShape&, const RopeFreq&); \
  template Status RopeBackwardCpu<T>(T*, const T*, const RopeShape&, const RopeFreq&);       \
  template Status RopeBackward<T>(Stream&, T*, const T*, const RopeShape&, const RopeFreq&);
TF_INSTANTIATE_ROPE(float)
TF_INSTANTIATE_ROPE(bf16)
TF_INSTANTIATE_ROPE(fp16)

}  // namespace tierflow
