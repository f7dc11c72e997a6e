// The sequence-tiled MLP (TrainShape::mlp_tile_rows): on the CPU device a
// tiled run gives the same loss and gradients, bit for bit, as the untiled
// one (row-wise ops, and the GEMMs' k panels: kGemmCpuKPanel), with and
// without checkpointing, plain and packed rows, bf16 and fp32; its MLP
// buffers are (tile, F); Create refuses a tile off the panel, and backward a
// bucket that cannot hold a block's MLP weights.
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/gemm.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

using testing_util::DirectUnitAccess;
using testing_util::MakeCpuDevice;
using testing_util::RandomTokens;
using testing_util::RunForwardBackward;
using testing_util::RunResult;
using testing_util::TinyGpt2;
using testing_util::TinyLlama;

constexpr int kBatch = 2, kSeqLen = 300;  // N = 600: tiles of 256 leave 88, of 512 leave 88

ModelConfig Long(ModelConfig c) {
  c.max_seq_len = 512;
  return c;
}

// Seeded weights, jittered so that norms and biases are not all 1 and 0.
std::vector<float> Weights(TransformerModel& model) {
  std::vector<float> w = testing_util::InitialFlat(model);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> jitter(-0.05f, 0.05f);
  for (float& x : w) x += jitter(rng);
  return w;
}

// Positions of samples of 100, 150 and 50 tokens packed into each row.
std::vector<int32_t> PackedPositions() {
  std::vector<int32_t> pos;
  for (int r = 0; r < kBatch; ++r) {
    for (int len : {100, 150, 50}) {
      for (int t = 0; t < len; ++t) pos.push_back(t);
    }
  }
  return pos;
}

StatusOr<RunResult> RunTiled(const ModelConfig& config, DType dtype, bool ckpt, bool packed,
                             int64_t tile, uint64_t capacity = UINT64_MAX) {
  auto device = MakeCpuDevice();
  TF_ASSIGN_OR_RETURN(auto stream, device->CreateStream("compute"));
  TrainShape shape{
      .batch = kBatch, .seq_len = kSeqLen, .checkpoint_activations = ckpt, .dtype = dtype};
  shape.mlp_tile_rows = tile;
  TF_ASSIGN_OR_RETURN(auto model, TransformerModel::Create(*device, config, shape));
  DirectUnitAccess access(*device, *stream, model->Units(), dtype);
  access.set_capacity(capacity);
  TF_RETURN_IF_ERROR(access.SetWeights(Weights(*model)));
  const testing_util::TokenBatch tb = RandomTokens(kBatch, kSeqLen, 23, 11);
  MicroBatch mb = tb.micro();
  const std::vector<int32_t> positions = PackedPositions();
  if (packed) mb.positions = positions.data();
  StatusOr<RunResult> r = RunForwardBackward(*model, access, *stream, mb, 0.5f);
  // A failed step may leave kernels queued on the buffers freed below.
  if (!r.ok()) static_cast<void>(stream->Synchronize());
  return r;
}

struct TileCase {
  ModelConfig config;
  bool packed;
};

void PrintTo(const TileCase& c, std::ostream* os) {
  *os << c.config.name << (c.packed ? " packed" : "");
}

class MlpTile : public ::testing::TestWithParam<TileCase> {};

