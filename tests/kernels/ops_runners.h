// Runs every op the same way through three implementations, so one set of
// inputs and expectations covers: the reference, the fast CPU path, and the
// device-dispatching entry point on a Device (the CPU device or CUDA).
//
// A runner builds seeded inputs for a shape, runs forward then backward with
// the chosen implementation and returns all outputs (widened to fp32, named),
// including fp32 statistics and parameter gradients. Outputs with "+="
// semantics start from non-zero values so the accumulation is checked too.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/activations.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/pointwise.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "tests/kernels/ops_test_util.h"
#include "tierflow/device.h"

namespace tierflow::testing_ops {

enum class Impl { kReference, kFast, kDevice };

struct Output {
  std::string name;
  std::vector<float> values;
  bool stored_as_t;  // false: an fp32 output (statistics, parameter gradients, losses)
};
using Outputs = std::vector<Output>;

// Where tensors live for one run. Host impls use the vectors in place; the
// device impl uploads inputs and outputs' initial contents, and downloads the
// outputs in Finish().
class Backend {
 public:
  Backend(Impl impl, Device* device) : impl_(impl), device_(device) {
    if (impl_ == Impl::kDevice) {
      auto s = device_->CreateStream("ops-test");
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) stream_ = std::move(s).value();
    }
  }
  Impl impl() const { return impl_; }
  Stream& stream() { return *stream_; }

  template <typename T>
  const T* In(const std::vector<T>& host) {
    if (impl_ != Impl::kDevice) return host.data();
    return static_cast<const T*>(Upload(host.data(), host.size() * sizeof(T)));
  }

  // An output (or an in/out tensor): its current contents are the initial value.
  template <typename T>
  T* Out(std::vector<T>* host) {
    if (impl_ != Impl::kDevice) return host->data();
    void* dev = Upload(host->data(), host->size() * sizeof(T));
    downloads_.push_back({host->data(), dev, host->size() * sizeof(T)});
    return static_cast<T*>(dev);
  }

