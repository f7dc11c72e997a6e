// The transformer on CUDA against the CPU device: the same weights and tokens
// give the same loss and gradients within tolerance (fp32 and bf16),
// checkpointing (with the checkpoints on the device or in host memory) does
// not change CUDA's gradients, and the MLP's row tiles change them only
// within rounding. Skipped, with the reason,
// where no GPU is usable.
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/common/require.h"

#include "model/transformer.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

using testing_util::DirectUnitAccess;

struct Outcome {
  float loss = 0;
  std::vector<float> grads;
};

Outcome RunOn(Device& device, const ModelConfig& config, DType dtype, bool ckpt,
              const std::vector<float>& weights, const testing_util::TokenBatch& tb,
              int64_t mlp_tile_rows = 0, bool offload_checkpoints = false) {
  Outcome out;
  auto stream = device.CreateStream("compute").value();
  TrainShape shape{
      .batch = tb.batch, .seq_len = tb.seq_len, .checkpoint_activations = ckpt, .dtype = dtype};
  shape.mlp_tile_rows = mlp_tile_rows;
  shape.offload_checkpoints = offload_checkpoints;
  auto model = TransformerModel::Create(device, config, shape);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return out;
  DirectUnitAccess access(device, *stream, (*model)->Units(), dtype);
  EXPECT_TRUE(access.SetWeights(weights).ok());
  Status st = (*model)->ForwardBackward(*stream, tb.micro(), 1.0f, access);
  EXPECT_TRUE(st.ok()) << st.ToString();
  st = stream->Synchronize();
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto loss = (*model)->LastLoss();
  auto grads = access.ReadGrads();
  EXPECT_TRUE(loss.ok() && grads.ok());
  if (loss.ok()) out.loss = *loss;
  if (grads.ok()) out.grads = std::move(grads).value();
  return out;
}

// ||a - b|| / ||b||.
double NormalizedError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class TransformerCudaTest : public ::testing::TestWithParam<ModelConfig> {};

// A CUDA device, random tokens of (batch, seq_len) and seeded weights for
// `config` (made on the CPU device).
struct CudaCase {
  std::unique_ptr<Device> cuda;
  testing_util::TokenBatch tb;
  std::vector<float> weights;
};
CudaCase MakeCudaCase(const ModelConfig& config, int batch, int seq_len, uint32_t seed) {
  CudaCase c;
  c.cuda = std::move(CreateDevice({.kind = DeviceChoice::kCuda})).value();
  auto cpu = testing_util::MakeCpuDevice();
  c.tb = testing_util::RandomTokens(batch, seq_len, 23, seed);
  TransformerInit init;
  init.init_std = 0.2f;
  auto ref_model = TransformerModel::Create(*cpu, config, {batch, seq_len}, init).value();
  c.weights = testing_util::InitialFlat(*ref_model);
  return c;
}

TEST_P(TransformerCudaTest, MatchesCpuDevice) {
  if (!CudaUnavailableReason().empty()) TIERFLOW_SKIP_WITHOUT("gpu") << CudaUnavailableReason();
  const ModelConfig config = GetParam();
  auto cpu = testing_util::MakeCpuDevice();
  auto cuda_or = CreateDevice({.kind = DeviceChoice::kCuda});
  ASSERT_TRUE(cuda_or.ok()) << cuda_or.status().ToString();
  auto cuda = std::move(cuda_or).value();
  const testing_util::TokenBatch tb = testing_util::RandomTokens(2, 8, 23, 4);
  TransformerInit init;
  init.init_std = 0.2f;
  auto ref_model = TransformerModel::Create(*cpu, config, {2, 8}, init).value();
  const std::vector<float> weights = testing_util::InitialFlat(*ref_model);
  // fp32: cuBLAS and the CUDA kernels reduce in another order; bf16 rounds
  // every activation, so the tolerance follows bf16's 2^-8.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const double tol = dtype == DType::kF32 ? 2e-3 : 5e-2;
    Outcome on_cpu = RunOn(*cpu, config, dtype, false, weights, tb);
    Outcome on_cuda = RunOn(*cuda, config, dtype, false, weights, tb);
    EXPECT_NEAR(on_cpu.loss, on_cuda.loss, tol * std::abs(on_cpu.loss)) << DTypeName(dtype);
    ASSERT_EQ(on_cpu.grads.size(), on_cuda.grads.size());
    EXPECT_LT(NormalizedError(on_cuda.grads, on_cpu.grads), tol) << DTypeName(dtype);
    Outcome ckpt = RunOn(*cuda, config, dtype, true, weights, tb);
    EXPECT_EQ(on_cuda.loss, ckpt.loss);
    EXPECT_LT(NormalizedError(ckpt.grads, on_cuda.grads), 1e-6) << DTypeName(dtype);
  }
}

// The MLP in row tiles on CUDA: cuBLAS sums each tile's share of a weight
// gradient apart (on the CPU the bits are the untiled run's: mlp_tile_test),
// so the result is the untiled one within rounding.
TEST_P(TransformerCudaTest, TiledMlpMatchesUntiledWithinRounding) {
  if (!CudaUnavailableReason().empty()) TIERFLOW_SKIP_WITHOUT("gpu") << CudaUnavailableReason();
  ModelConfig config = GetParam();
  config.max_seq_len = 512;
  const CudaCase c = MakeCudaCase(config, 2, 300, 5);
  Device& cuda = *c.cuda;
  const auto& [tb, weights] = std::tie(c.tb, c.weights);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const double tol = dtype == DType::kF32 ? 2e-3 : 5e-2;
    for (bool ckpt : {false, true}) {
      Outcome untiled = RunOn(cuda, config, dtype, ckpt, weights, tb);
      Outcome tiled = RunOn(cuda, config, dtype, ckpt, weights, tb, 256);
      EXPECT_NEAR(untiled.loss, tiled.loss, tol * std::abs(untiled.loss)) << DTypeName(dtype);
      ASSERT_EQ(untiled.grads.size(), tiled.grads.size());
      EXPECT_LT(NormalizedError(tiled.grads, untiled.grads), tol) << DTypeName(dtype);
    }
  }
}

// The checkpoints in pinned host memory on CUDA: the copies move bits, the
// kernels are the same, so the run is the one that keeps them (six blocks:
// four of the seven residuals leave the device).
TEST_P(TransformerCudaTest, OffloadedCheckpointsGiveTheKeptRunsResult) {
  if (!CudaUnavailableReason().empty()) TIERFLOW_SKIP_WITHOUT("gpu") << CudaUnavailableReason();
  ModelConfig config = GetParam();
  config.n_layers = 6;
  const CudaCase c = MakeCudaCase(config, 2, 8, 6);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Outcome kept = RunOn(*c.cuda, config, dtype, true, c.weights, c.tb);
    Outcome moved = RunOn(*c.cuda, config, dtype, true, c.weights, c.tb, 0, /*offload=*/true);
    EXPECT_EQ(kept.loss, moved.loss) << DTypeName(dtype);
    ASSERT_EQ(kept.grads.size(), moved.grads.size());
    EXPECT_LT(NormalizedError(moved.grads, kept.grads), 1e-6) << DTypeName(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TransformerCudaTest,
                         ::testing::Values(testing_util::TinyGpt2(), testing_util::TinyLlama()),
                         [](const ::testing::TestParamInfo<ModelConfig>& info) {
                           return info.param.family == ModelFamily::kGpt2 ? std::string("gpt2")
                                                                          : std::string("llama");
                         });

}  // namespace
}  // namespace tierflow
