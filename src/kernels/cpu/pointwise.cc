// Residual add, bias add and bias backward: references, fast CPU paths
// (Eigen arrays over fixed chunks), device dispatch. Casts: the reference and
// the fast CPU path (on a stream, a cast is Stream::Cast, the device's).
#include "kernels/pointwise.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/cpu_rows.h"
#include "kernels/gemm.h"
#include "kernels/op_costs.h"

namespace tierflow {
namespace {

using ops_internal::FloatArray;

constexpr int64_t kElementChunk = 4096;
constexpr int64_t kBiasRowChunk = 64;
// BiasBackward adds its row chunks' sums to dbias one kGemmCpuKPanel-row
// panel at a time, so a sum split at panel multiples into "+=" calls (the
// model's MLP row tiles) gives the same bits as one call.
constexpr int64_t kBiasChunksPerPanel = kGemmCpuKPanel / kBiasRowChunk;
static_assert(kGemmCpuKPanel % kBiasRowChunk == 0, "bias panels are whole row chunks");

// rows, channels > 0, and each named pointer non-null.
Status CheckRowsChannels(const char* op, int64_t rows, int64_t channels,
                         std::initializer_list<std::pair<const char*, const void*>> ptrs = {}) {
  TF_RETURN_IF_ERROR(ops_internal::CheckAllPositive(op, {{"rows", rows}, {"channels", channels}}));
  return ops_internal::CheckAllNotNull(op, ptrs);
}

}  // namespace

// ---- reference ----

template <typename T>
Status ResidualForwardReference(T* out, const T* a, const T* b, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("ResidualForwardReference", "n", n));
  for (int64_t i = 0; i < n; ++i) out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
  return Status::Ok();
}

template <typename T>
Status BiasAddForwardReference(T* out, const T* bias, int64_t rows, int64_t channels) {
  TF_RETURN_IF_ERROR(CheckRowsChannels("BiasAddForwardReference", rows, channels));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      out[i * channels + c] = FromFloat<T>(ToFloat(out[i * channels + c]) + ToFloat(bias[c]));
    }
  }
  return Status::Ok();
}

template <typename T>
Status BiasBackwardReference(float* dbias, const T* dout, int64_t rows, int64_t channels) {
  TF_RETURN_IF_ERROR(CheckRowsChannels("BiasBackwardReference", rows, channels));
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (int64_t i = 0; i < rows; ++i) sum += ToFloat(dout[i * channels + c]);
    dbias[c] += static_cast<float>(sum);
  }
  return Status::Ok();
}

Status CastReference(DType from, const void* src, DType to, void* dst, int64_t n) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive("CastReference", "n", n));
  ConvertBuffer(from, src, to, dst, static_cast<size_t>(n));
  return Status::Ok();
}

// ---- fast CPU path ----

template <typename T>
Status ResidualForwardCpu(T* out, const T* a, const T* b, int64_t n) {
  const char* op = "ResidualForwardCpu";
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive(op, "n", n));
  TF_RETURN_IF_ERROR(ops_internal::CheckAllNotNull(op, {{"out", out}, {"a", a}, {"b", b}}));
  ops_internal::ForEachChunk(n, kElementChunk, [&](int64_t, int64_t i0, int64_t i1) {
    FloatArray x(i1 - i0), y(i1 - i0);
    ops_internal::WidenRow(a + i0, i1 - i0, x.data());
    ops_internal::WidenRow(b + i0, i1 - i0, y.data());
    x += y;
    ops_internal::NarrowRow(x.data(), i1 - i0, out + i0);
  });
  return Status::Ok();
}

template <typename T>
Status BiasAddForwardCpu(T* out, const T* bias, int64_t rows, int64_t channels) {
  TF_RETURN_IF_ERROR(
      CheckRowsChannels("BiasAddForwardCpu", rows, channels, {{"out", out}, {"bias", bias}}));
  FloatArray bias_f(channels);
  ops_internal::WidenRow(bias, channels, bias_f.data());
  ops_internal::ForEachChunk(rows, ops_internal::kRowChunk, [&](int64_t, int64_t r0, int64_t r1) {
    FloatArray x(channels);
    for (int64_t i = r0; i < r1; ++i) {
      ops_internal::WidenRow(out + i * channels, channels, x.data());
      x += bias_f;
      ops_internal::NarrowRow(x.data(), channels, out + i * channels);
    }
  });
  return Status::Ok();
}

