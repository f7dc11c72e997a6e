// The fast CPU paths against the references (fp32, bf16, fp16), their
// determinism across thread counts, the CPU-device dispatch, edge cases
// (T = 1, MQA, all targets ignored, odd vocab) and argument errors.
#include <tbb/global_control.h>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "tests/kernels/ops_runners.h"

namespace tierflow {
namespace {

using namespace testing_ops;  // NOLINT: test-local helpers

template <typename T>
class OpsFastPath : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(OpsFastPath, StorageTypes);

// k = 2: a fast-path value may round to the neighbour of the reference's.
constexpr double kUlps = 2.0;

TYPED_TEST(OpsFastPath, Embedding) {
  using T = TypeParam;
  const EmbeddingShape s{.batch = 2, .seq_len = 16, .channels = 32, .vocab = 67};
  for (bool positions : {true, false}) {
    ExpectOutputsClose<T>(RunEmbedding<T>(Impl::kReference, nullptr, s, positions),
                          RunEmbedding<T>(Impl::kFast, nullptr, s, positions), kUlps, "embedding");
  }
}

TYPED_TEST(OpsFastPath, LayerNorm) {
  using T = TypeParam;
  const NormShape s{.rows = 130, .channels = 48};
  ExpectOutputsClose<T>(RunLayerNorm<T>(Impl::kReference, nullptr, s),
                        RunLayerNorm<T>(Impl::kFast, nullptr, s), kUlps, "layernorm");
}

TYPED_TEST(OpsFastPath, RmsNorm) {
  using T = TypeParam;
  const NormShape s{.rows = 130, .channels = 40};
  ExpectOutputsClose<T>(RunRmsNorm<T>(Impl::kReference, nullptr, s),
                        RunRmsNorm<T>(Impl::kFast, nullptr, s), kUlps, "rmsnorm");
}

TYPED_TEST(OpsFastPath, RopeOnAFusedQkvSlice) {
  using T = TypeParam;
  const RopeShape s{.batch = 2, .seq_len = 16, .heads = 4, .head_size = 8, .token_stride = 48};
  for (const RopeFreq& f :
       {RopeFreq{.theta = 10000.0f},
        RopeFreq{.theta = 500000.0f, .scaling = RopeScaling::kLlama3, .factor = 8.0f},
        RopeFreq{.theta = 10000.0f, .scaling = RopeScaling::kLinear, .factor = 2.0f}}) {
    ExpectOutputsClose<T>(RunRope<T>(Impl::kReference, nullptr, s, f),
                          RunRope<T>(Impl::kFast, nullptr, s, f), kUlps, "rope");
  }
}

TYPED_TEST(OpsFastPath, AttentionGqaAcrossQueryBlocks) {
  using T = TypeParam;
  // T = 70 crosses the 64-row query block; fused-qkv strides.
  const AttentionShape s{.batch = 2,
                         .seq_len = 70,
                         .heads = 4,
                         .kv_heads = 2,
                         .head_size = 8,
                         .q_stride = 64,
                         .kv_stride = 64};
  ExpectOutputsClose<T>(RunAttention<T>(Impl::kReference, nullptr, s),
                        RunAttention<T>(Impl::kFast, nullptr, s), kUlps, "attention");
}

// Packed samples: each row holds several samples; a query attends only to
// its own sample's keys. Samples start inside and across 64-row query blocks.
std::vector<int32_t> SeqStarts(const std::vector<std::vector<int>>& rows) {
  std::vector<int32_t> out;
  for (const auto& lengths : rows) {
    int start = 0;
    for (int n : lengths) {
      for (int j = 0; j < n; ++j) out.push_back(start);
      start += n;
    }
  }
  return out;
}
std::vector<int32_t> Positions(const std::vector<std::vector<int>>& rows) {
  std::vector<int32_t> out;
  for (const auto& lengths : rows) {
    for (int n : lengths) {
      for (int j = 0; j < n; ++j) out.push_back(j);
    }
  }
  return out;
}
const std::vector<std::vector<int>> kPackedRows = {{30, 40}, {10, 54, 1, 5}};  // T = 70

TYPED_TEST(OpsFastPath, AttentionWithPackedSamples) {
  using T = TypeParam;
  const AttentionShape s{.batch = 2, .seq_len = 70, .heads = 4, .kv_heads = 2, .head_size = 8};
  const std::vector<int32_t> starts = SeqStarts(kPackedRows);
  const Outputs packed = RunAttention<T>(Impl::kFast, nullptr, s, &starts);
  ExpectOutputsClose<T>(RunAttention<T>(Impl::kReference, nullptr, s, &starts), packed, kUlps,
                        "packed attention");
  // The mask takes effect: a row's later samples differ from plain causal.
  const Outputs plain = RunAttention<T>(Impl::kFast, nullptr, s);
  EXPECT_NE(plain[0].values, packed[0].values);
}

TYPED_TEST(OpsFastPath, RopeWithPackedPositions) {
  using T = TypeParam;
  const RopeShape s{.batch = 2, .seq_len = 70, .heads = 2, .head_size = 8};
  const std::vector<int32_t> positions = Positions(kPackedRows);
  const RopeFreq f{.theta = 10000.0f};
  const Outputs packed = RunRope<T>(Impl::kFast, nullptr, s, f, &positions);
  ExpectOutputsClose<T>(RunRope<T>(Impl::kReference, nullptr, s, f, &positions), packed, kUlps,
                        "packed rope");
  EXPECT_NE(RunRope<T>(Impl::kFast, nullptr, s, f)[0].values, packed[0].values);
}

TYPED_TEST(OpsFastPath, AttentionMqaSingleToken) {
  using T = TypeParam;
  const AttentionShape s{.batch = 2, .seq_len = 1, .heads = 4, .kv_heads = 1, .head_size = 16};
  ExpectOutputsClose<T>(RunAttention<T>(Impl::kReference, nullptr, s),
                        RunAttention<T>(Impl::kFast, nullptr, s), kUlps, "attention T=1 MQA");
}

TYPED_TEST(OpsFastPath, Activations) {
  using T = TypeParam;
  ExpectOutputsClose<T>(RunActivations<T>(Impl::kReference, nullptr, 5000),
                        RunActivations<T>(Impl::kFast, nullptr, 5000), kUlps, "activations");
}

TYPED_TEST(OpsFastPath, ResidualAndBias) {
  using T = TypeParam;
  ExpectOutputsClose<T>(RunPointwise<T>(Impl::kReference, nullptr, 130, 33),
                        RunPointwise<T>(Impl::kFast, nullptr, 130, 33), kUlps, "pointwise");
}

TYPED_TEST(OpsFastPath, CrossEntropyOddVocabPaddedAndInPlace) {
  using T = TypeParam;
  const CrossEntropyShape s{.rows = 32, .vocab = 67, .padded_vocab = 72};
  for (bool in_place : {false, true}) {
    ExpectOutputsClose<T>(RunCrossEntropy<T>(Impl::kReference, nullptr, s, 3, in_place),
                          RunCrossEntropy<T>(Impl::kFast, nullptr, s, 3, in_place), kUlps,
                          in_place ? "cross-entropy in place" : "cross-entropy");
  }
}

// ---- the LM head's and the embedding's gradient by vocabulary slices ----

// V = 67 in three uneven slices: the second in place with a row stride above
// its width; targets (mod 50) fall in the first two slices, none in the last.
const std::vector<SliceCut> kCuts67 = {{.begin = 0, .width = 23, .stride = 23},
                                       {.begin = 23, .width = 27, .stride = 32, .in_place = true},
                                       {.begin = 50, .width = 17, .stride = 21}};
// V = 203 (several 16-wide packets and a tail) in two slices, and whole.
const std::vector<SliceCut> kCuts203 = {{.begin = 0, .width = 150, .stride = 150},
                                        {.begin = 150, .width = 53, .stride = 64}};
const std::vector<SliceCut> kWhole203 = {{.begin = 0, .width = 203, .stride = 208}};

TYPED_TEST(OpsFastPath, CrossEntropyGradSliceAndRowLse) {
  using T = TypeParam;
  const CrossEntropyShape s{.rows = 40, .vocab = 67};
  ExpectOutputsClose<T>(RunCrossEntropyInSlices<T>(Impl::kReference, nullptr, s, kCuts67, 4, 50),
                        RunCrossEntropyInSlices<T>(Impl::kFast, nullptr, s, kCuts67, 4, 50), kUlps,
                        "cross-entropy slices");
  const CrossEntropyShape s203{.rows = 20, .vocab = 203};
  ExpectOutputsClose<T>(
      RunCrossEntropyInSlices<T>(Impl::kReference, nullptr, s203, kCuts203, 3, 203),
      RunCrossEntropyInSlices<T>(Impl::kFast, nullptr, s203, kCuts203, 3, 203), kUlps,
      "cross-entropy slices V=203");
}

// The reference's slices are its own dlogits too (within the rounding of T).
TYPED_TEST(OpsFastPath, CrossEntropyGradSliceReferenceReproducesItsDlogits) {
  using T = TypeParam;
  const Outputs out = RunCrossEntropyInSlices<T>(Impl::kReference, nullptr,
                                                 {.rows = 40, .vocab = 67}, kCuts67, 4, 50);
  ExpectClose(out[0].values, out[1].values, 1e-6, kUlps * Eps<T>(), "reference slices");
}

// The fast path's slices are its whole-vocabulary dlogits bit for bit (given
// the same logits and its row_lse), and the slices' padding columns are 0.
TYPED_TEST(OpsFastPath, CrossEntropyGradSlicesAreTheDlogitsBitForBit) {
  using T = TypeParam;
  struct Case {
    CrossEntropyShape s;
    const std::vector<SliceCut>* cuts;
    int ignore_every;
    int64_t target_mod;
  };
  const Case cases[] = {{{.rows = 40, .vocab = 67}, &kCuts67, 4, 50},
                        {{.rows = 20, .vocab = 203}, &kCuts203, 3, 203},
                        {{.rows = 20, .vocab = 203}, &kWhole203, 0, 203},
                        {{.rows = 8, .vocab = 67}, &kCuts67, 1, 50}};  // every row ignored
  for (const Case& c : cases) {
    const Outputs out = RunCrossEntropyInSlices<T>(Impl::kFast, nullptr, c.s, *c.cuts,
                                                   c.ignore_every, c.target_mod);
    const std::string what = "V=" + std::to_string(c.s.vocab) +
                             " slices=" + std::to_string(c.cuts->size()) +
                             " ignore_every=" + std::to_string(c.ignore_every);
    ExpectBitIdentical(out[0].values, out[1].values, what);
    for (float p : out[2].values) ASSERT_EQ(p, 0.0f) << what << ": slice padding";
  }
}

// row_lse changes nothing else: the loss, row losses and dlogits are the same
// bits with and without it, and it is the float the loss was computed from.
TEST(OpsFastPathCrossEntropy, RowLseIsAnExtraOutputOnly) {
  const CrossEntropyShape s{.rows = 20, .vocab = 67, .padded_vocab = 72};
  auto logits = Random<float>(s.rows * 72, 36, -4.0f, 4.0f);
  std::vector<int32_t> targets(s.rows);
  for (int64_t i = 0; i < s.rows; ++i) targets[i] = i % 5 == 0 ? -100 : (i * 7) % 67;
  std::vector<float> d1(logits.size()), d2(logits.size()), r1(s.rows), r2(s.rows), lse(s.rows);
  float l1 = 0.0f, l2 = 0.0f;
  CrossEntropyOptions o;
  ASSERT_TRUE(
      SoftmaxCrossEntropyCpu(&l1, r1.data(), d1.data(), logits.data(), targets.data(), s, o).ok());
  o.row_lse = lse.data();
  ASSERT_TRUE(
      SoftmaxCrossEntropyCpu(&l2, r2.data(), d2.data(), logits.data(), targets.data(), s, o).ok());
  EXPECT_EQ(l1, l2);
  ExpectBitIdentical(r1, r2, "row losses");
  ExpectBitIdentical(d1, d2, "dlogits");
  for (int64_t i = 0; i < s.rows; ++i) {
    if (targets[i] == -100) continue;
    EXPECT_EQ(r1[i], lse[i] - logits[i * 72 + targets[i]]) << "row " << i;
  }
}

// Three uneven ranges of wte rows (2 + 3 column tasks of 64 with C = 160;
// repeated tokens; tokens 0 and V-1 used).
const std::vector<std::pair<int64_t, int64_t>> kRowRanges = {{0, 20}, {20, 27}, {47, 20}};
const EmbeddingShape kRangeShape{.batch = 3, .seq_len = 20, .channels = 160, .vocab = 67};

TYPED_TEST(OpsFastPath, EmbeddingBackwardRowRangesMatchTheReference) {
  using T = TypeParam;
  ExpectOutputsClose<T>(
      RunEmbeddingBackwardRanges<T>(Impl::kReference, nullptr, kRangeShape, kRowRanges),
      RunEmbeddingBackwardRanges<T>(Impl::kFast, nullptr, kRangeShape, kRowRanges), kUlps,
      "embedding row ranges");
}

TYPED_TEST(OpsFastPath, EmbeddingBackwardRowRangesAreTheWholeGradientBitForBit) {
  using T = TypeParam;
  for (Impl impl : {Impl::kReference, Impl::kFast}) {
    const Outputs out = RunEmbeddingBackwardRanges<T>(impl, nullptr, kRangeShape, kRowRanges);
    const std::string what = impl == Impl::kFast ? "fast" : "reference";
    ExpectBitIdentical(out[0].values, out[1].values, what + " dwte by ranges");
    ExpectBitIdentical(out[2].values, out[3].values, what + " dwpe alone");
  }
  // The whole range named explicitly, and grad_rows = 0 (all), are the plain call.
  const Outputs whole = RunEmbeddingBackwardRanges<T>(Impl::kFast, nullptr, kRangeShape, {{0, 67}});
  ExpectBitIdentical(whole[0].values, whole[1].values, "explicit whole range");
  const Outputs all = RunEmbeddingBackwardRanges<T>(Impl::kFast, nullptr, kRangeShape, {{0, 0}});
  ExpectBitIdentical(all[0].values, all[1].values, "grad_rows = 0");
}

// ---- determinism: bit-identical results with 1 and 2 threads ----

template <typename F>
void ExpectSameBitsForThreadCounts(F run, const std::string& what) {
  Outputs one, two;
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
    one = run();
  }
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
    two = run();
  }
  ExpectOutputsIdentical(one, two, what);
}