TEST_P(MlpTile, TiledRunIsBitIdenticalToUntiled) {
  const TileCase& c = GetParam();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool ckpt : {false, true}) {
      auto base = RunTiled(c.config, dtype, ckpt, c.packed, 0);
      ASSERT_TRUE(base.ok()) << base.status().ToString();
      for (int64_t tile : {kGemmCpuKPanel, 2 * kGemmCpuKPanel}) {
        SCOPED_TRACE(std::string(DTypeName(dtype)) + (ckpt ? " checkpointed" : "") + " tile " +
                     std::to_string(tile));
        auto tiled = RunTiled(c.config, dtype, ckpt, c.packed, tile);
        ASSERT_TRUE(tiled.ok()) << tiled.status().ToString();
        EXPECT_EQ(std::bit_cast<uint32_t>(base->loss), std::bit_cast<uint32_t>(tiled->loss))
            << base->loss << " vs " << tiled->loss;
        ASSERT_EQ(base->grads.size(), tiled->grads.size());
        EXPECT_EQ(0, std::memcmp(base->grads.data(), tiled->grads.data(),
                                 base->grads.size() * sizeof(float)));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, MlpTile,
    ::testing::Values(TileCase{Long(TinyLlama()), false}, TileCase{Long(TinyLlama()), true},
                      TileCase{Long(TinyGpt2()), false}),
    [](const ::testing::TestParamInfo<TileCase>& info) {
      return std::string(info.param.config.family == ModelFamily::kGpt2 ? "gpt2" : "llama") +
             (info.param.packed ? "_packed" : "");
    });

// Buckets that hold a block's MLP weights but not the whole block: the MLP is
// one piece and the rest of the block is cut as before, with the same bits.
// Smaller buckets are refused, naming the field.
// (Llama: GPT-2's position embeddings need larger buckets than its MLP.)
TEST(MlpTilePieces, MlpWeightsAreOneGradientPiece) {
  const TileCase c{Long(TinyLlama()), true};
  TrainShape shape{.batch = kBatch, .seq_len = kSeqLen, .dtype = DType::kF32};
  auto device = MakeCpuDevice();
  auto model = TransformerModel::Create(*device, c.config, shape).value();
  const LayerOffsets& o = model->layout().layer;
  const uint64_t mlp = model->layout().units[1].num_params -
                       static_cast<uint64_t>(o.gate_w >= 0 ? o.gate_w : o.fc_w);
  auto base = RunTiled(c.config, DType::kF32, false, c.packed, 0, mlp);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  auto tiled = RunTiled(c.config, DType::kF32, false, c.packed, kGemmCpuKPanel, mlp);
  ASSERT_TRUE(tiled.ok()) << tiled.status().ToString();
  EXPECT_EQ(0, std::memcmp(base->grads.data(), tiled->grads.data(), base->grads.size() * 4));
  auto small = RunTiled(c.config, DType::kF32, false, c.packed, kGemmCpuKPanel, mlp - 1);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("mlp_tile_rows"), std::string::npos)
      << small.status().ToString();
}

TEST(MlpTileShape, CreateRefusesATileOffThePanelAndShrinksTheMlpBuffers) {
  auto device = MakeCpuDevice();
  for (int64_t bad : {int64_t{-kGemmCpuKPanel}, kGemmCpuKPanel + 64, int64_t{100}}) {
    TrainShape shape{.batch = kBatch, .seq_len = kSeqLen};
    shape.mlp_tile_rows = bad;
    auto model = TransformerModel::Create(*device, Long(TinyLlama()), shape);
    ASSERT_FALSE(model.ok()) << bad;
    EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(model.status().message().find("mlp_tile_rows"), std::string::npos);
  }
  const ModelConfig config = Long(TinyLlama());
  TrainShape untiled{.batch = kBatch, .seq_len = kSeqLen};
  TrainShape tiled = untiled;
  tiled.mlp_tile_rows = kGemmCpuKPanel;
  // Untiled: 2 blocks x 3 (N, F) saved and 3 (N, F) gradients; tiled: 6 (R, F).
  const uint64_t es = 2, N = kBatch * kSeqLen, R = kGemmCpuKPanel, F = config.d_ff;
  auto buf = [](uint64_t b) { return (b + 255) / 256 * 256; };
  EXPECT_EQ(TransformerModel::ActivationBytes(config, untiled) -
                TransformerModel::ActivationBytes(config, tiled),
            9 * buf(N * F * es) - 6 * buf(R * F * es));
  auto model = TransformerModel::Create(*device, config, tiled);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->activation_bytes(), TransformerModel::ActivationBytes(config, tiled));
}

}  // namespace
}  // namespace tierflow