template <typename T>
Status BiasBackwardCpu(float* dbias, const T* dout, int64_t rows, int64_t channels) {
  TF_RETURN_IF_ERROR(
      CheckRowsChannels("BiasBackwardCpu", rows, channels, {{"dbias", dbias}, {"dout", dout}}));
  const int64_t num_chunks = (rows + kBiasRowChunk - 1) / kBiasRowChunk;
  std::vector<float> partials(num_chunks * channels);
  ops_internal::ForEachChunk(rows, kBiasRowChunk, [&](int64_t k, int64_t r0, int64_t r1) {
    Eigen::Map<FloatArray> acc(partials.data() + k * channels, channels);
    FloatArray g(channels);
    acc.setZero();
    for (int64_t i = r0; i < r1; ++i) {
      ops_internal::WidenRow(dout + i * channels, channels, g.data());
      acc += g;
    }
  });
  ops_internal::ForEachChunk(channels, 256, [&](int64_t, int64_t c0, int64_t c1) {
    for (int64_t k0 = 0; k0 < num_chunks; k0 += kBiasChunksPerPanel) {
      const int64_t k1 = std::min(num_chunks, k0 + kBiasChunksPerPanel);
      for (int64_t c = c0; c < c1; ++c) {
        float sum = 0.0f;
        for (int64_t k = k0; k < k1; ++k) sum += partials[k * channels + c];
        dbias[c] += sum;
      }
    }
  });
  return Status::Ok();
}

Status CastCpu(DType from, const void* src, DType to, void* dst, int64_t n) {
  const char* op = "CastCpu";
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive(op, "n", n));
  TF_RETURN_IF_ERROR(ops_internal::CheckAllNotNull(op, {{"src", src}, {"dst", dst}}));
  const size_t from_size = DTypeSize(from), to_size = DTypeSize(to);
  ops_internal::ForEachChunk(n, kElementChunk, [&](int64_t, int64_t i0, int64_t i1) {
    ConvertBuffer(from, static_cast<const char*>(src) + i0 * from_size, to,
                  static_cast<char*>(dst) + i0 * to_size, static_cast<size_t>(i1 - i0));
  });
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status ResidualForward(Stream& stream, T* out, const T* a, const T* b, int64_t n) {
  return ops_internal::LaunchElementwise(
      stream, n,
      TF_OP_KERNEL(ResidualForward, op_costs::Elementwise(n, sizeof(T), 2, 1, 1), out, a, b, n));
}

template <typename T>
Status BiasAddForward(Stream& stream, T* out, const T* bias, int64_t rows, int64_t channels) {
  TF_RETURN_IF_ERROR(CheckRowsChannels("BiasAddForward", rows, channels));
  return stream.Launch(TF_OP_KERNEL(BiasAddForward, op_costs::BiasAdd(rows, channels, sizeof(T)),
                                    out, bias, rows, channels));
}

template <typename T>
Status BiasBackward(Stream& stream, float* dbias, const T* dout, int64_t rows, int64_t channels) {
  TF_RETURN_IF_ERROR(CheckRowsChannels("BiasBackward", rows, channels));
  return stream.Launch(TF_OP_KERNEL(BiasBackward, op_costs::BiasBackward(rows, channels, sizeof(T)),
                                    dbias, dout, rows, channels));
}

#define TF_INSTANTIATE_POINTWISE(T)                                             \
  template Status ResidualForwardReference<T>(T*, const T*, const T*, int64_t); \
  template Status ResidualForwardCpu<T>(T*, const T*, const T*, int64_t);       \
  template Status ResidualForward<T>(Stream&, T*, const T*, const T*, int64_t); \
  template Status BiasAddForwardReference<T>(T*, const T*, int64_t, int64_t);   \
  template Status BiasAddForwardCpu<T>(T*, const T*, int64_t, int64_t);         \
  template Status BiasAddForward<T>(Stream&, T*, const T*, int64_t, int64_t);   \
  template Status BiasBackwardReference<T>(float*, const T*, int64_t, int64_t); \
  template Status BiasBackwardCpu<T>(float*, const T*, int64_t, int64_t);       \
  template Status BiasBackward<T>(Stream&, float*, const T*, int64_t, int64_t);
TF_INSTANTIATE_POINTWISE(float)
TF_INSTANTIATE_POINTWISE(bf16)
TF_INSTANTIATE_POINTWISE(fp16)

}  // namespace tierflow
