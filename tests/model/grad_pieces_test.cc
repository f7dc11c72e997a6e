// Gradient pieces: the plan (merging, refusals) and the transformer streaming
// its units in pieces no larger than the bucket: blocks cut between tensors
// give bit-identical gradients; vocabulary slices of the embedding and LM
// head match the whole-unit gradients within fp32 rounding, are
// deterministic, and cover every parameter exactly once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/grad_pieces.h"
#include "model/transformer.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

using model_internal::GradOp;
using model_internal::GradPiece;
using model_internal::PlanGradPieces;
using testing_util::DirectUnitAccess;
using testing_util::InitialFlat;
using testing_util::MakeCpuDevice;
using testing_util::RandomTokens;

// ---- the plan ----

// Layout [a 10][b 20][c 5][d 30]; backward writes d, c, a, b.
std::vector<GradOp> FourOps() {
  return {GradOp{35, 30, -1, 0}, GradOp{30, 5, -1, 0}, GradOp{0, 10, -1, 0}, GradOp{10, 18, 28, 2}};
}

TEST(PlanGradPieces, MergesConsecutiveOpsThatCoverOneRangeWithinTheCapacity) {
  auto whole = PlanGradPieces("u", 65, FourOps(), 65);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  // d, c, a, b together cover the unit: one piece.
  ASSERT_EQ(whole->size(), 1u);
  EXPECT_EQ((*whole)[0].begin, 0);
  EXPECT_EQ((*whole)[0].end, 65);
  EXPECT_EQ((*whole)[0].last_op, 3u);
  // d + c = [30, 65); with a, [0, 10) + [30, 65) has a hole until b comes.
  auto mid = PlanGradPieces("u", 65, FourOps(), 40);
  ASSERT_TRUE(mid.ok());
  ASSERT_EQ(mid->size(), 2u);
  EXPECT_EQ((*mid)[0].begin, 30);
  EXPECT_EQ((*mid)[0].last_op, 1u);
  EXPECT_EQ((*mid)[1].begin, 0);
  EXPECT_EQ((*mid)[1].end, 30);

  auto tight = PlanGradPieces("u", 65, FourOps(), 30);
  ASSERT_TRUE(tight.ok());
  ASSERT_EQ(tight->size(), 3u);  // d | c ... c+a not adjacent | a+b = 30
  EXPECT_EQ((*tight)[0].end - (*tight)[0].begin, 30);
  EXPECT_EQ((*tight)[1].begin, 30);
  EXPECT_EQ((*tight)[1].end, 35);
  EXPECT_EQ((*tight)[2].begin, 0);
  EXPECT_EQ((*tight)[2].end, 30);
}

TEST(PlanGradPieces, RefusesAnOpAboveTheCapacityAndBadCoverage) {
  auto small = PlanGradPieces("layers.0", 65, FourOps(), 29);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("layers.0"), std::string::npos);
  EXPECT_NE(small.status().message().find("use larger buckets"), std::string::npos);

  std::vector<GradOp> gap = FourOps();
  gap.pop_back();  // b missing
  EXPECT_FALSE(PlanGradPieces("u", 65, gap, 100).ok());
  std::vector<GradOp> overlap = FourOps();
  overlap.push_back(GradOp{0, 10, -1, 0});
  EXPECT_FALSE(PlanGradPieces("u", 65, overlap, 100).ok());
  std::vector<GradOp> split_bias = FourOps();
  split_bias[3].b = 40;  // a bias not right after its weight
  EXPECT_FALSE(PlanGradPieces("u", 65, split_bias, 100).ok());
}

// ---- the transformer in pieces ----

// The tiny families with a vocabulary large enough to slice (97 rows).
ModelConfig WithVocab(ModelConfig c, int64_t vocab) {
  c.vocab_size = vocab;
  c.name += "-v" + std::to_string(vocab);
  return c;
}

// The largest gradient one kernel writes: the smallest capacity there is.
uint64_t LargestOp(const TransformerModel& model) {
  const ParamLayout& l = model.layout();
  uint64_t largest = static_cast<uint64_t>(l.config.d_model);
  for (size_t u = 0; u < l.tensors.size(); ++u) {
    for (const TensorSlot& t : l.tensors[u]) {
      const bool vocab = t.tensor.shape.size() == 2 && t.tensor.shape[0] == l.config.vocab_size;
      if (vocab) continue;
      uint64_t n = static_cast<uint64_t>(t.tensor.num_elements);
      if (!t.tensor.name.ends_with(".bias")) {
        const std::string bias = t.tensor.name.substr(0, t.tensor.name.size() - 6) + "bias";
        if (const TensorSlot* b = l.Find(bias)) n += static_cast<uint64_t>(b->tensor.num_elements);
      }
      largest = std::max(largest, n);
    }
  }
  return largest;
}

struct PieceRun {
  float loss = 0;
  std::vector<float> grads;
  std::vector<DirectUnitAccess::Piece> pieces;
  std::vector<uint64_t> covered;
  int max_open = 0;
};