TEST(OpsDeterminism, FastPathsAreBitIdenticalForOneAndTwoThreads) {
  ExpectSameBitsForThreadCounts(
      [] {
        return RunEmbedding<float>(Impl::kFast, nullptr,
                                   {.batch = 4, .seq_len = 40, .channels = 160, .vocab = 67}, true);
      },
      "embedding");
  ExpectSameBitsForThreadCounts(
      [] { return RunLayerNorm<float>(Impl::kFast, nullptr, {.rows = 300, .channels = 40}); },
      "layernorm");
  ExpectSameBitsForThreadCounts(
      [] { return RunRmsNorm<float>(Impl::kFast, nullptr, {.rows = 300, .channels = 40}); },
      "rmsnorm");
  ExpectSameBitsForThreadCounts(
      [] {
        return RunAttention<float>(
            Impl::kFast, nullptr,
            {.batch = 2, .seq_len = 130, .heads = 4, .kv_heads = 2, .head_size = 8});
      },
      "attention");
  ExpectSameBitsForThreadCounts([] { return RunPointwise<float>(Impl::kFast, nullptr, 300, 40); },
                                "pointwise");
  ExpectSameBitsForThreadCounts(
      [] {
        return RunCrossEntropy<float>(Impl::kFast, nullptr, {.rows = 100, .vocab = 67}, 5, false);
      },
      "cross-entropy");
  ExpectSameBitsForThreadCounts(
      [] {
        return RunCrossEntropyInSlices<float>(Impl::kFast, nullptr, {.rows = 40, .vocab = 67},
                                              kCuts67, 4, 50);
      },
      "cross-entropy slices");
  ExpectSameBitsForThreadCounts(
      [] {
        return RunEmbeddingBackwardRanges<bf16>(Impl::kFast, nullptr, kRangeShape, kRowRanges);
      },
      "embedding row ranges");
}

