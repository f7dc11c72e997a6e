// RMSNorm: reference (double accumulation), fast CPU path, device dispatch.
#include "kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/cpu/norm_backward_rows.h"
#include "kernels/op_costs.h"

namespace tierflow {
namespace {

using ops_internal::CheckNotNull;
using ops_internal::FloatArray;

}  // namespace

// ---- reference ----

template <typename T>
Status RmsNormForwardReference(T* out, float* rstd, const T* inp, const T* weight,
                               const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormForwardReference", s));
  const int64_t C = s.channels;
  for (int64_t i = 0; i < s.rows; ++i) {
    const T* x = inp + i * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(ToFloat(x[c])) * ToFloat(x[c]);
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) {
      out[i * C + c] = FromFloat<T>(static_cast<float>(ToFloat(x[c]) * r * ToFloat(weight[c])));
    }
    if (rstd != nullptr) rstd[i] = static_cast<float>(r);
  }
  return Status::Ok();
}

template <typename T>
Status RmsNormBackwardReference(T* dinp, float* dweight, const T* dout, const T* inp,
                                const T* weight, const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormBackwardReference", s));
  const int64_t C = s.channels;
  std::vector<double> dw(C, 0.0);
  for (int64_t i = 0; i < s.rows; ++i) {
    const T* x = inp + i * C;
    const T* g = dout + i * C;
    double dn_n_mean = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      dn_n_mean +=
          static_cast<double>(ToFloat(weight[c])) * ToFloat(g[c]) * ToFloat(x[c]) * rstd[i];
    }
    dn_n_mean /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double n = static_cast<double>(ToFloat(x[c])) * rstd[i];
      const double dn = static_cast<double>(ToFloat(weight[c])) * ToFloat(g[c]);
      dw[c] += n * ToFloat(g[c]);
      const double dx = (dn - n * dn_n_mean) * rstd[i];
      dinp[i * C + c] = FromFloat<T>(static_cast<float>(ToFloat(dinp[i * C + c]) + dx));
    }
  }
  for (int64_t c = 0; c < C; ++c) dweight[c] += static_cast<float>(dw[c]);
  return Status::Ok();
}

// ---- fast CPU path ----

template <typename T>
Status RmsNormForwardCpu(T* out, float* rstd, const T* inp, const T* weight, const NormShape& s,
                         float eps) {
  const char* op = "RmsNormForwardCpu";
  TF_RETURN_IF_ERROR(ValidateNorm(op, s));
  TF_RETURN_IF_ERROR(CheckNotNull(op, "out", out));
  TF_RETURN_IF_ERROR(CheckNotNull(op, "inp", inp));
  TF_RETURN_IF_ERROR(CheckNotNull(op, "weight", weight));
  const int64_t C = s.channels;
  FloatArray w(C);
  ops_internal::WidenRow(weight, C, w.data());
  ops_internal::ForEachChunk(s.rows, ops_internal::kRowChunk, [&](int64_t, int64_t r0, int64_t r1) {
    FloatArray x(C), y(C);
    for (int64_t i = r0; i < r1; ++i) {
      ops_internal::WidenRow(inp + i * C, C, x.data());
      const float r = 1.0f / std::sqrt(x.square().mean() + eps);
      y = x * r * w;
      ops_internal::NarrowRow(y.data(), C, out + i * C);
      if (rstd != nullptr) rstd[i] = r;
    }
  });
  return Status::Ok();
}

template <typename T>
Status RmsNormBackwardCpu(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                          const float* rstd, const NormShape& s) {
  const char* op = "RmsNormBackwardCpu";
  TF_RETURN_IF_ERROR(ValidateNorm(op, s));
  TF_RETURN_IF_ERROR(ops_internal::CheckNormBackwardPointers(op, dinp, {{"dweight", dweight}}, dout,
                                                             inp, weight, {{"rstd", rstd}}));
  FloatArray w(s.channels);
  ops_internal::WidenRow(weight, s.channels, w.data());
  ops_internal::NormBackwardRows<1>(s.rows, s.channels, dinp, dout, inp, {dweight},
                                    [&](int64_t i, ops_internal::NormBackwardRow<1>& r) {
                                      r.n = r.x * rstd[i];
                                      r.dn = w * r.g;
                                      const float dn_n_mean = (r.dn * r.n).mean();
                                      r.Partial(0) += r.n * r.g;
                                      r.dx += (r.dn - r.n * dn_n_mean) * rstd[i];
                                    });
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status RmsNormForward(Stream& stream, T* out, float* rstd, const T* inp, const T* weight,
                      const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormForward", s));
  return stream.Launch(
      TF_OP_KERNEL(RmsNormForward,
                   op_costs::NormForward(s.rows, s.channels, sizeof(T), 4, rstd != nullptr ? 1 : 0),
                   out, rstd, inp, weight, s, eps));
}

template <typename T>
Status RmsNormBackward(Stream& stream, T* dinp, float* dweight, const T* dout, const T* inp,
                       const T* weight, const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("RmsNormBackward", s));
  return stream.Launch(TF_OP_KERNEL(RmsNormBackward,
                                    op_costs::NormBackward(s.rows, s.channels, sizeof(T), 8, 1),
                                    dinp, dweight, dout, inp, weight, rstd, s));
}

#define TF_INSTANTIATE_RMSNORM(T)                                                                \
  template Status RmsNormForwardReference<T>(T*, float*, const T*, const T*, const NormShape&,   \
                                             float);                                             \
  template Status RmsNormForwardCpu<T>(T*, float*, const T*, const T*, const NormShape&, float); \
  template Status RmsNormForward<T>(Stream&, T*, float*, const T*, const T*, const NormShape&,   \
                                    float);                                                      \
  template Status RmsNormBackwardReference<T>(T*, float*, const T*, const T*, const T*,          \
                                              const float*, const NormShape&);                   \
  template Status RmsNormBackwardCpu<T>(T*, float*, const T*, const T*, const T*, const float*,  \
                                        const NormShape&);                                       \
  template Status RmsNormBackward<T>(Stream&, T*, float*, const T*, const T*, const T*,          \
                                     const float*, const NormShape&);
TF_INSTANTIATE_RMSNORM(float)
TF_INSTANTIATE_RMSNORM(bf16)
TF_INSTANTIATE_RMSNORM(fp16)

}  // namespace tierflow
