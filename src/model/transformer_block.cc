// Forward and backward of one transformer block (GPT-2 or Llama), and the
// linear and norm helpers the head shares. llm.c's order: norm1, qkv
// projection, (RoPE), causal attention, output projection added onto the
// residual, norm2, MLP added onto the residual. Backward walks it in reverse;
// the residual stream's gradient is one buffer (dres) that the norms'
// backward accumulate into, as the identity branch of each residual needs.
#include "model/transformer_block.h"

#include <algorithm>

#include "kernels/activations.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "kernels/pointwise.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"

namespace tierflow::model_internal {

Dims MakeDims(const ModelConfig& c, int64_t batch, int64_t seq_len) {
  Dims d;
  d.B = batch;
  d.T = seq_len;
  d.N = batch * seq_len;
  d.C = c.d_model;
  d.NH = c.n_heads;
  d.NKV = c.n_kv_heads;
  d.HS = c.head_dim;
  d.Q = c.n_heads * c.head_dim;
  d.KV = c.n_kv_heads * c.head_dim;
  d.F = c.d_ff;
  d.V = c.vocab_size;
  d.conv1d = c.family == ModelFamily::kGpt2;
  d.layernorm = c.norm == NormKind::kLayerNorm;
  d.swiglu = c.mlp == MlpKind::kSwiGlu;
  d.rope = c.family == ModelFamily::kLlama;
  d.eps = static_cast<float>(c.norm_eps);
  d.rope_freq.theta = static_cast<float>(c.rope_theta);
  d.rope_freq.factor = static_cast<float>(c.rope_scaling_factor);
  d.rope_freq.low_freq_factor = static_cast<float>(c.rope_low_freq_factor);
  d.rope_freq.high_freq_factor = static_cast<float>(c.rope_high_freq_factor);
  d.rope_freq.original_max_positions = static_cast<float>(c.rope_original_max_positions);
  if (c.rope_scaling_type == "linear") d.rope_freq.scaling = RopeScaling::kLinear;
  if (c.rope_scaling_type == "llama3") d.rope_freq.scaling = RopeScaling::kLlama3;
  return d;
}

template <typename T>
Status LinearForward(Stream& s, T* y, const T* x, const T* w, const T* b, int64_t n, int64_t in,
                     int64_t out, bool conv1d, float beta) {
  GemmParams p = PackedGemm(n, out, in, false, !conv1d, DTypeOf<T>(), DTypeOf<T>());
  p.a = x;
  p.b = w;
  p.c = y;
  p.beta = beta;
  TF_RETURN_IF_ERROR(Gemm(s, p));
  if (b != nullptr) TF_RETURN_IF_ERROR(BiasAddForward<T>(s, y, b, n, out));
  return Status::Ok();
}

template <typename T>
Status LinearBackward(Stream& s, T* dx, float dx_beta, float* dw, float* db, const T* dy,
                      const T* x, const T* w, int64_t n, int64_t in, int64_t out, bool conv1d) {
  // dW: Conv1D (in, out) += x^T dy; Linear (out, in) += dy^T x. fp32, accumulated.
  GemmParams p = conv1d ? PackedGemm(in, out, n, true, false, DTypeOf<T>(), DType::kF32)
                        : PackedGemm(out, in, n, true, false, DTypeOf<T>(), DType::kF32);
  p.a = conv1d ? static_cast<const void*>(x) : static_cast<const void*>(dy);
  p.b = conv1d ? static_cast<const void*>(dy) : static_cast<const void*>(x);
  p.c = dw;
  p.beta = 1.0f;
  if (dw != nullptr) TF_RETURN_IF_ERROR(Gemm(s, p));
  if (db != nullptr) TF_RETURN_IF_ERROR(BiasBackward<T>(s, db, dy, n, out));
  if (dx != nullptr) {
    // dx (n, in) = dy (n, out) W^T for Conv1D (W (in, out)), dy W for Linear (W (out, in)).
    GemmParams q = PackedGemm(n, in, out, false, conv1d, DTypeOf<T>(), DTypeOf<T>());
    q.a = dy;
    q.b = w;
    q.c = dx;
    q.beta = dx_beta;
    TF_RETURN_IF_ERROR(Gemm(s, q));
  }
  return Status::Ok();
}

template <typename T>
Status NormForward(Stream& s, const Dims& d, T* out, float* mean, float* rstd, const T* inp,
                   const T* weight, const T* bias) {
  const NormShape ns{d.N, d.C};
  if (d.layernorm) return LayerNormForward<T>(s, out, mean, rstd, inp, weight, bias, ns, d.eps);
  return RmsNormForward<T>(s, out, rstd, inp, weight, ns, d.eps);
}

template <typename T>
Status NormBackward(Stream& s, const Dims& d, T* dinp, float* dweight, float* dbias, const T* dout,
                    const T* inp, const T* weight, const float* mean, const float* rstd) {
  const NormShape ns{d.N, d.C};
  if (d.layernorm) {
    return LayerNormBackward<T>(s, dinp, dweight, dbias, dout, inp, weight, mean, rstd, ns);
  }
  return RmsNormBackward<T>(s, dinp, dweight, dout, inp, weight, rstd, ns);
}

namespace {

// The q, k, v views of a qkv-shaped buffer (BlockActs::qkv / BlockScratch::dqkv).
template <typename P>
struct QkvView {
  P* q;
  P* k;
  P* v;
  AttentionShape shape;
};

template <typename P>
QkvView<P> ViewQkv(const Dims& d, P* qkv) {
  QkvView<P> view;
  view.shape = AttentionShape{d.B, d.T, d.NH, d.NKV, d.HS, 0, 0};
  view.shape.seq_start = d.seq_start;
  if (d.conv1d) {
    // GPT-2's c_attn output: per token [q (C) | k (C) | v (C)].
    view.q = qkv;
    view.k = qkv + d.Q;
    view.v = qkv + d.Q + d.KV;
    view.shape.q_stride = view.shape.kv_stride = d.Q + 2 * d.KV;
  } else {
    view.q = qkv;
    view.k = qkv + d.N * d.Q;
    view.v = qkv + d.N * (d.Q + d.KV);
  }
  return view;
}

template <typename T>
const T* Param(const T* w, int64_t offset) {
  return offset >= 0 ? w + offset : nullptr;
}

// The MLP's hidden activations of `rows` rows of ln2 (from `ln2_rows`) into
// the first rows of a.fc, a.up and a.act.
template <typename T>
Status MlpHidden(Stream& s, const Dims& d, const LayerOffsets& o, const T* w, const T* ln2_rows,
                 const BlockActs& a, int64_t rows) {
  T* fc = static_cast<T*>(a.fc);
  T* act = static_cast<T*>(a.act);
  if (d.swiglu) {
    T* up = static_cast<T*>(a.up);
    TF_RETURN_IF_ERROR(LinearForward<T>(s, fc, ln2_rows, w + o.gate_w, Param(w, o.gate_b), rows,
                                        d.C, d.F, false, 0.0f));
    TF_RETURN_IF_ERROR(LinearForward<T>(s, up, ln2_rows, w + o.up_w, Param(w, o.up_b), rows, d.C,
                                        d.F, false, 0.0f));
    return SwiGluForward<T>(s, act, fc, up, rows * d.F);
  }
  TF_RETURN_IF_ERROR(LinearForward<T>(s, fc, ln2_rows, w + o.fc_w, Param(w, o.fc_b), rows, d.C, d.F,
                                      d.conv1d, 0.0f));
  return GeluForward<T>(s, act, fc, rows * d.F);
}

// The MLP's backward over `rows` rows starting at r0 (their hidden
// activations in a's MLP buffers): d(out) rows from dres, d(ln2) rows into
// sc.dln. `grads(w)` hands out the op's gradients for the weight at unit
// offset w, in BlockGradOrder.
template <typename T, typename GradsOf>
Status MlpBackwardRows(Stream& s, const Dims& d, const LayerOffsets& o, const T* w, GradsOf&& grads,
                       const T* dres, const BlockActs& a, const BlockScratch& sc, int64_t r0,
                       int64_t rows) {
  const T* ln2 = static_cast<const T*>(a.ln2) + r0 * d.C;
  const T* fc = static_cast<const T*>(a.fc);
  const T* act = static_cast<const T*>(a.act);
  const T* dout = dres + r0 * d.C;
  T* dln = static_cast<T*>(sc.dln) + r0 * d.C;
  T* dact = static_cast<T*>(sc.dact);
  // out = mid + down(act(...)); dout = d(down output).
  TF_ASSIGN_OR_RETURN(GradPieceWriter::Grads gd, grads(o.down_w));
  TF_RETURN_IF_ERROR(LinearBackward<T>(s, dact, 0.0f, gd.w, gd.b, dout, act, w + o.down_w, rows,
                                       d.F, d.C, d.conv1d));
  if (d.swiglu) {
    T* dgate = static_cast<T*>(sc.dgate);
    T* dup = static_cast<T*>(sc.dup);
    const T* up = static_cast<const T*>(a.up);
    TF_RETURN_IF_ERROR(SwiGluBackward<T>(s, dgate, dup, dact, fc, up, rows * d.F));
    TF_ASSIGN_OR_RETURN(gd, grads(o.gate_w));
    TF_RETURN_IF_ERROR(LinearBackward<T>(s, dln, 0.0f, gd.w, gd.b, dgate, ln2, w + o.gate_w, rows,
                                         d.C, d.F, false));
    TF_ASSIGN_OR_RETURN(gd, grads(o.up_w));
    return LinearBackward<T>(s, dln, 1.0f, gd.w, gd.b, dup, ln2, w + o.up_w, rows, d.C, d.F, false);
  }
  TF_RETURN_IF_ERROR(GeluBackward<T>(s, dact, fc, dact, rows * d.F));
  TF_ASSIGN_OR_RETURN(gd, grads(o.fc_w));
  return LinearBackward<T>(s, dln, 0.0f, gd.w, gd.b, dact, ln2, w + o.fc_w, rows, d.C, d.F,
                           d.conv1d);
}

// The MLP's backward: at once (one tile of N rows, each weight's op from
// `g` in turn), or tile by tile, each tile's hidden activations recomputed
// from ln2 and its gradients added into the MLP's one op.
template <typename T>
Status MlpBackward(Stream& s, const Dims& d, const LayerOffsets& o, const T* w, GradPieceWriter& g,
                   const T* dres, const BlockActs& a, const BlockScratch& sc) {
  if (d.mlp_rows <= 0) {
    auto op = [&](int64_t wo) { return g.Op(wo); };
    return MlpBackwardRows<T>(s, d, o, w, op, dres, a, sc, 0, d.N);
  }
  const int64_t begin = MlpGradBegin(d, o);
  TF_ASSIGN_OR_RETURN(const GradPieceWriter::Grads mlp, g.Op(begin));
  // The op's tensors by unit offset; each weight's bias follows it.
  auto op = [&](int64_t wo) -> StatusOr<GradPieceWriter::Grads> {
    GradPieceWriter::Grads gd;
    gd.w = mlp.w + (wo - begin);
    int64_t b = -1;
    if (wo == o.down_w) b = o.down_b;
    if (wo == o.fc_w) b = o.fc_b;
    if (wo == o.gate_w) b = o.gate_b;
    if (wo == o.up_w) b = o.up_b;
    if (b >= 0) gd.b = mlp.w + (b - begin);
    return gd;
  };
  const T* ln2 = static_cast<const T*>(a.ln2);
  for (int64_t r0 = 0; r0 < d.N; r0 += d.mlp_rows) {
    const int64_t rows = std::min(d.mlp_rows, d.N - r0);
    TF_RETURN_IF_ERROR(MlpHidden<T>(s, d, o, w, ln2 + r0 * d.C, a, rows));
    TF_RETURN_IF_ERROR(MlpBackwardRows<T>(s, d, o, w, op, dres, a, sc, r0, rows));
  }
  return Status::Ok();
}

}  // namespace

size_t BlockMlpGradOps(const Dims& d) { return d.swiglu ? 3 : 2; }

int64_t MlpGradBegin(const Dims& d, const LayerOffsets& o) { return d.swiglu ? o.gate_w : o.fc_w; }

template <typename T>
Status BlockForward(Stream& s, const Dims& d, const LayerOffsets& o, const T* w, const T* x, T* out,
                    const BlockActs& a, bool mlp) {
  T* ln1 = static_cast<T*>(a.ln1);
  T* att = static_cast<T*>(a.att);
  T* mid = static_cast<T*>(a.mid);
  T* ln2 = static_cast<T*>(a.ln2);
  const size_t row_bytes = static_cast<size_t>(d.N * d.C) * sizeof(T);

  TF_RETURN_IF_ERROR(NormForward<T>(s, d, ln1, a.ln1_mean, a.ln1_rstd, x, Param(w, o.norm1_w),
                                    Param(w, o.norm1_b)));
  QkvView<T> qkv = ViewQkv(d, static_cast<T*>(a.qkv));
  if (d.conv1d) {
    TF_RETURN_IF_ERROR(LinearForward<T>(s, qkv.q, ln1, w + o.qkv_w, Param(w, o.qkv_b), d.N, d.C,
                                        d.Q + 2 * d.KV, true, 0.0f));
  } else {
    TF_RETURN_IF_ERROR(
        LinearForward<T>(s, qkv.q, ln1, w + o.q_w, Param(w, o.q_b), d.N, d.C, d.Q, false, 0.0f));
    TF_RETURN_IF_ERROR(
        LinearForward<T>(s, qkv.k, ln1, w + o.k_w, Param(w, o.k_b), d.N, d.C, d.KV, false, 0.0f));
    TF_RETURN_IF_ERROR(
        LinearForward<T>(s, qkv.v, ln1, w + o.v_w, Param(w, o.v_b), d.N, d.C, d.KV, false, 0.0f));
  }
  if (d.rope) {
    TF_RETURN_IF_ERROR(RopeForward<T>(
        s, qkv.q, qkv.q, RopeShape{d.B, d.T, d.NH, d.HS, 0, d.positions}, d.rope_freq));
    TF_RETURN_IF_ERROR(RopeForward<T>(
        s, qkv.k, qkv.k, RopeShape{d.B, d.T, d.NKV, d.HS, 0, d.positions}, d.rope_freq));
  }
  TF_RETURN_IF_ERROR(AttentionForward<T>(s, att, a.lse, qkv.q, qkv.k, qkv.v, qkv.shape));
  // mid = x + att Wo + bo: the projection accumulates onto a copy of the residual.
  TF_RETURN_IF_ERROR(s.CopyDeviceToDevice(mid, x, row_bytes));
  TF_RETURN_IF_ERROR(
      LinearForward<T>(s, mid, att, w + o.o_w, Param(w, o.o_b), d.N, d.Q, d.C, d.conv1d, 1.0f));
  TF_RETURN_IF_ERROR(NormForward<T>(s, d, ln2, a.ln2_mean, a.ln2_rstd, mid, Param(w, o.norm2_w),
                                    Param(w, o.norm2_b)));
  if (!mlp) return Status::Ok();
  // The MLP over row tiles (all N rows at once untiled): each tile's hidden
  // activations, then out rows = mid rows + down(act).
  const T* act = static_cast<const T*>(a.act);
  const int64_t tile = d.MlpTile();
  for (int64_t r0 = 0; r0 < d.N; r0 += tile) {
    const int64_t rows = std::min(tile, d.N - r0);
    TF_RETURN_IF_ERROR(MlpHidden<T>(s, d, o, w, ln2 + r0 * d.C, a, rows));
    TF_RETURN_IF_ERROR(s.CopyDeviceToDevice(out + r0 * d.C, mid + r0 * d.C,
                                            static_cast<size_t>(rows * d.C) * sizeof(T)));
    TF_RETURN_IF_ERROR(LinearForward<T>(s, out + r0 * d.C, act, w + o.down_w, Param(w, o.down_b),
                                        rows, d.F, d.C, d.conv1d, 1.0f));
  }
  return Status::Ok();
}

std::vector<std::pair<int64_t, int64_t>> BlockGradOrder(const Dims& d, const LayerOffsets& o) {
  std::vector<std::pair<int64_t, int64_t>> order{{o.down_w, o.down_b}};
  if (d.swiglu) {
    order.emplace_back(o.gate_w, o.gate_b);
    order.emplace_back(o.up_w, o.up_b);
  } else {
    order.emplace_back(o.fc_w, o.fc_b);
  }
  order.emplace_back(o.norm2_w, o.norm2_b);
  order.emplace_back(o.o_w, o.o_b);
  if (d.conv1d) {
    order.emplace_back(o.qkv_w, o.qkv_b);
  } else {
    order.emplace_back(o.q_w, o.q_b);
    order.emplace_back(o.k_w, o.k_b);
    order.emplace_back(o.v_w, o.v_b);
  }
  order.emplace_back(o.norm1_w, o.norm1_b);
  return order;
}

template <typename T>
Status BlockBackward(Stream& s, const Dims& d, const LayerOffsets& o, const T* w,
                     GradPieceWriter& g, const T* x, T* dres, const BlockActs& a,
                     const BlockScratch& sc) {
  const T* ln1 = static_cast<const T*>(a.ln1);
  const T* att = static_cast<const T*>(a.att);
  const T* mid = static_cast<const T*>(a.mid);
  T* dln = static_cast<T*>(sc.dln);
  T* datt = static_cast<T*>(sc.datt);

  TF_RETURN_IF_ERROR(MlpBackward<T>(s, d, o, w, g, dres, a, sc));
  GradPieceWriter::Grads gd;
  // dres becomes d(mid): the identity branch plus norm2's input gradient.
  TF_ASSIGN_OR_RETURN(gd, g.Op(o.norm2_w));
  TF_RETURN_IF_ERROR(
      NormBackward<T>(s, d, dres, gd.w, gd.b, dln, mid, w + o.norm2_w, a.ln2_mean, a.ln2_rstd));

  // Attention: mid = x + o_proj(att).
  TF_ASSIGN_OR_RETURN(gd, g.Op(o.o_w));
  TF_RETURN_IF_ERROR(
      LinearBackward<T>(s, datt, 0.0f, gd.w, gd.b, dres, att, w + o.o_w, d.N, d.Q, d.C, d.conv1d));
  QkvView<const T> qkv = ViewQkv(d, static_cast<const T*>(a.qkv));
  QkvView<T> dqkv = ViewQkv(d, static_cast<T*>(sc.dqkv));
  TF_RETURN_IF_ERROR(AttentionBackward<T>(s, dqkv.q, dqkv.k, dqkv.v, datt, qkv.q, qkv.k, qkv.v, att,
                                          a.lse, qkv.shape));
  if (d.rope) {
    TF_RETURN_IF_ERROR(RopeBackward<T>(
        s, dqkv.q, dqkv.q, RopeShape{d.B, d.T, d.NH, d.HS, 0, d.positions}, d.rope_freq));
    TF_RETURN_IF_ERROR(RopeBackward<T>(
        s, dqkv.k, dqkv.k, RopeShape{d.B, d.T, d.NKV, d.HS, 0, d.positions}, d.rope_freq));
  }
  if (d.conv1d) {
    TF_ASSIGN_OR_RETURN(gd, g.Op(o.qkv_w));
    TF_RETURN_IF_ERROR(LinearBackward<T>(s, dln, 0.0f, gd.w, gd.b, dqkv.q, ln1, w + o.qkv_w, d.N,
                                         d.C, d.Q + 2 * d.KV, true));
  } else {
    TF_ASSIGN_OR_RETURN(gd, g.Op(o.q_w));
    TF_RETURN_IF_ERROR(
        LinearBackward<T>(s, dln, 0.0f, gd.w, gd.b, dqkv.q, ln1, w + o.q_w, d.N, d.C, d.Q, false));
    TF_ASSIGN_OR_RETURN(gd, g.Op(o.k_w));
    TF_RETURN_IF_ERROR(
        LinearBackward<T>(s, dln, 1.0f, gd.w, gd.b, dqkv.k, ln1, w + o.k_w, d.N, d.C, d.KV, false));
    TF_ASSIGN_OR_RETURN(gd, g.Op(o.v_w));
    TF_RETURN_IF_ERROR(
        LinearBackward<T>(s, dln, 1.0f, gd.w, gd.b, dqkv.v, ln1, w + o.v_w, d.N, d.C, d.KV, false));
  }
  // dres becomes d(x).
  TF_ASSIGN_OR_RETURN(gd, g.Op(o.norm1_w));
  TF_RETURN_IF_ERROR(
      NormBackward<T>(s, d, dres, gd.w, gd.b, dln, x, w + o.norm1_w, a.ln1_mean, a.ln1_rstd));
  return g.Finish();
}

#define TF_INSTANTIATE_BLOCK(T)                                                                  \
  template Status BlockForward<T>(Stream&, const Dims&, const LayerOffsets&, const T*, const T*, \
                                  T*, const BlockActs&, bool);                                   \
  template Status BlockBackward<T>(Stream&, const Dims&, const LayerOffsets&, const T*,          \
                                   GradPieceWriter&, const T*, T*, const BlockActs&,             \
                                   const BlockScratch&);                                         \
  template Status LinearForward<T>(Stream&, T*, const T*, const T*, const T*, int64_t, int64_t,  \
                                   int64_t, bool, float);                                        \
  template Status LinearBackward<T>(Stream&, T*, float, float*, float*, const T*, const T*,      \
                                    const T*, int64_t, int64_t, int64_t, bool);                  \
  template Status NormForward<T>(Stream&, const Dims&, T*, float*, float*, const T*, const T*,   \
                                 const T*);                                                      \
  template Status NormBackward<T>(Stream&, const Dims&, T*, float*, float*, const T*, const T*,  \
                                  const T*, const float*, const float*);
TF_INSTANTIATE_BLOCK(float)
TF_INSTANTIATE_BLOCK(bf16)
TF_INSTANTIATE_BLOCK(fp16)
#undef TF_INSTANTIATE_BLOCK

}  // namespace tierflow::model_internal