  // Runs the implementation's function (each returns a Status).
  template <typename R, typename F, typename D>
  void Run(R reference, F fast, D device) {
    Status st;
    switch (impl_) {
      case Impl::kReference:
        st = reference();
        break;
      case Impl::kFast:
        st = fast();
        break;
      case Impl::kDevice:
        st = device(*stream_);
        break;
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  void Finish() {
    if (impl_ != Impl::kDevice) return;
    for (auto& d : downloads_) {
      ASSERT_TRUE(stream_->CopyDeviceToHost(d.host, d.device, d.num_bytes).ok());
    }
    Status st = stream_->Synchronize();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

 private:
  void* Upload(const void* host, size_t num_bytes) {
    auto buf = device_->Allocate(std::max<size_t>(num_bytes, 1), "ops-test");
    EXPECT_TRUE(buf.ok()) << buf.status().ToString();
    if (!buf.ok()) return nullptr;
    void* ptr = buf->data();
    if (num_bytes > 0) {
      EXPECT_TRUE(stream_->CopyHostToDevice(ptr, host, num_bytes).ok());
    }
    buffers_.push_back(std::move(buf).value());
    return ptr;
  }

  struct Download {
    void* host;
    const void* device;
    size_t num_bytes;
  };
  Impl impl_;
  Device* device_;
  std::unique_ptr<Stream> stream_;
  std::vector<DeviceBuffer> buffers_;
  std::vector<Download> downloads_;
};

template <typename T>
Output AsOutput(std::string name, const std::vector<T>& v) {
  return Output{std::move(name), Widen(v), !std::is_same_v<T, float>};
}

// ---- runners ----

template <typename T>
Outputs RunEmbedding(Impl impl, Device* device, const EmbeddingShape& s, bool with_positions) {
  Backend be(impl, device);
  const int64_t rows = s.batch * s.seq_len;
  std::vector<int32_t> tokens(rows);
  for (int64_t i = 0; i < rows; ++i) tokens[i] = static_cast<int32_t>((i * 7 + i / 3) % s.vocab);
  tokens[0] = tokens[rows - 1];  // a repeated token: its gradient rows add up
  auto wte = Random<T>(s.vocab * s.channels, 1), wpe = Random<T>(s.seq_len * s.channels, 2);
  auto dout = Random<T>(rows * s.channels, 3);
  std::vector<T> out(rows * s.channels);
  auto dwte = Random<float>(wte.size(), 4), dwpe = Random<float>(wpe.size(), 5);
  auto* out_p = be.Out(&out);
  auto* dwte_p = be.Out(&dwte);
  float* dwpe_p = with_positions ? be.Out(&dwpe) : nullptr;
  auto* tok_p = be.In(tokens);
  auto* wte_p = be.In(wte);
  const T* wpe_p = with_positions ? be.In(wpe) : nullptr;
  auto* dout_p = be.In(dout);
  be.Run([&] { return EmbeddingForwardReference(out_p, tok_p, wte_p, wpe_p, s); },
         [&] { return EmbeddingForwardCpu(out_p, tok_p, wte_p, wpe_p, s); },
         [&](Stream& st) { return EmbeddingForward(st, out_p, tok_p, wte_p, wpe_p, s); });
  be.Run([&] { return EmbeddingBackwardReference(dwte_p, dwpe_p, dout_p, tok_p, s); },
         [&] { return EmbeddingBackwardCpu(dwte_p, dwpe_p, dout_p, tok_p, s); },
         [&](Stream& st) { return EmbeddingBackward(st, dwte_p, dwpe_p, dout_p, tok_p, s); });
  be.Finish();
  return {AsOutput("out", out), AsOutput("dwte", dwte), AsOutput("dwpe", dwpe)};
}

// The embedding's backward over the whole vocabulary, then again a range of
// wte rows at a time (`ranges`: {grad_row_begin, grad_rows}, tiling [0, V) in
// order; each call's dwte starts from those rows of the whole call's initial
// dwte), then for the positions alone (dwte null). Outputs: dwte, the ranges'
// dwte side by side, dwpe (of the whole call) and dwpe alone.
template <typename T>
Outputs RunEmbeddingBackwardRanges(Impl impl, Device* device, const EmbeddingShape& s,
                                   const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  Backend be(impl, device);
  const int64_t rows = s.batch * s.seq_len, C = s.channels;
  std::vector<int32_t> tokens(rows);
  // Spread over the vocabulary, with repeats (i and i + 5 share a token often).
  for (int64_t i = 0; i < rows; ++i) tokens[i] = static_cast<int32_t>((i * 11 + i / 5) % s.vocab);
  tokens[0] = tokens[rows - 1];
  tokens[1] = static_cast<int32_t>(s.vocab - 1);
  auto dout = Random<T>(rows * C, 33);
  auto dwte = Random<float>(s.vocab * C, 34), dwpe = Random<float>(s.seq_len * C, 35);
  std::vector<float> dwpe_alone = dwpe;
  std::vector<std::vector<float>> range_dwte;
  for (const auto& [begin, n] : ranges) {
    const int64_t end = begin + (n != 0 ? n : s.vocab);
    range_dwte.emplace_back(dwte.begin() + begin * C, dwte.begin() + end * C);
  }
  auto *dwte_p = be.Out(&dwte), *dwpe_p = be.Out(&dwpe), *alone_p = be.Out(&dwpe_alone);
  std::vector<float*> range_p;
  for (auto& r : range_dwte) range_p.push_back(be.Out(&r));
  auto *tok_p = be.In(tokens), *dout_p = be.In(dout);
  auto run = [&](float* dw, float* dp, const EmbeddingShape& es) {
    be.Run([&] { return EmbeddingBackwardReference(dw, dp, dout_p, tok_p, es); },
           [&] { return EmbeddingBackwardCpu(dw, dp, dout_p, tok_p, es); },
           [&](Stream& st) { return EmbeddingBackward(st, dw, dp, dout_p, tok_p, es); });
  };
  run(dwte_p, dwpe_p, s);
  for (size_t k = 0; k < ranges.size(); ++k) {
    EmbeddingShape es = s;
    es.grad_row_begin = ranges[k].first;
    es.grad_rows = ranges[k].second;
    run(range_p[k], nullptr, es);
  }
  run(nullptr, alone_p, s);
  be.Finish();
  std::vector<float> by_ranges;
  for (const auto& r : range_dwte) by_ranges.insert(by_ranges.end(), r.begin(), r.end());
  return {AsOutput("dwte", dwte), AsOutput("dwte by ranges", by_ranges), AsOutput("dwpe", dwpe),
          AsOutput("dwpe alone", dwpe_alone)};
}

template <typename T>
Outputs RunLayerNorm(Impl impl, Device* device, const NormShape& s) {
  Backend be(impl, device);
  const int64_t n = s.rows * s.channels;
  auto x = Random<T>(n, 6, -2.0f, 3.0f), w = Random<T>(s.channels, 7, 0.5f, 1.5f),
       b = Random<T>(s.channels, 8), dout = Random<T>(n, 9);
  std::vector<T> out(n);
  auto dinp = Random<T>(n, 10);
  std::vector<float> mean(s.rows), rstd(s.rows);
  auto dw = Random<float>(s.channels, 11), db = Random<float>(s.channels, 12);
  auto *out_p = be.Out(&out), *dinp_p = be.Out(&dinp);
  auto *mean_p = be.Out(&mean), *rstd_p = be.Out(&rstd), *dw_p = be.Out(&dw), *db_p = be.Out(&db);
  auto *x_p = be.In(x), *w_p = be.In(w), *b_p = be.In(b), *dout_p = be.In(dout);
  be.Run([&] { return LayerNormForwardReference(out_p, mean_p, rstd_p, x_p, w_p, b_p, s); },
         [&] { return LayerNormForwardCpu(out_p, mean_p, rstd_p, x_p, w_p, b_p, s); },
         [&](Stream& st) { return LayerNormForward(st, out_p, mean_p, rstd_p, x_p, w_p, b_p, s); });
  be.Run(
      [&] {
        return LayerNormBackwardReference(dinp_p, dw_p, db_p, dout_p, x_p, w_p, mean_p, rstd_p, s);
      },
      [&] { return LayerNormBackwardCpu(dinp_p, dw_p, db_p, dout_p, x_p, w_p, mean_p, rstd_p, s); },
      [&](Stream& st) {
        return LayerNormBackward(st, dinp_p, dw_p, db_p, dout_p, x_p, w_p, mean_p, rstd_p, s);
      });
  be.Finish();
  return {AsOutput("out", out),   AsOutput("mean", mean),  AsOutput("rstd", rstd),
          AsOutput("dinp", dinp), AsOutput("dweight", dw), AsOutput("dbias", db)};
}

template <typename T>
Outputs RunRmsNorm(Impl impl, Device* device, const NormShape& s) {
  Backend be(impl, device);
  const int64_t n = s.rows * s.channels;
  auto x = Random<T>(n, 13, -2.0f, 2.0f), w = Random<T>(s.channels, 14, 0.5f, 1.5f),
       dout = Random<T>(n, 15);
  std::vector<T> out(n);
  auto dinp = Random<T>(n, 16);
  std::vector<float> rstd(s.rows);
  auto dw = Random<float>(s.channels, 17);
  auto *out_p = be.Out(&out), *dinp_p = be.Out(&dinp);
  auto *rstd_p = be.Out(&rstd), *dw_p = be.Out(&dw);
  auto *x_p = be.In(x), *w_p = be.In(w), *dout_p = be.In(dout);
  be.Run([&] { return RmsNormForwardReference(out_p, rstd_p, x_p, w_p, s, 1e-6f); },
         [&] { return RmsNormForwardCpu(out_p, rstd_p, x_p, w_p, s, 1e-6f); },
         [&](Stream& st) { return RmsNormForward(st, out_p, rstd_p, x_p, w_p, s, 1e-6f); });
  be.Run(
      [&] { return RmsNormBackwardReference(dinp_p, dw_p, dout_p, x_p, w_p, rstd_p, s); },
      [&] { return RmsNormBackwardCpu(dinp_p, dw_p, dout_p, x_p, w_p, rstd_p, s); },
      [&](Stream& st) { return RmsNormBackward(st, dinp_p, dw_p, dout_p, x_p, w_p, rstd_p, s); });
  be.Finish();
  return {AsOutput("out", out), AsOutput("rstd", rstd), AsOutput("dinp", dinp),
          AsOutput("dweight", dw)};
}

template <typename T>
Outputs RunRope(Impl impl, Device* device, const RopeShape& shape, const RopeFreq& theta,
                const std::vector<int32_t>* positions = nullptr) {
  Backend be(impl, device);
  RopeShape s = shape;
  if (positions != nullptr) s.positions = be.In(*positions);
  const int64_t n = s.batch * s.seq_len * s.stride();
  auto x = Random<T>(n, 18), dout = Random<T>(n, 19);
  std::vector<T> out(n, FromFloat<T>(7.0f)), dinp(n, FromFloat<T>(7.0f));  // 7: untouched marker
  auto *out_p = be.Out(&out), *dinp_p = be.Out(&dinp);
  auto *x_p = be.In(x), *dout_p = be.In(dout);
  be.Run([&] { return RopeForwardReference(out_p, x_p, s, theta); },
         [&] { return RopeForwardCpu(out_p, x_p, s, theta); },
         [&](Stream& st) { return RopeForward(st, out_p, x_p, s, theta); });
  be.Run([&] { return RopeBackwardReference(dinp_p, dout_p, s, theta); },
         [&] { return RopeBackwardCpu(dinp_p, dout_p, s, theta); },
         [&](Stream& st) { return RopeBackward(st, dinp_p, dout_p, s, theta); });
  be.Finish();
  return {AsOutput("out", out), AsOutput("dinp", dinp)};
}

// Forward, then backward from that forward's out and lse; or, given
// `backward_from` (another run's outputs), backward from its out and lse.
// Comparing two implementations' backward needs the same out: D = dout . out
// enters dS = P (dP - D) for every key of a row, and for the first rows of a
// sequence (one key: dS = 0 exactly) a 1-ulp change in out moves dq by more
// than the storage type's rounding of the terms (seen on the GPU, then
// reproduced on the CPU by perturbing out).
template <typename T>
Outputs RunAttention(Impl impl, Device* device, const AttentionShape& shape,
                     const std::vector<int32_t>* seq_start = nullptr,
                     const Outputs* backward_from = nullptr) {
  Backend be(impl, device);
  AttentionShape s = shape;
  if (seq_start != nullptr) s.seq_start = be.In(*seq_start);
  const int64_t nq = s.batch * s.seq_len * s.qs(), nkv = s.batch * s.seq_len * s.kvs();
  const int64_t no = s.batch * s.seq_len * s.heads * s.head_size;
  auto q = Random<T>(nq, 20, -2.0f, 2.0f), k = Random<T>(nkv, 21, -2.0f, 2.0f),
       v = Random<T>(nkv, 22), dout = Random<T>(no, 23);
  std::vector<T> out(no), dq(nq, FromFloat<T>(7.0f)), dk(nkv, FromFloat<T>(7.0f)),
      dv(nkv, FromFloat<T>(7.0f));
  std::vector<float> lse(s.batch * s.heads * s.seq_len);
  auto *out_p = be.Out(&out), *dq_p = be.Out(&dq), *dk_p = be.Out(&dk), *dv_p = be.Out(&dv);
  auto* lse_p = be.Out(&lse);
  auto *q_p = be.In(q), *k_p = be.In(k), *v_p = be.In(v), *dout_p = be.In(dout);
  be.Run([&] { return AttentionForwardReference(out_p, lse_p, q_p, k_p, v_p, s); },
         [&] { return AttentionForwardCpu(out_p, lse_p, q_p, k_p, v_p, s); },
         [&](Stream& st) { return AttentionForward(st, out_p, lse_p, q_p, k_p, v_p, s); });
  std::vector<T> given_out;
  std::vector<float> given_lse;
  const T* bwd_out_p = out_p;
  const float* bwd_lse_p = lse_p;
  if (backward_from != nullptr) {
    EXPECT_EQ((*backward_from)[0].name, "out");
    EXPECT_EQ((*backward_from)[1].name, "lse");
    given_out = Narrow<T>((*backward_from)[0].values);  // widened from T: exact
    given_lse = (*backward_from)[1].values;
    EXPECT_EQ(given_out.size(), out.size());
    EXPECT_EQ(given_lse.size(), lse.size());
    bwd_out_p = be.In(given_out);
    bwd_lse_p = be.In(given_lse);
  }
  be.Run(
      [&] {
        return AttentionBackwardReference(dq_p, dk_p, dv_p, dout_p, q_p, k_p, v_p, bwd_out_p,
                                          bwd_lse_p, s);
      },
      [&] {
        return AttentionBackwardCpu(dq_p, dk_p, dv_p, dout_p, q_p, k_p, v_p, bwd_out_p, bwd_lse_p,
                                    s);
      },
      [&](Stream& st) {
        return AttentionBackward(st, dq_p, dk_p, dv_p, dout_p, q_p, k_p, v_p, bwd_out_p, bwd_lse_p,
                                 s);
      });
  be.Finish();
  return {AsOutput("out", out), AsOutput("lse", lse), AsOutput("dq", dq), AsOutput("dk", dk),
          AsOutput("dv", dv)};
}

template <typename T>
Outputs RunActivations(Impl impl, Device* device, int64_t n) {
  Backend be(impl, device);
  auto x = Random<T>(n, 24, -4.0f, 4.0f), up = Random<T>(n, 25, -2.0f, 2.0f),
       dout = Random<T>(n, 26);
  std::vector<T> gelu(n), dgelu(n), swiglu(n), dgate(n), dup(n);
  auto *gelu_p = be.Out(&gelu), *dgelu_p = be.Out(&dgelu), *swiglu_p = be.Out(&swiglu);
  auto *dgate_p = be.Out(&dgate), *dup_p = be.Out(&dup);
  auto *x_p = be.In(x), *up_p = be.In(up), *dout_p = be.In(dout);
  be.Run([&] { return GeluForwardReference(gelu_p, x_p, n); },
         [&] { return GeluForwardCpu(gelu_p, x_p, n); },
         [&](Stream& st) { return GeluForward(st, gelu_p, x_p, n); });
  be.Run([&] { return GeluBackwardReference(dgelu_p, x_p, dout_p, n); },
         [&] { return GeluBackwardCpu(dgelu_p, x_p, dout_p, n); },
         [&](Stream& st) { return GeluBackward(st, dgelu_p, x_p, dout_p, n); });
  be.Run([&] { return SwiGluForwardReference(swiglu_p, x_p, up_p, n); },
         [&] { return SwiGluForwardCpu(swiglu_p, x_p, up_p, n); },
         [&](Stream& st) { return SwiGluForward(st, swiglu_p, x_p, up_p, n); });
  be.Run([&] { return SwiGluBackwardReference(dgate_p, dup_p, dout_p, x_p, up_p, n); },
         [&] { return SwiGluBackwardCpu(dgate_p, dup_p, dout_p, x_p, up_p, n); },
         [&](Stream& st) { return SwiGluBackward(st, dgate_p, dup_p, dout_p, x_p, up_p, n); });
  be.Finish();
  return {AsOutput("gelu", gelu), AsOutput("dgelu", dgelu), AsOutput("swiglu", swiglu),
          AsOutput("dgate", dgate), AsOutput("dup", dup)};
}

template <typename T>
Outputs RunPointwise(Impl impl, Device* device, int64_t rows, int64_t channels) {
  Backend be(impl, device);
  const int64_t n = rows * channels;
  auto a = Random<T>(n, 27), b = Random<T>(n, 28), bias = Random<T>(channels, 29);
  std::vector<T> sum(n), biased = a;
  auto dbias = Random<float>(channels, 30);
  auto *sum_p = be.Out(&sum), *biased_p = be.Out(&biased);
  auto* dbias_p = be.Out(&dbias);
  auto *a_p = be.In(a), *b_p = be.In(b), *bias_p = be.In(bias);
  be.Run([&] { return ResidualForwardReference(sum_p, a_p, b_p, n); },
         [&] { return ResidualForwardCpu(sum_p, a_p, b_p, n); },
         [&](Stream& st) { return ResidualForward(st, sum_p, a_p, b_p, n); });
  be.Run([&] { return BiasAddForwardReference(biased_p, bias_p, rows, channels); },
         [&] { return BiasAddForwardCpu(biased_p, bias_p, rows, channels); },
         [&](Stream& st) { return BiasAddForward(st, biased_p, bias_p, rows, channels); });
  be.Run([&] { return BiasBackwardReference(dbias_p, b_p, rows, channels); },
         [&] { return BiasBackwardCpu(dbias_p, b_p, rows, channels); },
         [&](Stream& st) { return BiasBackward(st, dbias_p, b_p, rows, channels); });
  be.Finish();
  return {AsOutput("residual", sum), AsOutput("bias_add", biased), AsOutput("dbias", dbias)};
}

// targets: every `ignore_every`-th row is ignored (0: none; 1: all).
template <typename T>
Outputs RunCrossEntropy(Impl impl, Device* device, const CrossEntropyShape& s, int ignore_every,
                        bool in_place, int32_t ignore_index = -100) {
  Backend be(impl, device);
  auto logits = Random<T>(s.rows * s.stride(), 31, -4.0f, 4.0f);
  std::vector<int32_t> targets(s.rows);
  for (int64_t i = 0; i < s.rows; ++i) {
    const bool ignored = ignore_every > 0 && i % ignore_every == 0;
    targets[i] = ignored ? ignore_index : static_cast<int32_t>((i * 13 + 5) % s.vocab);
  }
  std::vector<T> dlogits(logits.size(), FromFloat<T>(7.0f));
  std::vector<float> loss(1, 7.0f), rows(s.rows, 7.0f), lse(s.rows, 7.0f);
  auto *loss_p = be.Out(&loss), *rows_p = be.Out(&rows), *lse_p = be.Out(&lse);
  T* dl_p = in_place ? be.Out(&logits) : be.Out(&dlogits);
  const T* lg_p = in_place ? dl_p : be.In(logits);
  auto* tg_p = be.In(targets);
  const CrossEntropyOptions o{.ignore_index = ignore_index, .grad_scale = 0.25f, .row_lse = lse_p};
  be.Run(
      [&] { return SoftmaxCrossEntropyReference(loss_p, rows_p, dl_p, lg_p, tg_p, s, o); },
      [&] { return SoftmaxCrossEntropyCpu(loss_p, rows_p, dl_p, lg_p, tg_p, s, o); },
      [&](Stream& st) { return SoftmaxCrossEntropy(st, loss_p, rows_p, dl_p, lg_p, tg_p, s, o); });
  be.Finish();
  return {AsOutput("loss", loss), AsOutput("row_losses", rows),
          AsOutput("dlogits", in_place ? logits : dlogits), AsOutput("row_lse", lse)};
}

// One vocabulary slice of SoftmaxCrossEntropyGradSlice: columns [begin, begin + width)
// in a buffer of row stride `stride` (>= width), its gradient in place or not.
struct SliceCut {
  int64_t begin = 0;
  int64_t width = 0;
  int64_t stride = 0;
  bool in_place = false;
};

// The whole cross-entropy (rows of s.vocab columns, row_lse on), then its
// dlogits again from `cuts` (which tile [0, s.vocab) in order) with
// SoftmaxCrossEntropyGradSlice and the first pass's row_lse. Outputs: the
// first pass's dlogits, the slices' dlogits put side by side (the same
// layout), every slice's padding columns, and row_lse. Targets: every
// `ignore_every`-th row ignored (0: none), the rest (i * 13 + 5) % target_mod.
template <typename T>
Outputs RunCrossEntropyInSlices(Impl impl, Device* device, const CrossEntropyShape& s,
                                const std::vector<SliceCut>& cuts, int ignore_every,
                                int64_t target_mod) {
  Backend be(impl, device);
  const int64_t N = s.rows, V = s.vocab;
  auto logits = Random<T>(N * V, 32, -4.0f, 4.0f);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) {
    const bool ignored = ignore_every > 0 && i % ignore_every == 0;
    targets[i] = ignored ? -100 : static_cast<int32_t>((i * 13 + 5) % target_mod);
  }
  const CrossEntropyOptions base{.ignore_index = -100, .grad_scale = 8.0f};
  std::vector<T> dlogits(logits.size(), FromFloat<T>(7.0f));
  std::vector<float> loss(1, 7.0f), rows(N, 7.0f), lse(N, 7.0f);
  auto *loss_p = be.Out(&loss), *rows_p = be.Out(&rows), *lse_p = be.Out(&lse);
  auto* dl_p = be.Out(&dlogits);
  auto *lg_p = be.In(logits), *tg_p = be.In(targets);
  // Each slice's logits (padding columns hold a marker) and its gradient buffer.
  std::vector<std::vector<T>> slice_logits, slice_grads;
  slice_logits.reserve(cuts.size());
  slice_grads.reserve(cuts.size());
  for (const SliceCut& c : cuts) {
    std::vector<T> x(N * c.stride, FromFloat<T>(3.0f));
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < c.width; ++j) x[i * c.stride + j] = logits[i * V + c.begin + j];
    }
    slice_logits.push_back(std::move(x));
    slice_grads.emplace_back(N * c.stride, FromFloat<T>(7.0f));
  }
  std::vector<T*> slice_dl(cuts.size());
  std::vector<const T*> slice_lg(cuts.size());
  for (size_t k = 0; k < cuts.size(); ++k) {
    slice_dl[k] = be.Out(cuts[k].in_place ? &slice_logits[k] : &slice_grads[k]);
    slice_lg[k] = cuts[k].in_place ? slice_dl[k] : be.In(slice_logits[k]);
  }
  CrossEntropyOptions o = base;
  o.row_lse = lse_p;
  be.Run(
      [&] { return SoftmaxCrossEntropyReference(loss_p, rows_p, dl_p, lg_p, tg_p, s, o); },
      [&] { return SoftmaxCrossEntropyCpu(loss_p, rows_p, dl_p, lg_p, tg_p, s, o); },
      [&](Stream& st) { return SoftmaxCrossEntropy(st, loss_p, rows_p, dl_p, lg_p, tg_p, s, o); });
  for (size_t k = 0; k < cuts.size(); ++k) {
    const CrossEntropyShape cs{.rows = N, .vocab = cuts[k].width, .padded_vocab = cuts[k].stride};
    const int64_t c0 = cuts[k].begin;
    T* d = slice_dl[k];
    const T* x = slice_lg[k];
    be.Run(
        [&] { return SoftmaxCrossEntropyGradSliceReference(d, x, lse_p, tg_p, cs, c0, V, base); },
        [&] { return SoftmaxCrossEntropyGradSliceCpu(d, x, lse_p, tg_p, cs, c0, V, base); },
        [&](Stream& st) {
          return SoftmaxCrossEntropyGradSlice(st, d, x, lse_p, tg_p, cs, c0, V, base);
        });
  }
  be.Finish();
  std::vector<T> sliced(N * V, FromFloat<T>(7.0f)), padding;
  for (size_t k = 0; k < cuts.size(); ++k) {
    const SliceCut& c = cuts[k];
    const std::vector<T>& g = c.in_place ? slice_logits[k] : slice_grads[k];
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < c.stride; ++j) {
        if (j < c.width) {
          sliced[i * V + c.begin + j] = g[i * c.stride + j];
        } else {
          padding.push_back(g[i * c.stride + j]);
        }
      }
    }
  }
  return {AsOutput("dlogits", dlogits), AsOutput("sliced dlogits", sliced),
          AsOutput("slice padding", padding), AsOutput("row_lse", lse)};
}

