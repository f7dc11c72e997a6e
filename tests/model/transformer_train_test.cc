// Both families train through the OffloadEngine on the CPU device: bf16
// weights, byte tokens of a small repetitive text, AdamW on the host; the
// loss must fall clearly. Also saves the trained model from the engine's
// master weights and loads it back.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "engine/master_weights.h"
#include "engine/offload_engine.h"
#include "model/hf_model.h"
#include "model/transformer.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

constexpr char kText[] =
    "the quick brown fox jumps over the lazy dog. "
    "a stitch in time saves nine. "
    "the quick brown fox jumps over the lazy dog again and again. ";

// `count` windows of seq_len + 1 bytes at random offsets: inputs and next-byte targets.
testing_util::TokenBatch TextBatch(int batch, int seq_len, std::mt19937& rng) {
  const std::string text(kText);
  std::uniform_int_distribution<int> start(0, static_cast<int>(text.size()) - seq_len - 2);
  testing_util::TokenBatch tb;
  tb.batch = batch;
  tb.seq_len = seq_len;
  for (int b = 0; b < batch; ++b) {
    const int s = start(rng);
    for (int t = 0; t < seq_len; ++t) {
      tb.inputs.push_back(static_cast<unsigned char>(text[s + t]));
      tb.targets.push_back(static_cast<unsigned char>(text[s + t + 1]));
    }
  }
  return tb;
}

class TransformerTrainTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformerTrainTest, LossFallsOnRepetitiveTextBf16) {
  auto config_or = PresetModelConfig(GetParam());
  ASSERT_TRUE(config_or.ok());
  auto device = testing_util::MakeCpuDevice(1ull << 30);
  TrainShape shape{
      .batch = 2, .seq_len = 32, .checkpoint_activations = true, .dtype = DType::kBF16};
  auto model_or = TransformerModel::Create(*device, *config_or, shape);
  ASSERT_TRUE(model_or.ok()) << model_or.status().ToString();
  TransformerModel& model = **model_or;
  EngineOptions options;
  options.weights_dtype = DType::kBF16;
  options.adam.lr = 5e-3f;
  options.adam.weight_decay = 0.0f;
  options.clip_grad_norm = 1.0f;
  options.sub_group_params = 64 << 10;
  auto engine_or = OffloadEngine::Create(*device, model, options);
  ASSERT_TRUE(engine_or.ok()) << engine_or.status().ToString();
  OffloadEngine& engine = **engine_or;

  std::mt19937 rng(17);
  constexpr int kSteps = 30;
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    // Two micro-batches per step: the gradient accumulates across them.
    testing_util::TokenBatch a = TextBatch(2, 32, rng), b = TextBatch(2, 32, rng);
    auto stats = engine.Step({a.micro(), b.micro()});
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    ASSERT_TRUE(std::isfinite(stats->loss));
    losses.push_back(stats->loss);
  }
  const float first = losses.front();
  float last = 0;
  for (int i = kSteps - 5; i < kSteps; ++i) last += losses[i] / 5;
  EXPECT_NEAR(std::log(256.0f), first, 0.3f);  // uniform over bytes at init
  EXPECT_LT(last, first - 1.5f) << GetParam() << ": first " << first << " last " << last;
  RecordProperty("first_loss", std::to_string(first));
  RecordProperty("last5_loss", std::to_string(last));

  // The trained masters save in the HF layout and load back as they were.
  auto master = GatherMasterWeights(engine);
  ASSERT_TRUE(master.ok()) << master.status().ToString();
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("tierflow-train-" + GetParam() + "-" + std::to_string(::getpid())))
                        .string();
  ASSERT_TRUE(
      SaveHfModel(dir, model.layout(), master->data(), testing_util::SaveOptions(DType::kF32))
          .ok());
  auto loaded = LoadHfModel(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(*master, loaded->weights);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Presets, TransformerTrainTest,
                         ::testing::Values("tiny-gpt2", "tiny-llama"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "tiny-gpt2" ? std::string("gpt2")
                                                            : std::string("llama");
                         });

}  // namespace
}  // namespace tierflow
