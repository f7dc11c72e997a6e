// GELU (tanh) and SwiGLU: references (double), fast CPU paths (Eigen arrays
// over fixed 4096-element chunks), device dispatch.
#include "kernels/activations.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "kernels/cpu/cpu_rows.h"
#include "kernels/op_costs.h"

namespace tierflow {
namespace {

using ops_internal::FloatArray;

constexpr int64_t kElementChunk = 4096;
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCube = 0.044715;

Status CheckElementwise(const char* op, int64_t n,
                        std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  TF_RETURN_IF_ERROR(ops_internal::CheckPositive(op, "n", n));
  return ops_internal::CheckAllNotNull(op, ptrs);
}

// A reference's shape: the arguments checked, then `fn(i)` for each element
// in order (in double, rounded once per output).
template <typename Fn>
Status EachElement(const char* op, int64_t n,
                   std::initializer_list<std::pair<const char*, const void*>> ptrs, Fn fn) {
  TF_RETURN_IF_ERROR(CheckElementwise(op, n, ptrs));
  for (int64_t i = 0; i < n; ++i) fn(i);
  return Status::Ok();
}

}  // namespace

// ---- reference ----

template <typename T>
Status GeluForwardReference(T* out, const T* inp, int64_t n) {
  return EachElement("GeluForwardReference", n, {{"out", out}, {"inp", inp}}, [&](int64_t i) {
    const double x = ToFloat(inp[i]);
    const double y = 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + kGeluCube * x * x * x)));
    out[i] = FromFloat<T>(static_cast<float>(y));
  });
}

template <typename T>
Status GeluBackwardReference(T* dinp, const T* inp, const T* dout, int64_t n) {
  return EachElement(
      "GeluBackwardReference", n, {{"dinp", dinp}, {"inp", inp}, {"dout", dout}}, [&](int64_t i) {
        const double x = ToFloat(inp[i]);
        const double th = std::tanh(kGeluScale * (x + kGeluCube * x * x * x));
        const double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluScale *
                                                   (1.0 + 3.0 * kGeluCube * x * x);
        dinp[i] = FromFloat<T>(static_cast<float>(grad * ToFloat(dout[i])));
      });
}

template <typename T>
Status SwiGluForwardReference(T* out, const T* gate, const T* up, int64_t n) {
  return EachElement(
      "SwiGluForwardReference", n, {{"out", out}, {"gate", gate}, {"up", up}}, [&](int64_t i) {
        const double g = ToFloat(gate[i]);
        out[i] = FromFloat<T>(static_cast<float>(g / (1.0 + std::exp(-g)) * ToFloat(up[i])));
      });
}

template <typename T>
Status SwiGluBackwardReference(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                               int64_t n) {
  return EachElement(
      "SwiGluBackwardReference", n,
      {{"dgate", dgate}, {"dup", dup}, {"dout", dout}, {"gate", gate}, {"up", up}}, [&](int64_t i) {
        const double g = ToFloat(gate[i]), u = ToFloat(up[i]), d = ToFloat(dout[i]);
        const double sig = 1.0 / (1.0 + std::exp(-g));
        dgate[i] = FromFloat<T>(static_cast<float>(d * u * sig * (1.0 + g * (1.0 - sig))));
        dup[i] = FromFloat<T>(static_cast<float>(d * g * sig));
      });
}

// ---- fast CPU path ----

template <typename T>
Status GeluForwardCpu(T* out, const T* inp, int64_t n) {
  TF_RETURN_IF_ERROR(CheckElementwise("GeluForwardCpu", n, {{"out", out}, {"inp", inp}}));
  ops_internal::ForEachChunk(n, kElementChunk, [&](int64_t, int64_t i0, int64_t i1) {
    FloatArray x(i1 - i0), y(i1 - i0);
    ops_internal::WidenRow(inp + i0, i1 - i0, x.data());
    y = 0.5f * x *
        (1.0f +
         (static_cast<float>(kGeluScale) * (x + static_cast<float>(kGeluCube) * x.cube())).tanh());
    ops_internal::NarrowRow(y.data(), i1 - i0, out + i0);
  });
  return Status::Ok();
}

template <typename T>
Status GeluBackwardCpu(T* dinp, const T* inp, const T* dout, int64_t n) {
  TF_RETURN_IF_ERROR(
      CheckElementwise("GeluBackwardCpu", n, {{"dinp", dinp}, {"inp", inp}, {"dout", dout}}));
  const float scale = static_cast<float>(kGeluScale), cube = static_cast<float>(kGeluCube);
  ops_internal::ForEachChunk(n, kElementChunk, [&](int64_t, int64_t i0, int64_t i1) {
    const int64_t m = i1 - i0;
    FloatArray x(m), g(m), th(m);
    ops_internal::WidenRow(inp + i0, m, x.data());
    ops_internal::WidenRow(dout + i0, m, g.data());
    th = (scale * (x + cube * x.cube())).tanh();
    g *= 0.5f * (1.0f + th) +
         0.5f * x * (1.0f - th.square()) * scale * (1.0f + 3.0f * cube * x.square());
    ops_internal::NarrowRow(g.data(), m, dinp + i0);
  });
  return Status::Ok();
}

