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

// tiny-gpt2 with B=2, T=64: N=128 tokens, bf16. Every buffer is a multiple
// of 256 bytes already except the loss (4 -> 256).
TEST(MemoryModel, BlockBytesGpt2ByHand) {
  const uint64_t NC = 128 * 128 * 2, stats = 2 * 128 * 4;  // (N, C) bf16; LayerNorm mean + rstd
  const uint64_t expected = (NC + stats)                   // norm1
                            + 128 * 384 * 2                // q, k, v
                            + NC                           // attention output
                            + 128 * 4 * 4                  // log-sum-exp, fp32 (N, H)
                            + NC                           // residual after attention
                            + (NC + stats)                 // norm2
                            + 2 * 128 * 512 * 2;           // fc, gelu
  EXPECT_EQ(BlockActivationBytes(TinyGpt2(), 128, DType::kBF16), expected);
}

TEST(MemoryModel, BlockBytesLlamaByHand) {
  ModelConfig m = *PresetModelConfig("tiny-llama");    // C=128 H=4 KV=2 D=32 F=352, RMSNorm, SwiGLU
  const uint64_t NC = 128 * 128 * 2, stats = 128 * 4;  // rstd only
  const uint64_t expected = (NC + stats) + 128 * (128 + 2 * 64) * 2 + NC + 128 * 4 * 4 + NC +
                            (NC + stats) + 3 * 128 * 352 * 2;  // gate, up, act
  EXPECT_EQ(BlockActivationBytes(m, 128, DType::kBF16), expected);
}

TEST(MemoryModel, ActivationsWithCheckpointingByHand) {
  ActivationOptions o;
  o.micro_batch = 2;
  o.seq_len = 64;
  o.dtype = DType::kBF16;
  o.checkpointing = true;
  ActivationBytes b = ComputeActivationBytes(TinyGpt2(), o);
  const uint64_t NC = 128 * 128 * 2;
  const uint64_t block = BlockActivationBytes(TinyGpt2(), 128, DType::kBF16);
  EXPECT_EQ(b.residual, 5 * NC);  // L + 1 residual tensors
  EXPECT_EQ(b.blocks, block);     // one shared recompute set
  EXPECT_EQ(b.final_norm, NC + 2 * 128 * 4);
  // One chunk of all 128 rows of logits, its loss (rounded), row losses and row log-sum-exps.
  EXPECT_EQ(b.logits, 128u * 256 * 2 + 256 + 128 * 4 + 128 * 4);
  EXPECT_EQ(b.inputs, 4u * 128 * 4);  // ids, targets, packed positions, sample starts
  EXPECT_EQ(b.gradients, 2 * NC + NC + 128u * 384 * 2 + 128u * 512 * 2);  // dres dln datt dqkv dact
  EXPECT_EQ(b.total(), 1089792u);
}

TEST(MemoryModel, ActivationsWithoutCheckpointingKeepEveryBlock) {
  ActivationOptions o;
  o.micro_batch = 2;
  o.seq_len = 64;
  o.checkpointing = false;
  ActivationBytes off = ComputeActivationBytes(TinyGpt2(), o);
  EXPECT_EQ(off.blocks, 4 * BlockActivationBytes(TinyGpt2(), 128, DType::kBF16));
  o.checkpointing = true;
  ActivationBytes on = ComputeActivationBytes(TinyGpt2(), o);
  EXPECT_EQ(off.total() - on.total(), 3 * on.blocks);
}

TEST(MemoryModel, BuffersAreRoundedTo256Bytes) {
  ActivationOptions o;
  o.micro_batch = 1;
  o.seq_len = 3;  // N = 3: fp32 statistics of 12 bytes take 256
  o.dtype = DType::kF32;
  ActivationBytes b = ComputeActivationBytes(TinyGpt2(), o);
  EXPECT_EQ(b.inputs, 4u * 256);
  EXPECT_EQ(b.final_norm, 3u * 128 * 4 /* 1536 */ + 2 * 256);
  EXPECT_EQ(b.logits, 3u * 256 * 4 + 256 + 256 + 256);
}

TEST(SubGroups, OneSlicePerUnitWhenSubGroupsAreLarge) {
  SubGroupSummary s = SummarizeSubGroups(TinyGpt2(), kDefaultSubGroupParams, 0.0, 12);
  EXPECT_EQ(s.num_sub_groups, 6);  // embeddings, 4 blocks, head
  EXPECT_EQ(s.max_unit_params, 12 * 128 * 128 + 13 * 128);
  EXPECT_EQ(s.max_group_params, s.max_unit_params);
  EXPECT_EQ(s.nvme_params, 0);
  EXPECT_EQ(s.nvme_sub_groups, 0);
}

TEST(SubGroups, SlicesNeverSpanUnitsAndNvmeTakesTheTail) {
  const int64_t S = 65536;
  const int64_t layer = 198272;  // 3 full slices + 1664
  SubGroupSummary all = SummarizeSubGroups(TinyGpt2(), S, 1.0, 12);
  EXPECT_EQ(all.num_sub_groups, 1 + 4 * 4 + 1);
  EXPECT_EQ(all.max_group_params, S);
  EXPECT_EQ(all.nvme_params, 858880);
  EXPECT_EQ(all.nvme_sub_groups, 18);
  EXPECT_EQ(all.nvme_block_bytes, 18u << 20);  // every slice's 12 B/param fits one 1 MiB block

  // Ratio 0.5: sub-groups starting at or after llround(0.5 * P) = 429440. Block 1
  // spans [263808, 462080); its slices start at +0, +65536, +131072, +196608, so
  // only its last (1664 params, at 460416) goes; blocks 2, 3 and the head follow.
  SubGroupSummary half = SummarizeSubGroups(TinyGpt2(), S, 0.5, 12);
  EXPECT_EQ(half.nvme_params, 1664 + 2 * layer + 256);
  EXPECT_EQ(half.nvme_sub_groups, 1 + 4 + 4 + 1);
  EXPECT_EQ(half.max_nvme_group_params, S);
  EXPECT_EQ(SummarizeSubGroups(TinyGpt2(), S, 0.0, 12).nvme_params, 0);
}

}  // namespace
}  // namespace tierflow

namespace tierflow {
namespace {

// At Llama 3's vocabulary the head's logits are one chunk of 1024 rows (the
// model's HeadChunkRows), not all of the micro-batch's rows.
TEST(MemoryModel, LogitsAreOneHeadChunk) {
  ActivationOptions o;
  o.micro_batch = 2;
  o.seq_len = 2048;  // N = 4096 rows
  o.dtype = DType::kBF16;
  const ModelConfig m = PresetModelConfig("llama-8b").value();
  const uint64_t chunk = 1024u * 128256 * 2;  // a multiple of 256
  EXPECT_EQ(ComputeActivationBytes(m, o).logits, chunk + 256 /* 4 losses */ + 2 * 4096 * 4);
}

}  // namespace
}  // namespace tierflow
