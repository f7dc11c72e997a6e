// Activation checkpoints in pinned host memory against keeping them on the
// device: bit-identical losses and gradients, micro-batch after micro-batch
// (the host store and the device ring reused, shorter micro-batches than
// allocated, packed samples), for GPT-2, Llama and Qwen2 (tied) shapes deep
// enough that most checkpoints leave the device; the memory it moves; and
// the shapes it refuses.
#include <cstring>
#include <ostream>
#include <vector>

#include <gtest/gtest.h>

#include "model/checkpoint_offload.h"
#include "model/transformer.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

using model_internal::CheckpointOffload;
using testing_util::DirectUnitAccess;
using testing_util::InitialFlat;
using testing_util::MakeCpuDevice;
using testing_util::RandomTokens;
using testing_util::RunResult;
using testing_util::TokenBatch;

// The tiny test shapes with six blocks: four of the seven residuals go to the host.
ModelConfig Deep(ModelConfig c) {
  c.n_layers = 6;
  c.name += "-6";
  return c;
}

struct OffloadCase {
  ModelConfig config;
  DType dtype;
};
void PrintTo(const OffloadCase& c, std::ostream* os) {
  *os << c.config.name << " " << DTypeName(c.dtype);
}

class CheckpointOffloadTest : public ::testing::TestWithParam<OffloadCase> {};

// The micro-batches each run gets: full, shorter (fewer rows and tokens
// than allocated) and packed (two samples in a row).
struct Feed {
  std::vector<TokenBatch> plain;
  std::vector<int32_t> packed_in, packed_tg, packed_pos;
};

Feed MakeFeed(int vocab) {
  Feed f;
  f.plain = {RandomTokens(2, 8, vocab, 1), RandomTokens(1, 5, vocab, 2),
             RandomTokens(2, 8, vocab, 3)};
  const TokenBatch row = RandomTokens(1, 8, vocab, 4);
  f.packed_in = row.inputs;
  f.packed_tg = row.targets;
  f.packed_tg[3] = -100;
  f.packed_pos = {0, 1, 2, 0, 1, 2, 3, 4};
  return f;
}

std::vector<RunResult> RunAll(const OffloadCase& c, bool offload, uint64_t* host_bytes,
                              uint64_t* device_bytes) {
  auto device = MakeCpuDevice();
  auto stream = device->CreateStream("compute").value();
  TrainShape shape{.batch = 2,
                   .seq_len = 8,
                   .checkpoint_activations = true,
                   .dtype = c.dtype,
                   .offload_checkpoints = offload};
  TransformerInit init;
  init.init_std = 0.3f;  // wide, so every path carries signal
  auto model = TransformerModel::Create(*device, c.config, shape, init);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return {};
  *host_bytes = (*model)->checkpoint_host_bytes();
  *device_bytes = (*model)->activation_bytes();
  DirectUnitAccess access(*device, *stream, (*model)->Units(), c.dtype);
  EXPECT_TRUE(access.SetWeights(InitialFlat(**model)).ok());
  const Feed feed = MakeFeed(static_cast<int>(c.config.vocab_size));
  std::vector<RunResult> out;
  for (const TokenBatch& tb : feed.plain) {
    auto r = testing_util::RunForwardBackward(**model, access, *stream, tb.micro(), 0.5f);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) out.push_back(*r);
  }
  MicroBatch packed{
      .inputs = feed.packed_in.data(), .targets = feed.packed_tg.data(), .batch = 1, .seq_len = 8};
  packed.positions = feed.packed_pos.data();
  if (c.config.family == ModelFamily::kLlama) {  // GPT-2's learned positions refuse packing
    auto r = testing_util::RunForwardBackward(**model, access, *stream, packed);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

TEST_P(CheckpointOffloadTest, BitIdenticalToCheckpointsOnTheDevice) {
  const OffloadCase& c = GetParam();
  uint64_t host_kept = 0, host_offload = 0, device_kept = 0, device_offload = 0;
  const std::vector<RunResult> kept = RunAll(c, false, &host_kept, &device_kept);
  const std::vector<RunResult> moved = RunAll(c, true, &host_offload, &device_offload);
  ASSERT_EQ(kept.size(), moved.size());
  ASSERT_FALSE(kept.empty());
  for (size_t i = 0; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].loss, moved[i].loss) << "micro-batch " << i;
    ASSERT_EQ(kept[i].grads.size(), moved[i].grads.size());
    EXPECT_EQ(0, std::memcmp(kept[i].grads.data(), moved[i].grads.data(),
                             kept[i].grads.size() * sizeof(float)))
        << c.config.name << " " << DTypeName(c.dtype) << " micro-batch " << i;
  }
  // Residuals 0..L-3 live on the host; the device keeps a ring of three.
  const uint64_t each = 2 * 8 * static_cast<uint64_t>(c.config.d_model) * DTypeSize(c.dtype);
  EXPECT_EQ(host_kept, 0u);
  EXPECT_EQ(host_offload, 4 * each);
  EXPECT_GE(device_kept - device_offload, 4 * each);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CheckpointOffloadTest,
    ::testing::Values(OffloadCase{Deep(testing_util::TinyGpt2()), DType::kF32},
                      OffloadCase{Deep(testing_util::TinyGpt2()), DType::kBF16},
                      OffloadCase{Deep(testing_util::TinyLlama()), DType::kF32},
                      OffloadCase{Deep(testing_util::TinyLlama()), DType::kBF16},
                      OffloadCase{Deep(testing_util::TinyQwenTied()), DType::kF16}));

TEST(CheckpointOffloadShape, NeedsCheckpointingAndShallowModelsKeepEverything) {
  auto device = MakeCpuDevice();
  TrainShape shape{.batch = 1,
                   .seq_len = 4,
                   .checkpoint_activations = false,
                   .dtype = DType::kF32,
                   .offload_checkpoints = true};
  auto refused = TransformerModel::Create(*device, testing_util::TinyLlama(), shape);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("checkpointing"), std::string::npos);
  // Two blocks: three residuals, all in the ring; nothing on the host.
  shape.checkpoint_activations = true;
  auto shallow = TransformerModel::Create(*device, testing_util::TinyLlama(), shape);
  ASSERT_TRUE(shallow.ok()) << shallow.status().ToString();
  EXPECT_EQ((*shallow)->checkpoint_host_bytes(), 0u);
  EXPECT_EQ(CheckpointOffload::DeviceSlots(1), 2);
  EXPECT_EQ(CheckpointOffload::HostCheckpoints(2), 0);
  EXPECT_EQ(CheckpointOffload::HostCheckpoints(32), 30);
}

}  // namespace
}  // namespace tierflow
