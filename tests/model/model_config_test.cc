// Model configs: preset shapes give the published parameter counts, the
// tensor list has Hugging Face's names and shapes, and bad dimensions are
// refused with the field named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <utility>

#include "tierflow/model_config.h"

namespace tierflow {
namespace {

using ::testing::HasSubstr;

ModelConfig Preset(const std::string& name) {
  auto c = PresetModelConfig(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

std::map<std::string, std::vector<int64_t>> ShapesByName(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const ParamGroup& g : ParameterGroups(c)) {
    for (const ParamTensor& t : g.tensors) out[t.name] = t.shape;
  }
  return out;
}

// Counts published by the model cards / transformers' num_parameters().
TEST(ModelPresets, ParameterCountsMatchPublishedFigures) {
  const std::map<std::string, int64_t> expected = {
      {"gpt2", 124439808},        {"gpt2-medium", 354823168}, {"gpt2-large", 774030080},
      {"gpt2-xl", 1557611200},    {"llama-1b", 1235814400},   {"llama-3b", 3212749824},
      {"llama-7b", 6738415616},   {"llama-8b", 8030261248},   {"llama-13b", 13015864320},
      {"llama-70b", 70553706496},
  };
  for (const auto& [name, count] : expected) {
    ModelConfig c = Preset(name);
    EXPECT_TRUE(ValidateModelConfig(c).ok()) << name;
    EXPECT_EQ(ParameterCount(c), count) << name;
  }
}

TEST(ModelPresets, TinyPresetsAreSmallAndValid) {
  for (const char* name : {"tiny-gpt2", "tiny-llama"}) {
    ModelConfig c = Preset(name);
    ASSERT_TRUE(ValidateModelConfig(c).ok()) << name;
    EXPECT_GT(ParameterCount(c), 100000) << name;
    EXPECT_LT(ParameterCount(c), 5000000) << name;
  }
  EXPECT_EQ(ParameterCount(Preset("tiny-gpt2")), 858880);
  EXPECT_EQ(ParameterCount(Preset("tiny-llama")), 803968);
}

TEST(ModelPresets, Llama32SmallModelsTieTheHeadAndOthersDoNot) {
  EXPECT_TRUE(Preset("llama-1b").tie_embeddings);
  EXPECT_TRUE(Preset("llama-3b").tie_embeddings);
  EXPECT_FALSE(Preset("llama-7b").tie_embeddings);
  EXPECT_FALSE(Preset("llama-8b").tie_embeddings);
  EXPECT_FALSE(Preset("llama-70b").tie_embeddings);
  EXPECT_EQ(Preset("llama-8b").n_kv_heads, 8);
  EXPECT_EQ(Preset("llama-7b").n_kv_heads, 32);
}

TEST(ModelPresets, UnknownPresetListsTheKnownOnes) {
  auto c = PresetModelConfig("llama-9000b");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("llama-9000b"));
  EXPECT_THAT(c.status().message(), HasSubstr("llama-70b"));
}

TEST(ModelPresets, LadderIsIncreasingAndPerFamily) {
  for (ModelFamily f : {ModelFamily::kGpt2, ModelFamily::kLlama}) {
    auto ladder = FamilyPresetLadder(f);
    ASSERT_GE(ladder.size(), 4u);
    for (size_t i = 0; i < ladder.size(); ++i) {
      EXPECT_EQ(ladder[i].family, f);
      if (i > 0) {
        EXPECT_GT(ParameterCount(ladder[i]), ParameterCount(ladder[i - 1]));
      }
    }
  }
}

TEST(ParameterTensors, Gpt2UsesConv1DLayoutAndHfNames) {
  ModelConfig c = Preset("gpt2");
  auto shapes = ShapesByName(c);
  EXPECT_EQ(shapes.at("wte.weight"), (std::vector<int64_t>{50257, 768}));
  EXPECT_EQ(shapes.at("wpe.weight"), (std::vector<int64_t>{1024, 768}));
  EXPECT_EQ(shapes.at("h.0.attn.c_attn.weight"), (std::vector<int64_t>{768, 2304}));
  EXPECT_EQ(shapes.at("h.0.attn.c_attn.bias"), (std::vector<int64_t>{2304}));
  EXPECT_EQ(shapes.at("h.11.mlp.c_fc.weight"), (std::vector<int64_t>{768, 3072}));
  EXPECT_EQ(shapes.at("h.11.mlp.c_proj.weight"), (std::vector<int64_t>{3072, 768}));
  EXPECT_EQ(shapes.at("ln_f.bias"), (std::vector<int64_t>{768}));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);  // tied to wte
  EXPECT_EQ(shapes.count("h.12.ln_1.weight"), 0u);
  EXPECT_EQ(shapes.size(), 2u + 12u * 12u + 2u);
}

TEST(ParameterTensors, LlamaUsesGroupedQueryShapesAndUntiedHead) {
  ModelConfig c = Preset("llama-8b");
  auto shapes = ShapesByName(c);
  EXPECT_EQ(shapes.at("model.embed_tokens.weight"), (std::vector<int64_t>{128256, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.q_proj.weight"),
            (std::vector<int64_t>{4096, 4096}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.k_proj.weight"),
            (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(shapes.at("model.layers.31.mlp.down_proj.weight"), (std::vector<int64_t>{4096, 14336}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<int64_t>{128256, 4096}));
  EXPECT_EQ(shapes.count("model.layers.0.self_attn.q_proj.bias"), 0u);
  EXPECT_EQ(shapes.size(), 1u + 32u * 9u + 2u);
}

TEST(ParameterTensors, GroupsAreContiguousPerLayerAndSumToTheCount) {
  for (const char* name : {"gpt2", "llama-1b", "tiny-llama"}) {
    ModelConfig c = Preset(name);
    auto groups = ParameterGroups(c);
    ASSERT_EQ(groups.size(), static_cast<size_t>(c.n_layers) + 2);
    EXPECT_EQ(groups.front().name, "embeddings");
    EXPECT_EQ(groups.back().name, "head");
    int64_t total = 0, largest = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      int64_t sum = 0;
      for (const ParamTensor& t : groups[i].tensors) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        EXPECT_EQ(n, t.num_elements) << t.name;
        sum += n;
      }
      EXPECT_EQ(sum, groups[i].num_params);
      if (i > 0 && i <= static_cast<size_t>(c.n_layers)) {
        EXPECT_EQ(groups[i].name, "layer." + std::to_string(i - 1));
        EXPECT_EQ(groups[i].num_params, LayerParameterCount(c));
      }
      total += sum;
      largest = std::max(largest, sum);
    }
    EXPECT_EQ(total, ParameterCount(c)) << name;
    EXPECT_EQ(largest, LargestGroupParameterCount(c)) << name;
  }
}

TEST(ParameterTensors, LayerCountsByHand) {
  // GPT-2 block: 12C^2 + 13C. Llama-2-7B block: 4C^2 + 3CF + 2C.
  EXPECT_EQ(LayerParameterCount(Preset("gpt2")), 12 * 768 * 768 + 13 * 768);
  EXPECT_EQ(LayerParameterCount(Preset("llama-7b")),
            4LL * 4096 * 4096 + 3LL * 4096 * 11008 + 2 * 4096);
  EXPECT_EQ(EmbeddingParameterCount(Preset("gpt2")), (50257 + 1024) * 768);
  EXPECT_EQ(HeadParameterCount(Preset("gpt2")), 2 * 768);
  EXPECT_EQ(HeadParameterCount(Preset("llama-7b")), 4096 + 32000LL * 4096);
}

TEST(ParameterTensors, CanonicalNameStripsGpt2TransformerPrefix) {
  EXPECT_EQ(CanonicalParamName(ModelFamily::kGpt2, "transformer.h.0.attn.c_attn.weight"),
            "h.0.attn.c_attn.weight");
  EXPECT_EQ(CanonicalParamName(ModelFamily::kGpt2, "wte.weight"), "wte.weight");
  EXPECT_EQ(CanonicalParamName(ModelFamily::kLlama, "transformer.x"), "transformer.x");
}

TEST(MakeModelConfig, AppliesFamilyDefaults) {
  ModelDimensions d;
  d.family = ModelFamily::kLlama;
  d.vocab_size = 1000;
  d.max_seq_len = 512;
  d.d_model = 384;
  d.n_layers = 3;
  d.n_heads = 6;
  auto c = MakeModelConfig(d);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->n_kv_heads, 6);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->d_ff, 1024);  // 8*384/3 = 1024, already a multiple of 256
  EXPECT_EQ(c->norm, NormKind::kRmsNorm);
  EXPECT_FALSE(c->tie_embeddings);

  d.family = ModelFamily::kGpt2;
  c = MakeModelConfig(d);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->d_ff, 4 * 384);
  EXPECT_TRUE(c->tie_embeddings);
}

TEST(MakeModelConfig, RefusesInconsistentDimensionsNamingTheField) {
  ModelDimensions d;
  d.family = ModelFamily::kLlama;
  d.vocab_size = 1000;
  d.max_seq_len = 512;
  d.d_model = 384;
  d.n_layers = 3;
  d.n_heads = 6;
  d.n_kv_heads = 4;  // 6 % 4 != 0
  auto c = MakeModelConfig(d);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("n_kv_heads"));
  d.n_kv_heads = 0;
  d.n_layers = 0;
  c = MakeModelConfig(d);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("n_layers"));
  d.n_layers = 3;
  d.n_heads = 5;  // does not divide 384
  c = MakeModelConfig(d);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("n_heads"));
}

