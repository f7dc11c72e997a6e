// The fast CPU path's loop of a norm's backward (layernorm.cc, rmsnorm.cc):
// rows in fixed chunks, each row widened to fp32, the norm's own arithmetic
// on it, dinp narrowed back, and the parameter gradients summed per chunk and
// then added in chunk order, so the bits do not depend on the thread count.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_rows.h"

namespace tierflow::ops_internal {

// Rows per chunk of the backward pass: each chunk keeps one partial row per
// parameter gradient, summed in chunk order at the end.
inline constexpr int64_t kNormBackwardChunk = 64;

// The null checks of a norm's backward, in its arguments' order: dinp, the
// parameter gradients, dout, inp, weight, then the forward's saved statistics.
inline Status CheckNormBackwardPointers(
    const char* op, const void* dinp,
    std::initializer_list<std::pair<const char*, const void*>> dparams, const void* dout,
    const void* inp, const void* weight,
    std::initializer_list<std::pair<const char*, const void*>> stats) {
  TF_RETURN_IF_ERROR(CheckNotNull(op, "dinp", dinp));
  TF_RETURN_IF_ERROR(CheckAllNotNull(op, dparams));
  TF_RETURN_IF_ERROR(CheckAllNotNull(op, {{"dout", dout}, {"inp", inp}, {"weight", weight}}));
  return CheckAllNotNull(op, stats);
}

// One row of a norm's backward in fp32. x, g and dx hold the row's inp, dout
// and dinp (dinp is accumulated into); n and dn are the norm's scratch.
// partial[j] is the chunk's partial sum of parameter gradient j.
template <size_t kGrads>
struct NormBackwardRow {
  explicit NormBackwardRow(int64_t channels)
      : x(channels), g(channels), n(channels), dn(channels), dx(channels) {}
  FloatArray x, g, n, dn, dx;
  std::array<float*, kGrads> partial{};
  Eigen::Map<FloatArray> Partial(size_t j) { return {partial[j], x.size()}; }
};

// For each row i of `rows` rows of `channels`: widens inp, dout and dinp into
// r.x, r.g and r.dx, calls row_fn(i, r), which adds the row's terms to r.dx and
// to r.Partial(j), and narrows r.dx back into dinp. Then adds the partials,
// in chunk order, to dparams[j] (`channels` floats each, accumulated).
template <size_t kGrads, typename T, typename RowFn>
void NormBackwardRows(int64_t rows, int64_t channels, T* dinp, const T* dout, const T* inp,
                      const std::array<float*, kGrads>& dparams, const RowFn& row_fn) {
  const int64_t C = channels;
  const int64_t num_chunks = (rows + kNormBackwardChunk - 1) / kNormBackwardChunk;
  std::array<std::vector<float>, kGrads> partials;
  for (std::vector<float>& p : partials) p.resize(num_chunks * C);
  ForEachChunk(rows, kNormBackwardChunk, [&](int64_t k, int64_t r0, int64_t r1) {
    NormBackwardRow<kGrads> r(C);
    for (size_t j = 0; j < kGrads; ++j) {
      r.partial[j] = partials[j].data() + k * C;
      r.Partial(j).setZero();
    }
    for (int64_t i = r0; i < r1; ++i) {
      WidenRow(inp + i * C, C, r.x.data());
      WidenRow(dout + i * C, C, r.g.data());
      WidenRow(dinp + i * C, C, r.dx.data());
      row_fn(i, r);
      NarrowRow(r.dx.data(), C, dinp + i * C);
    }
  });
  for (size_t j = 0; j < kGrads; ++j) AddPartialsInOrder(partials[j], num_chunks, C, dparams[j]);
}

}  // namespace tierflow::ops_internal
