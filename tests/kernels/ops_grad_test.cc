// Finite-difference gradient checks of every op's backward (fp32 references):
// the analytic gradient of L = sum(w * forward(x)) must match central
// differences of L. The fast CPU backward is then checked against the
// reference in ops_fast_test.cc, so both are pinned to the math.
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

namespace tierflow {
namespace {

using testing_ops::CheckGradient;
using testing_ops::Dot;
using testing_ops::Random;

TEST(OpsGradient, EmbeddingWithPositions) {
  const EmbeddingShape s{.batch = 2, .seq_len = 5, .channels = 6, .vocab = 11};
  std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 7, 1, 3, 9, 0};
  auto wte = Random<float>(s.vocab * s.channels, 1), wpe = Random<float>(s.seq_len * s.channels, 2);
  auto w = Random<float>(s.batch * s.seq_len * s.channels, 3);
  std::vector<float> out(w.size()), dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  auto loss = [&] {
    EXPECT_TRUE(
        EmbeddingForwardReference(out.data(), tokens.data(), wte.data(), wpe.data(), s).ok());
    return Dot(w, out);
  };
  ASSERT_TRUE(
      EmbeddingBackwardReference(dwte.data(), dwpe.data(), w.data(), tokens.data(), s).ok());
  CheckGradient(&wte, dwte, loss, "dwte", wte.size());
  CheckGradient(&wpe, dwpe, loss, "dwpe", wpe.size());
}

TEST(OpsGradient, LayerNorm) {
  const NormShape s{.rows = 6, .channels = 10};
  auto x = Random<float>(60, 1, -2.0f, 2.0f), weight = Random<float>(10, 2, 0.5f, 1.5f),
       bias = Random<float>(10, 3), w = Random<float>(60, 4);
  std::vector<float> out(60), mean(6), rstd(6), dx(60, 0.0f), dw(10, 0.0f), db(10, 0.0f);
  auto loss = [&] {
    EXPECT_TRUE(LayerNormForwardReference(out.data(), mean.data(), rstd.data(), x.data(),
                                          weight.data(), bias.data(), s)
                    .ok());
    return Dot(w, out);
  };
  loss();
  ASSERT_TRUE(LayerNormBackwardReference(dx.data(), dw.data(), db.data(), w.data(), x.data(),
                                         weight.data(), mean.data(), rstd.data(), s)
                  .ok());
  CheckGradient(&x, dx, loss, "dinp");
  CheckGradient(&weight, dw, loss, "dweight");
  CheckGradient(&bias, db, loss, "dbias");
}

TEST(OpsGradient, RmsNorm) {
  const NormShape s{.rows = 5, .channels = 12};
  auto x = Random<float>(60, 5, -2.0f, 2.0f), weight = Random<float>(12, 6, 0.5f, 1.5f),
       w = Random<float>(60, 7);
  std::vector<float> out(60), rstd(5), dx(60, 0.0f), dw(12, 0.0f);
  auto loss = [&] {
    EXPECT_TRUE(RmsNormForwardReference(out.data(), rstd.data(), x.data(), weight.data(), s).ok());
    return Dot(w, out);
  };
  loss();
  ASSERT_TRUE(RmsNormBackwardReference(dx.data(), dw.data(), w.data(), x.data(), weight.data(),
                                       rstd.data(), s)
                  .ok());
  CheckGradient(&x, dx, loss, "dinp");
  CheckGradient(&weight, dw, loss, "dweight");
}

TEST(OpsGradient, RopeWithStride) {
  // k-slice of a fused qkv: 2 heads of 8 inside tokens of 40 elements.
  const RopeShape s{.batch = 2, .seq_len = 7, .heads = 2, .head_size = 8, .token_stride = 40};
  const size_t n = s.batch * s.seq_len * 40;
  auto x = Random<float>(n, 8), w = Random<float>(n, 9);
  std::vector<float> out(n, 0.0f), dx(n, 0.0f);
  auto loss = [&] {
    EXPECT_TRUE(RopeForwardReference(out.data(), x.data(), s, RopeFreq{.theta = 500.0f}).ok());
    return Dot(w, out);
  };
  ASSERT_TRUE(RopeBackwardReference(dx.data(), w.data(), s, RopeFreq{.theta = 500.0f}).ok());
  // Elements outside the slice are untouched by forward: their gradient is 0,
  // which is what dx holds there (never written).
  CheckGradient(&x, dx, loss, "dinp", 96);
}

void AttentionGradientCheck(const AttentionShape& s) {
  const size_t nq = s.batch * s.seq_len * s.qs(), nkv = s.batch * s.seq_len * s.kvs();
  const size_t no = s.batch * s.seq_len * s.heads * s.head_size;
  auto q = Random<float>(nq, 10), k = Random<float>(nkv, 11), v = Random<float>(nkv, 12);
  auto w = Random<float>(no, 13);
  std::vector<float> out(no), lse(s.batch * s.heads * s.seq_len);
  std::vector<float> dq(nq, 0.0f), dk(nkv, 0.0f), dv(nkv, 0.0f);
  auto loss = [&] {
    EXPECT_TRUE(
        AttentionForwardReference(out.data(), lse.data(), q.data(), k.data(), v.data(), s).ok());
    return Dot(w, out);
  };
  loss();
  ASSERT_TRUE(AttentionBackwardReference(dq.data(), dk.data(), dv.data(), w.data(), q.data(),
                                         k.data(), v.data(), out.data(), lse.data(), s)
                  .ok());
  CheckGradient(&q, dq, loss, "dq");
  CheckGradient(&k, dk, loss, "dk");
  CheckGradient(&v, dv, loss, "dv");
}

TEST(OpsGradient, AttentionGqa) {
  AttentionGradientCheck({.batch = 2, .seq_len = 6, .heads = 4, .kv_heads = 2, .head_size = 4});
}

TEST(OpsGradient, AttentionMqaSingleToken) {
  AttentionGradientCheck({.batch = 1, .seq_len = 1, .heads = 3, .kv_heads = 1, .head_size = 4});
}

TEST(OpsGradient, GeluTanh) {
  auto x = Random<float>(64, 14, -3.0f, 3.0f), w = Random<float>(64, 15);
  std::vector<float> out(64), dx(64);
  auto loss = [&] {
    EXPECT_TRUE(GeluForwardReference(out.data(), x.data(), 64).ok());
    return Dot(w, out);
  };
  ASSERT_TRUE(GeluBackwardReference(dx.data(), x.data(), w.data(), 64).ok());
  CheckGradient(&x, dx, loss, "dinp", 64);
}

TEST(OpsGradient, SwiGlu) {
  auto gate = Random<float>(64, 16, -3.0f, 3.0f), up = Random<float>(64, 17, -2.0f, 2.0f),
       w = Random<float>(64, 18);
  std::vector<float> out(64), dgate(64), dup(64);
  auto loss = [&] {
    EXPECT_TRUE(SwiGluForwardReference(out.data(), gate.data(), up.data(), 64).ok());
    return Dot(w, out);
  };
  ASSERT_TRUE(
      SwiGluBackwardReference(dgate.data(), dup.data(), w.data(), gate.data(), up.data(), 64).ok());
  CheckGradient(&gate, dgate, loss, "dgate", 64);
  CheckGradient(&up, dup, loss, "dup", 64);
}

TEST(OpsGradient, BiasAdd) {
  auto x = Random<float>(5 * 7, 19), bias = Random<float>(7, 20), w = Random<float>(35, 21);
  std::vector<float> out, dbias(7, 0.0f);
  auto loss = [&] {
    out = x;
    EXPECT_TRUE(BiasAddForwardReference(out.data(), bias.data(), 5, 7).ok());
    return Dot(w, out);
  };
  ASSERT_TRUE(BiasBackwardReference(dbias.data(), w.data(), 5, 7).ok());
  CheckGradient(&bias, dbias, loss, "dbias", 7);
}

TEST(OpsGradient, SoftmaxCrossEntropyWithIgnoredRows) {
  const CrossEntropyShape s{.rows = 6, .vocab = 13, .padded_vocab = 16};
  std::vector<int32_t> targets = {4, -100, 12, 0, -100, 7};
  auto logits = Random<float>(6 * 16, 22, -3.0f, 3.0f);
  std::vector<float> dlogits(logits.size()), rows(6);
  float loss_value = 0.0f;
  const CrossEntropyOptions o{.ignore_index = -100, .grad_scale = 0.5f};
  auto loss = [&] {
    float l = 0.0f;
    EXPECT_TRUE(SoftmaxCrossEntropyReference<float>(&l, rows.data(), nullptr, logits.data(),
                                                    targets.data(), s, o)
                    .ok());
    return 0.5 * l;  // grad_scale scales the gradient of the mean loss
  };
  ASSERT_TRUE(SoftmaxCrossEntropyReference(&loss_value, rows.data(), dlogits.data(), logits.data(),
                                           targets.data(), s, o)
                  .ok());
  CheckGradient(&logits, dlogits, loss, "dlogits", logits.size());
}

}  // namespace
}  // namespace tierflow