PieceRun RunWithCapacity(const ModelConfig& config, DType dtype, uint64_t capacity) {
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  TrainShape shape{.batch = 2, .seq_len = 6, .checkpoint_activations = false, .dtype = dtype};
  // Small head chunks: several row chunks in both passes.
  shape.head_chunk_logits = 3 * config.vocab_size;
  shape.head_chunk_min_rows = 1;
  auto model = TransformerModel::Create(*device, config, shape).value();
  DirectUnitAccess access(*device, *stream, model->Units(), dtype);
  access.set_capacity(capacity);
  std::vector<float> flat = InitialFlat(*model);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] += 0.01f * static_cast<float>(i % 7);
  EXPECT_TRUE(access.SetWeights(flat).ok());
  // The batch outlives the stream's work (its copies are asynchronous).
  const testing_util::TokenBatch tokens =
      RandomTokens(2, 6, static_cast<int>(config.vocab_size), 11);
  Status s = model->ForwardBackward(*stream, tokens.micro(), 0.5f, access);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Status synced = stream->Synchronize();
  EXPECT_TRUE(synced.ok()) << synced.ToString();
  PieceRun r;
  r.loss = model->LastLoss().value();
  r.grads = access.ReadGrads().value();
  r.pieces = access.pieces();
  r.covered = access.covered();
  r.max_open = access.max_open();
  // Every unit covered exactly once, by pieces within the capacity.
  for (size_t u = 0; u < r.covered.size(); ++u) {
    EXPECT_EQ(r.covered[u], model->Units()[u].num_params) << "unit " << u;
  }
  for (const auto& p : r.pieces) EXPECT_LE(p.count, capacity);
  return r;
}

class TransformerPiecesTest : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(TransformerPiecesTest, BlocksCutBetweenTensorsGiveIdenticalGradients) {
  const ModelConfig config = GetParam();
  auto device = MakeCpuDevice();
  auto probe = TransformerModel::Create(*device, config, {.batch = 2, .seq_len = 6}).value();
  // Room for the embedding and head units whole, not for a block.
  uint64_t capacity = LargestOp(*probe);
  const ParamLayout& l = probe->layout();
  capacity = std::max<uint64_t>(capacity, l.units[l.embedding_unit()].num_params);
  capacity = std::max<uint64_t>(capacity, l.units[l.head_unit()].num_params);
  ASSERT_LT(capacity, l.units[l.layer_unit(0)].num_params) << "the test needs blocks to be cut";
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const PieceRun whole = RunWithCapacity(config, dtype, UINT64_MAX);
    const PieceRun cut = RunWithCapacity(config, dtype, capacity);
    EXPECT_EQ(whole.pieces.size(), l.units.size());
    EXPECT_GT(cut.pieces.size(), whole.pieces.size());
    EXPECT_EQ(whole.loss, cut.loss);
    ASSERT_EQ(whole.grads.size(), cut.grads.size());
    EXPECT_EQ(0, std::memcmp(whole.grads.data(), cut.grads.data(), whole.grads.size() * 4))
        << config.name << " " << DTypeName(dtype);
  }
}

TEST_P(TransformerPiecesTest, VocabularySlicesMatchWholeUnitsAndAreDeterministic) {
  const ModelConfig config = WithVocab(GetParam(), 97);
  auto device = MakeCpuDevice();
  auto probe = TransformerModel::Create(*device, config, {.batch = 2, .seq_len = 6}).value();
  const ParamLayout& l = probe->layout();
  const uint64_t least = LargestOp(*probe);
  ASSERT_LT(least, static_cast<uint64_t>(config.vocab_size * config.d_model));
  // The least capacity, and one cutting the vocabulary into uneven slices.
  for (uint64_t capacity : {least, least + 3 * static_cast<uint64_t>(config.d_model) + 5}) {
    const PieceRun whole = RunWithCapacity(config, DType::kF32, UINT64_MAX);
    const PieceRun cut = RunWithCapacity(config, DType::kF32, capacity);
    // The loss comes from the same first pass.
    EXPECT_EQ(whole.loss, cut.loss);
    ASSERT_EQ(whole.grads.size(), cut.grads.size());
    double worst = 0;
    for (size_t i = 0; i < whole.grads.size(); ++i) {
      const double diff = std::fabs(double{whole.grads[i]} - cut.grads[i]);
      const double scale = 1e-6 + 1e-4 * std::fabs(double{whole.grads[i]});
      worst = std::max(worst, diff / scale);
    }
    EXPECT_LE(worst, 1.0) << config.name << " capacity " << capacity;
    // The vocabulary matrices came in several pieces of one unit each.
    int head_or_emb_pieces = 0;
    for (const auto& p : cut.pieces) {
      if (p.unit == l.embedding_unit() || p.unit == l.head_unit()) ++head_or_emb_pieces;
    }
    EXPECT_GT(head_or_emb_pieces, 3);
    EXPECT_LE(cut.max_open, 2);
  }
  // bf16: two runs agree bit for bit.
  const PieceRun a = RunWithCapacity(config, DType::kBF16, least);
  const PieceRun b = RunWithCapacity(config, DType::kBF16, least);
  EXPECT_EQ(0, std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4));
}

TEST_P(TransformerPiecesTest, RefusesBucketsSmallerThanATensor) {
  const ModelConfig config = GetParam();
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  auto model = TransformerModel::Create(*device, config, {.batch = 2, .seq_len = 6}).value();
  DirectUnitAccess access(*device, *stream, model->Units(), DType::kBF16);
  access.set_capacity(LargestOp(*model) - 1);
  const testing_util::TokenBatch tokens = RandomTokens(2, 6, 23, 3);
  Status s = model->ForwardBackward(*stream, tokens.micro(), 1.0f, access);
  (void)stream->Synchronize();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("larger buckets"), std::string::npos) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(Families, TransformerPiecesTest,
                         ::testing::Values(testing_util::TinyGpt2(), testing_util::TinyLlama(),
                                           testing_util::TinyQwenTied()),
                         [](const ::testing::TestParamInfo<ModelConfig>& info) {
                           std::string name = info.param.name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tierflow