// ---- the dispatching entry points on the CPU device ----

std::unique_ptr<Device> MakeCpuDevice() {
  DeviceOptions o;
  o.kind = DeviceChoice::kCpu;
  o.memory_capacity_bytes = 64ull << 20;
  auto d = CreateDevice(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

TEST(OpsCpuDevice, StreamEntryPointsRunTheFastPath) {
  auto dev = MakeCpuDevice();
  Device* d = dev.get();
  const EmbeddingShape es{.batch = 2, .seq_len = 16, .channels = 32, .vocab = 67};
  ExpectOutputsIdentical(RunEmbedding<bf16>(Impl::kFast, nullptr, es, true),
                         RunEmbedding<bf16>(Impl::kDevice, d, es, true), "embedding");
  ExpectOutputsIdentical(RunLayerNorm<bf16>(Impl::kFast, nullptr, {.rows = 32, .channels = 32}),
                         RunLayerNorm<bf16>(Impl::kDevice, d, {.rows = 32, .channels = 32}),
                         "layernorm");
  ExpectOutputsIdentical(RunRmsNorm<float>(Impl::kFast, nullptr, {.rows = 32, .channels = 32}),
                         RunRmsNorm<float>(Impl::kDevice, d, {.rows = 32, .channels = 32}),
                         "rmsnorm");
  const RopeShape rs{.batch = 2, .seq_len = 16, .heads = 2, .head_size = 16};
  ExpectOutputsIdentical(RunRope<float>(Impl::kFast, nullptr, rs, RopeFreq{.theta = 10000.0f}),
                         RunRope<float>(Impl::kDevice, d, rs, RopeFreq{.theta = 10000.0f}), "rope");
  const AttentionShape as{.batch = 2, .seq_len = 16, .heads = 4, .kv_heads = 1, .head_size = 8};
  ExpectOutputsIdentical(RunAttention<bf16>(Impl::kFast, nullptr, as),
                         RunAttention<bf16>(Impl::kDevice, d, as), "attention");
  ExpectOutputsIdentical(RunActivations<float>(Impl::kFast, nullptr, 1000),
                         RunActivations<float>(Impl::kDevice, d, 1000), "activations");
  ExpectOutputsIdentical(RunPointwise<fp16>(Impl::kFast, nullptr, 32, 32),
                         RunPointwise<fp16>(Impl::kDevice, d, 32, 32), "pointwise");
  const CrossEntropyShape cs{.rows = 32, .vocab = 67};
  ExpectOutputsIdentical(RunCrossEntropy<float>(Impl::kFast, nullptr, cs, 4, false),
                         RunCrossEntropy<float>(Impl::kDevice, d, cs, 4, false), "cross-entropy");
  ExpectOutputsIdentical(
      RunCrossEntropyInSlices<bf16>(Impl::kFast, nullptr, {.rows = 40, .vocab = 67}, kCuts67, 4,
                                    50),
      RunCrossEntropyInSlices<bf16>(Impl::kDevice, d, {.rows = 40, .vocab = 67}, kCuts67, 4, 50),
      "cross-entropy slices");
  ExpectOutputsIdentical(
      RunEmbeddingBackwardRanges<float>(Impl::kFast, nullptr, kRangeShape, kRowRanges),
      RunEmbeddingBackwardRanges<float>(Impl::kDevice, d, kRangeShape, kRowRanges),
      "embedding row ranges");
}

// ---- edge cases ----

TEST(OpsEdgeCases, AllTargetsIgnoredGivesZeroLossAndZeroGradients) {
  const CrossEntropyShape s{.rows = 8, .vocab = 67};
  for (Impl impl : {Impl::kReference, Impl::kFast}) {
    Outputs out = RunCrossEntropy<float>(impl, nullptr, s, 1, false);
    EXPECT_EQ(out[0].values[0], 0.0f);
    for (float r : out[1].values) EXPECT_EQ(r, 0.0f);
    for (float g : out[2].values) ASSERT_EQ(g, 0.0f);
  }
}

TEST(OpsEdgeCases, CustomIgnoreIndexIsHonoured) {
  const CrossEntropyShape s{.rows = 9, .vocab = 13};
  Outputs out = RunCrossEntropy<float>(Impl::kFast, nullptr, s, 3, false, /*ignore_index=*/0);
  for (int64_t i = 0; i < s.rows; i += 3) {
    EXPECT_EQ(out[1].values[i], 0.0f);
    for (int64_t v = 0; v < s.vocab; ++v) EXPECT_EQ(out[2].values[i * s.vocab + v], 0.0f);
  }
  EXPECT_GT(out[0].values[0], 0.0f);
}

TEST(OpsEdgeCases, DlogitsRowsSumToZeroAndPaddingIsZero) {
  const CrossEntropyShape s{.rows = 6, .vocab = 67, .padded_vocab = 80};
  Outputs out = RunCrossEntropy<float>(Impl::kFast, nullptr, s, 0, false);
  for (int64_t i = 0; i < s.rows; ++i) {
    double sum = 0.0;
    for (int64_t v = 0; v < s.vocab; ++v) sum += out[2].values[i * 80 + v];
    EXPECT_NEAR(sum, 0.0, 1e-6);
    for (int64_t v = s.vocab; v < 80; ++v) EXPECT_EQ(out[2].values[i * 80 + v], 0.0f);
  }
}

TEST(OpsEdgeCases, SingleTokenAttentionReturnsTheValue) {
  // With one key the softmax is 1: out = v and lse = q . k * scale.
  const AttentionShape s{.batch = 1, .seq_len = 1, .heads = 2, .kv_heads = 1, .head_size = 4};
  std::vector<float> q = {1, 2, 3, 4, -1, 0, 1, 0}, k = {0.5f, 0.5f, 0.5f, 0.5f}, v = {9, 8, 7, 6},
                     out(8), lse(2);
  ASSERT_TRUE(AttentionForwardCpu(out.data(), lse.data(), q.data(), k.data(), v.data(), s).ok());
  for (int h = 0; h < 2; ++h) {
    for (int d = 0; d < 4; ++d) EXPECT_EQ(out[h * 4 + d], v[d]);
  }
  EXPECT_NEAR(lse[0], 5.0f * 0.5f, 1e-6);
  EXPECT_NEAR(lse[1], 0.0f, 1e-6);
}

TEST(OpsEdgeCases, RopeAtPositionZeroIsIdentityAndBackwardInvertsForward) {
  const RopeShape s{.batch = 1, .seq_len = 5, .heads = 3, .head_size = 8};
  auto x = Random<float>(5 * 24, 41);
  std::vector<float> y(x.size()), back(x.size());
  ASSERT_TRUE(RopeForwardCpu(y.data(), x.data(), s).ok());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(y[i], x[i]);
  ASSERT_TRUE(RopeBackwardCpu(back.data(), y.data(), s).ok());  // R^T R = I
  ExpectClose(x, back, 1e-6, 1e-6, "rope round trip");
}

// ---- argument errors ----

TEST(OpsErrors, BadShapesAndInputsAreInvalidArgument) {
  std::vector<float> buf(1024, 0.0f);
  float* p = buf.data();
  auto expect_invalid = [](const Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  expect_invalid(
      AttentionForwardCpu(p, p, p, p, p,
                          {.batch = 1, .seq_len = 4, .heads = 4, .kv_heads = 3, .head_size = 4}),
      "does not divide");
  expect_invalid(RopeForwardCpu(p, p, {.batch = 1, .seq_len = 2, .heads = 1, .head_size = 5}),
                 "odd");
  expect_invalid(LayerNormForwardCpu(p, p, p, p, p, p, {.rows = 0, .channels = 4}), "rows");
  std::vector<int32_t> tokens = {1, 67};
  expect_invalid(EmbeddingForwardCpu(p, tokens.data(), p, static_cast<float*>(nullptr),
                                     {.batch = 1, .seq_len = 2, .channels = 4, .vocab = 67}),
                 "token 67");
  std::vector<int32_t> targets = {-100, 13};
  float loss = 0.0f;
  expect_invalid(SoftmaxCrossEntropyCpu(&loss, p, p, p, targets.data(), {.rows = 2, .vocab = 13}),
                 "target 13");
  expect_invalid(SoftmaxCrossEntropyCpu(&loss, p, p, p, targets.data(),
                                        {.rows = 2, .vocab = 13, .padded_vocab = 8}),
                 "padded_vocab");
}

TEST(OpsErrors, SliceAndRowRangeArgumentsAreRefusedNamingTheProblem) {
  std::vector<float> buf(4096, 0.0f);
  float* p = buf.data();
  auto expect_invalid = [](const Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  // The gradient slice: 2 rows of 13 columns out of a vocabulary of 67.
  std::vector<int32_t> targets = {-100, 66}, bad = {3, 67};
  const int32_t* t = targets.data();
  const CrossEntropyShape s{.rows = 2, .vocab = 13};
  EXPECT_TRUE(SoftmaxCrossEntropyGradSliceCpu(p, p, p, t, s, 54, 67).ok());
  EXPECT_TRUE(SoftmaxCrossEntropyGradSliceReference(p, p, p, t, s, 54, 67).ok());
  for (int which = 0; which < 2; ++which) {
    auto run = [&](const CrossEntropyShape& cs, int64_t c0, int64_t full, const int32_t* tg,
                   const float* lse) {
      return which == 0 ? SoftmaxCrossEntropyGradSliceCpu(p, p, lse, tg, cs, c0, full)
                        : SoftmaxCrossEntropyGradSliceReference(p, p, lse, tg, cs, c0, full);
    };
    const std::string op =
        which == 0 ? "SoftmaxCrossEntropyGradSliceCpu" : "SoftmaxCrossEntropyGradSliceReference";
    expect_invalid(run(s, -1, 67, t, p), op + ": col_begin -1 < 0");
    expect_invalid(run(s, 55, 67, t, p), "[55, 68) (col_begin + width) ends past full_vocab 67");
    expect_invalid(run({.rows = 2, .vocab = 0}, 0, 67, t, p), "vocab must be > 0");
    expect_invalid(run({.rows = 2, .vocab = 13, .padded_vocab = 12}, 0, 67, t, p), "padded_vocab");
    expect_invalid(run(s, 0, 67, bad.data(), p), "target 67 of row 1 is outside [0, 67)");
    expect_invalid(run(s, 0, 67, t, nullptr), op + ": row_lse is null");
  }
  auto dev = MakeCpuDevice();
  auto stream = std::move(dev->CreateStream("errors")).value();
  expect_invalid(SoftmaxCrossEntropyGradSlice(*stream, p, p, p, t, s, 60, 67),
                 "SoftmaxCrossEntropyGradSlice: the slice [60, 73)");

  // The embedding's gradient rows: V = 10.
  std::vector<int32_t> tokens = {1, 9};
  const EmbeddingShape es{.batch = 1, .seq_len = 2, .channels = 4, .vocab = 10};
  auto with_range = [&](int64_t begin, int64_t n) {
    EmbeddingShape r = es;
    r.grad_row_begin = begin;
    r.grad_rows = n;
    return r;
  };
  EXPECT_TRUE(EmbeddingBackwardCpu(p, p, p, tokens.data(), with_range(4, 6)).ok());
  EXPECT_TRUE(EmbeddingBackwardReference(p, p, p, tokens.data(), with_range(0, 3)).ok());
  for (int which = 0; which < 2; ++which) {
    auto run = [&](float* dwte, float* dwpe, const EmbeddingShape& r) {
      return which == 0 ? EmbeddingBackwardCpu(dwte, dwpe, p, tokens.data(), r)
                        : EmbeddingBackwardReference(dwte, dwpe, p, tokens.data(), r);
    };
    expect_invalid(run(p, p, with_range(-1, 3)), "grad_row_begin -1 < 0");
    expect_invalid(run(p, p, with_range(0, -2)), "grad_rows -2 < 0");
    expect_invalid(run(p, p, with_range(8, 3)), "gradient rows [8, 11)");
    expect_invalid(run(p, p, with_range(8, 3)), "end past vocab 10");
    expect_invalid(run(p, p, with_range(1, 0)), "gradient rows [1, 11)");  // 0 = all V rows
    expect_invalid(run(nullptr, nullptr, es), "dwte and dwpe are both null");
  }
  expect_invalid(EmbeddingBackward(*stream, p, p, p, tokens.data(), with_range(0, 11)),
                 "EmbeddingBackward: gradient rows [0, 11)");
}

// The device tests run the backward of both implementations from one
// forward's out and lse (RunAttention's backward_from): given, they are what
// the backward reads, and the forward outputs returned stay the run's own.
TEST(OpsFastPathAttention, BackwardRunsFromTheGivenForward) {
  const AttentionShape s{.batch = 2, .seq_len = 40, .heads = 4, .kv_heads = 2, .head_size = 16};
  const Outputs fast = RunAttention<bf16>(Impl::kFast, nullptr, s);
  ExpectOutputsIdentical(fast, RunAttention<bf16>(Impl::kFast, nullptr, s, nullptr, &fast),
                         "the same forward given");
  Outputs doubled = fast;  // out x 2 (exact in bf16): D = dout . out doubles
  for (float& x : doubled[0].values) x *= 2.0f;
  const Outputs moved = RunAttention<bf16>(Impl::kFast, nullptr, s, nullptr, &doubled);
  EXPECT_EQ(moved[0].values, fast[0].values);  // this run's own forward
  EXPECT_NE(moved[2].values, fast[2].values);  // dq from the doubled out
}

// ExpectSumsClose lets rounding's tail through, never a wrong row: one query
// row of one head off by a tenth of the tensor's largest element fails it.
TEST(OpsFastPathAttention, SumsCloseFailsOneWrongRow) {
  const AttentionShape s{.batch = 2, .seq_len = 40, .heads = 4, .kv_heads = 2, .head_size = 16};
  const Outputs fast = RunAttention<bf16>(Impl::kFast, nullptr, s);
  ExpectSumsClose<bf16>(fast, fast, 4.0, "itself");
  Outputs wrong = fast;
  std::vector<float>& dq = wrong[2].values;
  ASSERT_EQ(wrong[2].name, "dq");
  float largest = 0.0f;
  for (float x : dq) largest = std::max(largest, std::fabs(x));
  for (int64_t c = 0; c < s.head_size; ++c) dq[37 * s.heads * s.head_size + c] += 0.1f * largest;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    ExpectSumsClose<bf16>(fast, wrong, 4.0, "one row");
  }
  ASSERT_GE(failures.size(), 1);
  for (int i = 0; i < failures.size(); ++i) {
    EXPECT_NE(std::string(failures.GetTestPartResult(i).message()).find("one row dq"),
              std::string::npos)
        << failures.GetTestPartResult(i).message();
  }
}

}  // namespace
}  // namespace tierflow
