// What each training op costs, from its shapes alone: FLOPs on tensor cores,
// other FLOPs, and device-memory bytes read plus written (KernelCost in
// tierflow/device.h). The simulated accelerator turns these into time with a
// roofline; nothing else depends on them.
//
// These are a timing model, never a measurement. The counts assume the
// kernels a tuned GPU backend runs: one pass over each tensor (flash-style
// attention keeps scores on chip, so they cost FLOPs but no bytes), causal
// attention computing only the lower triangle, and transcendental functions
// counted as a few FLOPs each. Element sizes are in bytes.
#pragma once

#include <cstdint>

#include "tierflow/device.h"
#include "tierflow/dtype.h"

namespace tierflow::op_costs {

inline KernelCost Cost(double tensor_flops, double vector_flops, double bytes) {
  KernelCost c;
  c.tensor_flops = tensor_flops;
  c.vector_flops = vector_flops;
  c.bytes = bytes;
  return c;
}

inline double D(int64_t x) { return static_cast<double>(x); }

// C = A * B over `batch` matrices: 2mnk FLOPs, on tensor cores for 16-bit A/B
// (fp32 A/B run on the SIMT units); C is read as well when beta != 0.
inline KernelCost Gemm(int64_t m, int64_t n, int64_t k, int64_t batch, size_t ab_size,
                       size_t c_size, bool reads_c) {
  const double flops = 2.0 * D(m) * D(n) * D(k) * D(batch);
  const double bytes = D(batch) * ((D(m) * D(k) + D(k) * D(n)) * D(ab_size) +
                                   D(m) * D(n) * D(c_size) * (reads_c ? 2.0 : 1.0));
  return ab_size == 2 ? Cost(flops, 0, bytes) : Cost(0, flops, bytes);
}

// n elements: `inputs` tensors read, `outputs` written, `flops` per element.
inline KernelCost Elementwise(int64_t n, size_t elem, int inputs, int outputs, double flops) {
  return Cost(0, flops * D(n), D(n) * D(elem) * (inputs + outputs));
}

// (rows, channels) with a per-channel vector: the in-place bias add reads and
// writes the tensor; the bias backward reads it and updates fp32 sums.
inline KernelCost BiasAdd(int64_t rows, int64_t channels, size_t elem) {
  return Cost(0, D(rows) * D(channels),
              D(rows) * D(channels) * 2.0 * D(elem) + D(channels) * D(elem));
}
inline KernelCost BiasBackward(int64_t rows, int64_t channels, size_t elem) {
  return Cost(0, D(rows) * D(channels), D(rows) * D(channels) * D(elem) + 8.0 * D(channels));
}

// Normalization over rows of `channels`: forward reads the input and writes
// the output (plus fp32 row statistics); backward reads the input and the
// upstream gradient, adds into the input gradient (read and written: the
// residual stream's gradient accumulates there), and into fp32 weight grads.
inline KernelCost NormForward(int64_t rows, int64_t channels, size_t elem, double flops_per_elem,
                              int stats) {
  const double n = D(rows) * D(channels);
  return Cost(0, flops_per_elem * n, 2.0 * n * D(elem) + 4.0 * stats * D(rows));
}
inline KernelCost NormBackward(int64_t rows, int64_t channels, size_t elem, double flops_per_elem,
                               int param_grads) {
  const double n = D(rows) * D(channels);
  return Cost(0, flops_per_elem * n,
              4.0 * n * D(elem) + 8.0 * param_grads * D(channels) + 8.0 * D(rows));
}

// Rotary embedding of n = B*T*heads*HS elements: the rotation (3 FLOPs per
// element) and one sin/cos pair per element pair (counted as 10 FLOPs).
inline KernelCost Rope(int64_t n, size_t elem) { return Cost(0, 8.0 * D(n), 2.0 * D(n) * D(elem)); }

// The element counts both attention costs start from.
struct AttentionSizes {
  double scores;    // B * NH * T^2 / 2: the causal lower triangle
  double q_elems;   // B * T * NH * HS: q, out, dq, dout
  double kv_elems;  // B * T * NKV * HS: k, v, dk, dv
  double lse_bytes;
};
inline AttentionSizes Sizes(int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                            int64_t head_size) {
  return {D(batch) * D(heads) * D(seq) * D(seq) / 2.0, D(batch) * D(seq) * D(heads) * D(head_size),
          D(batch) * D(seq) * D(kv_heads) * D(head_size), 4.0 * D(batch) * D(heads) * D(seq)};
}
// Causal attention over B sequences of T tokens, NH query heads, NKV key/value
// heads of size HS: QK^T and PV over the lower triangle (2 * 2 * T^2/2 * HS
// per head), softmax on the scores; backward is 2.5x the forward's matrix
// FLOPs (recomputed scores, dV, dP, dQ, dK).
inline KernelCost AttentionForward(int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                                   int64_t head_size, size_t elem) {
  const AttentionSizes a = Sizes(batch, seq, heads, kv_heads, head_size);
  return Cost(4.0 * a.scores * D(head_size), 5.0 * a.scores,
              (2.0 * a.q_elems + 2.0 * a.kv_elems) * D(elem) + a.lse_bytes);
}
inline KernelCost AttentionBackward(int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                                    int64_t head_size, size_t elem) {
  const AttentionSizes a = Sizes(batch, seq, heads, kv_heads, head_size);
  return Cost(10.0 * a.scores * D(head_size), 10.0 * a.scores,
              (4.0 * a.q_elems + 4.0 * a.kv_elems) * D(elem) + a.lse_bytes);
}

// Token + position embedding of N = B*T rows of C: a gather; the backward
// reads the gradient and adds into fp32 rows of dwte (and dwpe).
inline KernelCost EmbeddingForward(int64_t rows, int64_t channels, size_t elem, bool positions) {
  const double n = D(rows) * D(channels);
  return Cost(0, positions ? n : 0, n * D(elem) * (positions ? 3.0 : 2.0) + 4.0 * D(rows));
}
inline KernelCost EmbeddingBackward(int64_t rows, int64_t channels, size_t elem, bool positions) {
  const double n = D(rows) * D(channels);
  return Cost(0, n * (positions ? 2.0 : 1.0),
              n * D(elem) + n * 8.0 * (positions ? 2.0 : 1.0) + 4.0 * D(rows));
}

// Softmax cross-entropy over N rows of V logits (max, exp-sum, loss), with
// the logits' gradient written in the same pass when asked for.
inline KernelCost CrossEntropy(int64_t rows, int64_t vocab, size_t elem, bool writes_grad) {
  const double n = D(rows) * D(vocab);
  return Cost(0, (writes_grad ? 8.0 : 5.0) * n,
              n * D(elem) * (writes_grad ? 2.0 : 1.0) + 8.0 * D(rows));
}
// The logits' gradient for a slice of `cols` vocabulary columns from the
// rows' log-sum-exp: reads the slice's logits, each row's lse and target,
// writes the slice's gradient; exp, subtract, scale (~6 FLOPs per element).
inline KernelCost CrossEntropyGradSlice(int64_t rows, int64_t cols, size_t elem) {
  const double n = D(rows) * D(cols);
  return Cost(0, 6.0 * n, 2.0 * n * D(elem) + 8.0 * D(rows));
}

}  // namespace tierflow::op_costs
