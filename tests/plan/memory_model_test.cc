// The tierflow convention's formulas against sums done by hand from
// docs/PLANNER.md: activation bytes per component, state bytes per
// parameter, the default sub-group size.
#include <gtest/gtest.h>

#include "plan/memory_model.h"
#include "tierflow/model_config.h"

namespace tierflow {
namespace {

ModelConfig TinyGpt2() { return *PresetModelConfig("tiny-gpt2"); }  // C=128 L=4 H=4 F=512 V=256

TEST(MemoryModel, StateBytesPerParamByOptimizer) {
  EXPECT_EQ(OptimizerStateBytesPerParam(OptimizerMomentCount(OptimizerKind::kAdamW)), 12u);
  EXPECT_EQ(OptimizerStateBytesPerParam(OptimizerMomentCount(OptimizerKind::kLion)), 8u);
  EXPECT_EQ(OptimizerStateBytesPerParam(OptimizerMomentCount(OptimizerKind::kSgd)), 8u);
  EXPECT_EQ(*ParseOptimizerKind("adam"), OptimizerKind::kAdamW);
  EXPECT_FALSE(ParseOptimizerKind("adagrad").ok());
}

TEST(MemoryModel, LayerSavedElementsGpt2AndLlama) {
  // GPT-2: 4C + 3C (qkv) + C (attention output) + 2F.
  EXPECT_EQ(LayerSavedElementsPerToken(TinyGpt2()), 4 * 128 + 3 * 128 + 128 + 2 * 512);
  // Llama-3.1-8B: 4C + (H + 2KV)D + HD + 3F with H=32, KV=8, D=128.
  ModelConfig llama = *PresetModelConfig("llama-8b");
  EXPECT_EQ(LayerSavedElementsPerToken(llama),
            4 * 4096 + (32 + 16) * 128 + 32 * 128 + 3 * 14336);
}

TEST(MemoryModel, ActivationsWithCheckpointingByHand) {
  ActivationOptions o;
  o.micro_batch = 2;
  o.seq_len = 64;
  o.dtype = DType::kBF16;
  o.checkpointing = true;
  ActivationBytes b = ComputeActivationBytes(TinyGpt2(), o);
  const uint64_t tokens = 128;
  EXPECT_EQ(b.inputs, tokens * 8);
  EXPECT_EQ(b.final_norm, tokens * (2 * 128 * 2 + 8));
  EXPECT_EQ(b.stored_layers, 4 * tokens * 128 * 2);
  // One block rebuilt: 2048 elements x 2 B, probabilities H*T x 2 B, 16 B of norm stats.
  EXPECT_EQ(b.recompute_layer, tokens * (2048 * 2 + 4 * 64 * 2 + 16));
  // Residual in/out (2C) + two of the widest intermediate (F = 512 > 3C > H*T).
  EXPECT_EQ(b.gradients, tokens * (2 * 128 + 2 * 512) * 2);
  EXPECT_EQ(b.logits, tokens * 256 * (4 + 2));
  EXPECT_EQ(b.peak(), 1024u + 131072u + 66560u + (591872u + 327680u));
}

TEST(MemoryModel, ActivationsWithoutCheckpointingKeepEveryBlock) {
  ActivationOptions o;
  o.micro_batch = 2;
  o.seq_len = 64;
  o.checkpointing = false;
  ActivationBytes b = ComputeActivationBytes(TinyGpt2(), o);
  EXPECT_EQ(b.stored_layers, 4u * 128 * (2048 * 2 + 4 * 64 * 2 + 16));
  EXPECT_EQ(b.recompute_layer, 0u);
  o.checkpointing = true;
  EXPECT_GT(b.peak(), ComputeActivationBytes(TinyGpt2(), o).peak());
}

TEST(MemoryModel, FlashAttentionDropsTheProbabilities) {
  ActivationOptions o;
  o.micro_batch = 1;
  o.seq_len = 256;
  o.checkpointing = false;
  ActivationBytes with_probs = ComputeActivationBytes(TinyGpt2(), o);
  o.attention_saves_probabilities = false;
  ActivationBytes flash = ComputeActivationBytes(TinyGpt2(), o);
  // Per block and token: H*T*2 bytes of probabilities become H*4 bytes of log-sum-exp.
  EXPECT_EQ(with_probs.stored_layers - flash.stored_layers, 4u * 256 * (4 * 256 * 2 - 4 * 4));
}

TEST(MemoryModel, Fp32ActivationsHaveNoExtraLogitsCopy) {
  ActivationOptions o;
  o.micro_batch = 1;
  o.seq_len = 16;
  o.dtype = DType::kF32;
  EXPECT_EQ(ComputeActivationBytes(TinyGpt2(), o).logits, 16u * 256 * 4);
}

TEST(MemoryModel, DefaultSubGroupIsClampedAndQuantized) {
  EXPECT_EQ(DefaultSubGroupParams(1000), 1000);                      // never beyond P
  EXPECT_EQ(DefaultSubGroupParams(858880), kSubGroupQuantumParams);  // P/32 rounds up to 64Ki
  EXPECT_EQ(DefaultSubGroupParams(int64_t{100} << 20), 3276800);      // P/32 = 50 x 64Ki
  EXPECT_EQ(DefaultSubGroupParams((int64_t{100} << 20) + 64), 3276800 + 65536);
  EXPECT_EQ(DefaultSubGroupParams(int64_t{70} << 30), kMaxDefaultSubGroupParams);
}

}  // namespace
}  // namespace tierflow