TEST(ModelFamily, ParsesNamesAndRefusesOthers) {
  EXPECT_EQ(*ParseModelFamily("gpt2"), ModelFamily::kGpt2);
  EXPECT_EQ(*ParseModelFamily("qwen2"), ModelFamily::kLlama);
  auto f = ParseModelFamily("bert");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("bert"));
}

// ---- issue 18: unbounded dimensions ----

TEST(ModelConfig, HugeLayerCountIsRefusedNotSpun) {
  ModelDimensions d;
  d.family = ModelFamily::kLlama;
  d.vocab_size = 32000;
  d.max_seq_len = 4096;
  d.d_model = 4096;
  d.n_heads = 32;
  d.n_layers = 1000000000000000;  // 10^15: `plan` looped over every layer
  auto c = MakeModelConfig(d);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("n_layers is 1000000000000000"));
  EXPECT_THAT(c.status().message(), HasSubstr("limit of 1024"));
}

TEST(ModelConfig, DimensionsAtTheBoundsAreValidAndCountWithoutOverflow) {
  ModelConfig c = PresetModelConfig("llama-7b").value();
  c.vocab_size = kMaxModelVocab;
  c.max_seq_len = kMaxModelSeqLen;
  c.d_model = kMaxModelDModel;
  c.n_layers = kMaxModelLayers;
  c.n_heads = kMaxModelHeads;
  c.n_kv_heads = kMaxModelHeads;
  c.head_dim = kMaxModelHeadDim;
  c.d_ff = kMaxModelDff;
  ASSERT_TRUE(ValidateModelConfig(c).ok());
  const int64_t count = ParameterCount(c);
  // The bound's promise: under 2^53 (so byte counts x 16 fit easily).
  EXPECT_GT(count, int64_t{1} << 50);
  EXPECT_LT(count, int64_t{1} << 53);
  EXPECT_EQ(count, EmbeddingParameterCount(c) + c.n_layers * LayerParameterCount(c) +
                       HeadParameterCount(c));
  auto refused = [&](auto change) {
    ModelConfig over = c;
    change(over);
    return !ValidateModelConfig(over).ok();
  };
  EXPECT_TRUE(refused([](ModelConfig& o) { o.n_layers = kMaxModelLayers + 1; }));
  EXPECT_TRUE(refused([](ModelConfig& o) { o.d_model = kMaxModelDModel + 1; }));
  EXPECT_TRUE(refused([](ModelConfig& o) { o.vocab_size = kMaxModelVocab + 1; }));
  EXPECT_TRUE(refused([](ModelConfig& o) { o.d_ff = kMaxModelDff + 1; }));
  EXPECT_TRUE(refused([](ModelConfig& o) { o.head_dim = kMaxModelHeadDim + 2; }));
  EXPECT_TRUE(refused([](ModelConfig& o) { o.max_seq_len = kMaxModelSeqLen + 1; }));
  EXPECT_TRUE(refused([](ModelConfig& o) { o.n_heads = o.n_kv_heads = kMaxModelHeads * 2; }));
}

