// LayerNorm: reference (double accumulation), fast CPU path, device dispatch.
#include "kernels/layernorm.h"

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

Status ValidateNorm(const char* op, const NormShape& s) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive(op, "rows", s.rows));
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive(op, "channels", s.channels));
  return Status::Ok();
}

// ---- reference ----

template <typename T>
Status LayerNormForwardReference(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                 const T* bias, const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormForwardReference", s));
  const int64_t C = s.channels;
  for (int64_t i = 0; i < s.rows; ++i) {
    const T* x = inp + i * C;
    double m = 0.0;
    for (int64_t c = 0; c < C; ++c) m += ToFloat(x[c]);
    m /= static_cast<double>(C);
    double v = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = ToFloat(x[c]) - m;
      v += d * d;
    }
    v /= static_cast<double>(C);
    const double r = 1.0 / std::sqrt(v + eps);
    for (int64_t c = 0; c < C; ++c) {
      const double n = (ToFloat(x[c]) - m) * r;
      out[i * C + c] = FromFloat<T>(static_cast<float>(n * ToFloat(weight[c]) + ToFloat(bias[c])));
    }
    if (mean != nullptr) mean[i] = static_cast<float>(m);
    if (rstd != nullptr) rstd[i] = static_cast<float>(r);
  }
  return Status::Ok();
}

template <typename T>
Status LayerNormBackwardReference(T* dinp, float* dweight, float* dbias, const T* dout,
                                  const T* inp, const T* weight, const float* mean,
                                  const float* rstd, const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormBackwardReference", s));
  const int64_t C = s.channels;
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  for (int64_t i = 0; i < s.rows; ++i) {
    const T* x = inp + i * C;
    const T* g = dout + i * C;
    double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double n = (ToFloat(x[c]) - mean[i]) * static_cast<double>(rstd[i]);
      const double dn = static_cast<double>(ToFloat(weight[c])) * ToFloat(g[c]);
      dnorm_mean += dn;
      dnorm_norm_mean += dn * n;
    }
    dnorm_mean /= static_cast<double>(C);
    dnorm_norm_mean /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double n = (ToFloat(x[c]) - mean[i]) * static_cast<double>(rstd[i]);
      const double dn = static_cast<double>(ToFloat(weight[c])) * ToFloat(g[c]);
      dw[c] += n * ToFloat(g[c]);
      db[c] += ToFloat(g[c]);
      const double dx = (dn - dnorm_mean - n * dnorm_norm_mean) * rstd[i];
      dinp[i * C + c] = FromFloat<T>(static_cast<float>(ToFloat(dinp[i * C + c]) + dx));
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    dweight[c] += static_cast<float>(dw[c]);
    dbias[c] += static_cast<float>(db[c]);
  }
  return Status::Ok();
}

// ---- fast CPU path ----

template <typename T>
Status LayerNormForwardCpu(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                           const T* bias, const NormShape& s, float eps) {
  const char* op = "LayerNormForwardCpu";
  TF_RETURN_IF_ERROR(ValidateNorm(op, s));
  TF_RETURN_IF_ERROR(CheckNotNull(op, "out", out));
  TF_RETURN_IF_ERROR(CheckNotNull(op, "inp", inp));
  TF_RETURN_IF_ERROR(CheckNotNull(op, "weight", weight));
  TF_RETURN_IF_ERROR(CheckNotNull(op, "bias", bias));
  const int64_t C = s.channels;
  FloatArray w(C), b(C);
  ops_internal::WidenRow(weight, C, w.data());
  ops_internal::WidenRow(bias, C, b.data());
  ops_internal::ForEachChunk(s.rows, ops_internal::kRowChunk, [&](int64_t, int64_t r0, int64_t r1) {
    FloatArray x(C), y(C);
    for (int64_t i = r0; i < r1; ++i) {
      ops_internal::WidenRow(inp + i * C, C, x.data());
      const float m = x.mean();
      const float r = 1.0f / std::sqrt((x - m).square().mean() + eps);
      y = (x - m) * r * w + b;
      ops_internal::NarrowRow(y.data(), C, out + i * C);
      if (mean != nullptr) mean[i] = m;
      if (rstd != nullptr) rstd[i] = r;
    }
  });
  return Status::Ok();
}