template <typename T>
Status SwiGluForwardCpu(T* out, const T* gate, const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(
      CheckElementwise("SwiGluForwardCpu", n, {{"out", out}, {"gate", gate}, {"up", up}}));
  ops_internal::ForEachChunk(n, kElementChunk, [&](int64_t, int64_t i0, int64_t i1) {
    const int64_t m = i1 - i0;
    FloatArray g(m), u(m);
    ops_internal::WidenRow(gate + i0, m, g.data());
    ops_internal::WidenRow(up + i0, m, u.data());
    u *= g / (1.0f + (-g).exp());
    ops_internal::NarrowRow(u.data(), m, out + i0);
  });
  return Status::Ok();
}

template <typename T>
Status SwiGluBackwardCpu(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  TF_RETURN_IF_ERROR(CheckElementwise(
      "SwiGluBackwardCpu", n,
      {{"dgate", dgate}, {"dup", dup}, {"dout", dout}, {"gate", gate}, {"up", up}}));
  ops_internal::ForEachChunk(n, kElementChunk, [&](int64_t, int64_t i0, int64_t i1) {
    const int64_t m = i1 - i0;
    FloatArray g(m), u(m), d(m), sig(m), r(m);
    ops_internal::WidenRow(gate + i0, m, g.data());
    ops_internal::WidenRow(up + i0, m, u.data());
    ops_internal::WidenRow(dout + i0, m, d.data());
    sig = 1.0f / (1.0f + (-g).exp());
    r = d * u * sig * (1.0f + g * (1.0f - sig));
    ops_internal::NarrowRow(r.data(), m, dgate + i0);
    r = d * g * sig;
    ops_internal::NarrowRow(r.data(), m, dup + i0);
  });
  return Status::Ok();
}

// ---- device dispatch ----

template <typename T>
Status GeluForward(Stream& stream, T* out, const T* inp, int64_t n) {
  return ops_internal::LaunchElementwise(
      stream, n,
      TF_OP_KERNEL(GeluForward, op_costs::Elementwise(n, sizeof(T), 1, 1, 8), out, inp, n));
}

template <typename T>
Status GeluBackward(Stream& stream, T* dinp, const T* inp, const T* dout, int64_t n) {
  return ops_internal::LaunchElementwise(
      stream, n,
      TF_OP_KERNEL(GeluBackward, op_costs::Elementwise(n, sizeof(T), 2, 1, 16), dinp, inp, dout,
                   n));
}

template <typename T>
Status SwiGluForward(Stream& stream, T* out, const T* gate, const T* up, int64_t n) {
  return ops_internal::LaunchElementwise(
      stream, n,
      TF_OP_KERNEL(SwiGluForward, op_costs::Elementwise(n, sizeof(T), 2, 1, 6), out, gate, up, n));
}

template <typename T>
Status SwiGluBackward(Stream& stream, T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                      int64_t n) {
  return ops_internal::LaunchElementwise(
      stream, n,
      TF_OP_KERNEL(SwiGluBackward, op_costs::Elementwise(n, sizeof(T), 3, 2, 12), dgate, dup, dout,
                   gate, up, n));
}

#define TF_INSTANTIATE_ACTIVATIONS(T)                                                        \
  template Status GeluForwardReference<T>(T*, const T*, int64_t);                            \
  template Status GeluForwardCpu<T>(T*, const T*, int64_t);                                  \
  template Status GeluForward<T>(Stream&, T*, const T*, int64_t);                            \
  template Status GeluBackwardReference<T>(T*, const T*, const T*, int64_t);                 \
  template Status GeluBackwardCpu<T>(T*, const T*, const T*, int64_t);                       \
  template Status GeluBackward<T>(Stream&, T*, const T*, const T*, int64_t);                 \
  template Status SwiGluForwardReference<T>(T*, const T*, const T*, int64_t);                \
  template Status SwiGluForwardCpu<T>(T*, const T*, const T*, int64_t);                      \
  template Status SwiGluForward<T>(Stream&, T*, const T*, const T*, int64_t);                \
  template Status SwiGluBackwardReference<T>(T*, T*, const T*, const T*, const T*, int64_t); \
  template Status SwiGluBackwardCpu<T>(T*, T*, const T*, const T*, const T*, int64_t);       \
  template Status SwiGluBackward<T>(Stream&, T*, T*, const T*, const T*, const T*, int64_t);
TF_INSTANTIATE_ACTIVATIONS(float)
TF_INSTANTIATE_ACTIVATIONS(bf16)
TF_INSTANTIATE_ACTIVATIONS(fp16)

}  // namespace tierflow