TEST(ModelConfig, CountsOfAnUnvalidatedConfigSaturateInsteadOfWrapping) {
  // 2^62-element tensors: the count must not wrap to something small.
  ModelConfig c = PresetModelConfig("gpt2").value();
  c.vocab_size = int64_t{1} << 31;
  c.d_model = int64_t{1} << 31;
  c.d_ff = int64_t{1} << 33;
  c.n_layers = int64_t{1} << 40;
  EXPECT_FALSE(ValidateModelConfig(c).ok());
  EXPECT_EQ(ParameterCount(c), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(LayerParameterCount(c), std::numeric_limits<int64_t>::max());
  EXPECT_GE(EmbeddingParameterCount(c), int64_t{1} << 62);
}

}  // namespace
}  // namespace tierflow

namespace tierflow {
namespace {

// The LM head's row chunks: at most 16 Mi logits, but never fewer than 1024
// rows (each chunk's weight-gradient GEMM has k >= 1024), never more than
// the rows there are.
TEST(HeadChunkRows, KeepTheWeightGradientGemmDeepAndTheLogitsBounded) {
  EXPECT_EQ(HeadChunkRows(2048, 128256), 1024);    // 16 Mi / 128256 = 130 rows: raised
  EXPECT_EQ(HeadChunkRows(8192, 32000), 1024);     // 524: raised
  EXPECT_EQ(HeadChunkRows(8192, 4096), 4096);      // 16 Mi / 4096: the budget rules
  EXPECT_EQ(HeadChunkRows(100, 128256), 100);      // fewer rows than the minimum
  EXPECT_EQ(HeadChunkRows(8192, 256), 8192);       // everything in one chunk
  EXPECT_EQ(HeadChunkRows(10, 50, 3 * 50, 1), 3);  // tests' small chunks
  EXPECT_EQ(HeadChunkRows(10, 50, 1, 1), 1);
}

}  // namespace
}  // namespace tierflow
