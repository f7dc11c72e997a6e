// The ops' cost model (kernels/op_costs.h): the counts the simulated
// accelerator turns into time, checked against hand-derived figures, and
// every op launched through Stream::Launch carries its cost.
#include <gtest/gtest.h>

#include "kernels/op_costs.h"

namespace tierflow {
namespace {

TEST(OpCosts, GemmCountsTwoMnkFlopsOnTensorCoresFor16BitInputs) {
  const KernelCost c = op_costs::Gemm(128, 256, 64, 3, 2, 4, /*reads_c=*/false);
  EXPECT_DOUBLE_EQ(c.tensor_flops, 2.0 * 128 * 256 * 64 * 3);
  EXPECT_DOUBLE_EQ(c.vector_flops, 0);
  EXPECT_DOUBLE_EQ(c.bytes, 3.0 * ((128.0 * 64 + 64.0 * 256) * 2 + 128.0 * 256 * 4));
}

TEST(OpCosts, Fp32GemmRunsOnTheVectorUnitsAndAccumulatingReadsC) {
  const KernelCost c = op_costs::Gemm(10, 20, 30, 1, 4, 4, /*reads_c=*/true);
  EXPECT_DOUBLE_EQ(c.tensor_flops, 0);
  EXPECT_DOUBLE_EQ(c.vector_flops, 2.0 * 10 * 20 * 30);
  EXPECT_DOUBLE_EQ(c.bytes, (10.0 * 30 + 30.0 * 20) * 4 + 10.0 * 20 * 4 * 2);
}

TEST(OpCosts, CausalAttentionCountsTheLowerTriangleAndGrowsQuadratically) {
  const KernelCost t1 = op_costs::AttentionForward(2, 1024, 32, 8, 128, 2);
  const KernelCost t2 = op_costs::AttentionForward(2, 2048, 32, 8, 128, 2);
  // QK^T and PV over T^2/2 scores per head, 2 FLOPs per multiply-add.
  EXPECT_DOUBLE_EQ(t1.tensor_flops, 2.0 * 2 * 2 * 32 * (1024.0 * 1024 / 2) * 128);
  EXPECT_DOUBLE_EQ(t2.tensor_flops, 4 * t1.tensor_flops);
  // Bytes are linear in T (scores never leave the chip).
  EXPECT_NEAR(t2.bytes / t1.bytes, 2.0, 1e-12);
  const KernelCost back = op_costs::AttentionBackward(2, 1024, 32, 8, 128, 2);
  EXPECT_DOUBLE_EQ(back.tensor_flops, 2.5 * t1.tensor_flops);
}

TEST(OpCosts, GqaReadsFewerKeyValueBytesThanMultiHead) {
  const KernelCost mha = op_costs::AttentionForward(1, 512, 32, 32, 128, 2);
  const KernelCost gqa = op_costs::AttentionForward(1, 512, 32, 8, 128, 2);
  EXPECT_DOUBLE_EQ(mha.tensor_flops, gqa.tensor_flops);
  EXPECT_LT(gqa.bytes, mha.bytes);
}

TEST(OpCosts, ElementwiseBytesFollowTheTensorsAndElementSize) {
  const KernelCost c = op_costs::Elementwise(1000, 2, 3, 2, 12);
  EXPECT_DOUBLE_EQ(c.bytes, 1000.0 * 2 * 5);
  EXPECT_DOUBLE_EQ(c.vector_flops, 12000.0);
  EXPECT_DOUBLE_EQ(c.tensor_flops, 0);
}

TEST(OpCosts, CrossEntropyWithGradientWritesTheLogitsGradient) {
  const KernelCost loss_only = op_costs::CrossEntropy(64, 32000, 2, false);
  const KernelCost with_grad = op_costs::CrossEntropy(64, 32000, 2, true);
  EXPECT_DOUBLE_EQ(with_grad.bytes - loss_only.bytes, 64.0 * 32000 * 2);
}

TEST(OpCosts, CrossEntropyGradSliceReadsAndWritesTheSliceOnly) {
  const KernelCost c = op_costs::CrossEntropyGradSlice(64, 8000, 2);
  // The slice's logits read and gradient written, each row's lse and target.
  EXPECT_DOUBLE_EQ(c.bytes, 64.0 * 8000 * 2 * 2 + 64.0 * 8);
  EXPECT_DOUBLE_EQ(c.vector_flops, 6.0 * 64 * 8000);
  EXPECT_DOUBLE_EQ(c.tensor_flops, 0);
  // Four slices move the bytes of the fused pass's gradient, and compute less.
  const KernelCost fused = op_costs::CrossEntropy(64, 32000, 2, true);
  EXPECT_DOUBLE_EQ(4 * c.bytes - 3 * 64.0 * 8, fused.bytes);
  EXPECT_LT(4 * c.vector_flops, fused.vector_flops);
}

}  // namespace
}  // namespace tierflow