// ---- comparisons ----

// Outputs stored as T may differ by the rounding of T (plus the fp32 compute
// differences, well below it): |got - ref| <= atol + k eps(T) |ref|. fp32
// outputs (statistics, parameter gradients, losses) get fp32 compute slack.
template <typename T>
void ExpectOutputsClose(const Outputs& ref, const Outputs& got, double k, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double rtol = ref[i].stored_as_t ? k * Eps<T>() : 1e-4;
    ExpectClose(ref[i].values, got[i].values, 2e-5, rtol, what + " " + ref[i].name);
  }
}

// For outputs that are sums of products which cancel (attention's output and
// gradients): an element near zero still carries the rounding of terms the
// size of the tensor's typical element, so each T-stored output's tolerance
// is k eps (|ref| + rms(ref)) rather than k eps |ref|. A wrong term or index
// errs by the typical element itself, k / eps times more than this allows.
//
// The tensor-core kernels round P and dS to T (half an eps per term, as
// flash-attention does), and the elements that sum the largest probabilities
// (a sequence's first keys and rows, over a group's heads) form the tail of
// that rounding: on the H200 at T = 4096 with 8 heads per KV head, a handful
// of 524288 elements reached 1.4x the tolerance. So up to one element in
// 10000 may exceed it, each by at most 4x: a masking or indexing bug moves a
// whole row, key or tile (at least a head's worth of elements) and fails.
template <typename T>
void ExpectSumsClose(const Outputs& ref, const Outputs& got, double k, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::string name = what + " " + ref[i].name;
    if (!ref[i].stored_as_t) {
      ExpectClose(ref[i].values, got[i].values, 2e-5, 1e-4, name);
      continue;
    }
    const std::vector<float>& r = ref[i].values;
    const std::vector<float>& g = got[i].values;
    ASSERT_EQ(r.size(), g.size()) << name;
    double squares = 0.0;
    for (float x : r) squares += static_cast<double>(x) * x;
    const double rms = r.empty() ? 0.0 : std::sqrt(squares / static_cast<double>(r.size()));
    const size_t allowed = r.size() / 10000;
    size_t over = 0;
    int reported = 0;
    for (size_t j = 0; j < r.size(); ++j) {
      const double tol = 2e-5 + k * Eps<T>() * (std::fabs(r[j]) + rms);
      const double err = std::fabs(static_cast<double>(g[j]) - r[j]);
      if (err <= tol) continue;
      ++over;
      if (!(err <= 4.0 * tol) && reported++ < 5) {
        ADD_FAILURE() << name << "[" << j << "]: ref " << r[j] << " got " << g[j] << " (tol " << tol
                      << ", 4x " << 4.0 * tol << ")";
      }
    }
    EXPECT_LE(over, allowed) << name << ": " << over << " of " << r.size()
                             << " elements beyond k eps (|ref| + rms) = " << k << " x " << Eps<T>()
                             << " x (|ref| + " << rms << ")";
  }
}

inline void ExpectOutputsIdentical(const Outputs& a, const Outputs& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ExpectBitIdentical(a[i].values, b[i].values, what + " " + a[i].name);
}

}  // namespace tierflow::testing_ops