template <typename T>
Status LayerNormBackwardCpu(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                            const T* weight, const float* mean, const float* rstd,
                            const NormShape& s) {
  const char* op = "LayerNormBackwardCpu";
  TF_RETURN_IF_ERROR(ValidateNorm(op, s));
  TF_RETURN_IF_ERROR(
      ops_internal::CheckNormBackwardPointers(op, dinp, {{"dweight", dweight}, {"dbias", dbias}},
                                              dout, inp, weight, {{"mean", mean}, {"rstd", rstd}}));
  FloatArray w(s.channels);
  ops_internal::WidenRow(weight, s.channels, w.data());
  ops_internal::NormBackwardRows<2>(s.rows, s.channels, dinp, dout, inp, {dweight, dbias},
                                    [&](int64_t i, ops_internal::NormBackwardRow<2>& r) {
                                      r.n = (r.x - mean[i]) * rstd[i];
                                      r.dn = w * r.g;
                                      const float dn_mean = r.dn.mean();
                                      const float dn_n_mean = (r.dn * r.n).mean();
                                      r.Partial(0) += r.n * r.g;
                                      r.Partial(1) += r.g;
                                      r.dx += (r.dn - dn_mean - r.n * dn_n_mean) * rstd[i];
                                    });
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status LayerNormForward(Stream& stream, T* out, float* mean, float* rstd, const T* inp,
                        const T* weight, const T* bias, const NormShape& s, float eps) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormForward", s));
  return stream.Launch(TF_OP_KERNEL(LayerNormForward,
                                    op_costs::NormForward(s.rows, s.channels, sizeof(T), 8,
                                                          (mean != nullptr) + (rstd != nullptr)),
                                    out, mean, rstd, inp, weight, bias, s, eps));
}

template <typename T>
Status LayerNormBackward(Stream& stream, T* dinp, float* dweight, float* dbias, const T* dout,
                         const T* inp, const T* weight, const float* mean, const float* rstd,
                         const NormShape& s) {
  TF_RETURN_IF_ERROR(ValidateNorm("LayerNormBackward", s));
  return stream.Launch(TF_OP_KERNEL(LayerNormBackward,
                                    op_costs::NormBackward(s.rows, s.channels, sizeof(T), 14, 2),
                                    dinp, dweight, dbias, dout, inp, weight, mean, rstd, s));
}

#define TF_INSTANTIATE_LAYERNORM(T)                                                               \
  template Status LayerNormForwardReference<T>(T*, float*, float*, const T*, const T*, const T*,  \
                                               const NormShape&, float);                          \
  template Status LayerNormForwardCpu<T>(T*, float*, float*, const T*, const T*, const T*,        \
                                         const NormShape&, float);                                \
  template Status LayerNormForward<T>(Stream&, T*, float*, float*, const T*, const T*, const T*,  \
                                      const NormShape&, float);                                   \
  template Status LayerNormBackwardReference<T>(T*, float*, float*, const T*, const T*, const T*, \
                                                const float*, const float*, const NormShape&);    \
  template Status LayerNormBackwardCpu<T>(T*, float*, float*, const T*, const T*, const T*,       \
                                          const float*, const float*, const NormShape&);          \
  template Status LayerNormBackward<T>(Stream&, T*, float*, float*, const T*, const T*, const T*, \
                                       const float*, const float*, const NormShape&);
TF_INSTANTIATE_LAYERNORM(float)
TF_INSTANTIATE_LAYERNORM(bf16)
TF_INSTANTIATE_LAYERNORM(fp16)

}  // namespace tierflow
