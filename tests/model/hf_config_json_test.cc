// config.json parsing: real GPT-2, Llama 3, Mistral and Qwen2 configs give
// the published parameter counts; malformed files are refused with the file
// and the key named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tierflow/model_config.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The config.json of openai-community/gpt2, abridged to the keys that matter.
constexpr char kGpt2Json[] = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
  "n_head": 12, "n_inner": null, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257
})";

// meta-llama/Llama-3.1-8B.
constexpr char kLlama31Json[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "vocab_size": 128256
})";

// mistralai/Mistral-7B-v0.1.
constexpr char kMistralJson[] = R"({
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "vocab_size": 32000
})";

// Qwen/Qwen2-0.5B.
constexpr char kQwen2Json[] = R"({
  "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
  "max_position_embeddings": 131072, "max_window_layers": 24, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
  "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936
})";

class HfConfigJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("tierflow_hf_config_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

  fs::path dir_;
};

TEST_F(HfConfigJson, Gpt2ConfigGivesThePublishedCount) {
  auto c = LoadModelConfig(Write("config.json", kGpt2Json));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, ModelFamily::kGpt2);
  EXPECT_EQ(c->d_ff, 3072);  // n_inner null -> 4C
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->max_seq_len, 1024);
  EXPECT_EQ(ParameterCount(*c), 124439808);
}

TEST_F(HfConfigJson, Llama31ConfigReadsGqaRopeAndScaling) {
  auto c = ParseModelConfigJson(kLlama31Json, "llama31/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->n_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling_type, "llama3");
  EXPECT_EQ(c->rope_scaling_factor, 8.0);
  EXPECT_EQ(c->rope_low_freq_factor, 1.0);
  EXPECT_EQ(c->rope_high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_original_max_positions, 8192);
  EXPECT_EQ(c->max_seq_len, 131072);
  EXPECT_EQ(ParameterCount(*c), 8030261248);
  auto preset = PresetModelConfig("llama-8b");
  EXPECT_EQ(ParameterCount(*c), ParameterCount(*preset));
}

// data/llama-3b/config.json (what gpu-check's e2e stage hands both tierflow
// and PyTorch) is the llama-3b preset, every dimension of it.
TEST_F(HfConfigJson, BundledLlama3bConfigIsTheLlama3bPreset) {
  auto c = LoadModelConfig(std::string(TIERFLOW_SOURCE_DIR) + "/data/llama-3b/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto p = PresetModelConfig("llama-3b");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(c->family, p->family);
  EXPECT_EQ(c->vocab_size, p->vocab_size);
  EXPECT_EQ(c->max_seq_len, p->max_seq_len);
  EXPECT_EQ(c->d_model, p->d_model);
  EXPECT_EQ(c->n_layers, p->n_layers);
  EXPECT_EQ(c->n_heads, p->n_heads);
  EXPECT_EQ(c->n_kv_heads, p->n_kv_heads);
  EXPECT_EQ(c->head_dim, p->head_dim);
  EXPECT_EQ(c->d_ff, p->d_ff);
  EXPECT_EQ(c->norm_eps, p->norm_eps);
  EXPECT_EQ(c->rope_theta, p->rope_theta);
  EXPECT_EQ(c->tie_embeddings, p->tie_embeddings);
  EXPECT_EQ(c->mlp, p->mlp);
  EXPECT_EQ(c->norm, p->norm);
  EXPECT_EQ(c->qkv_bias, p->qkv_bias);
  EXPECT_EQ(c->mlp_bias, p->mlp_bias);
  EXPECT_EQ(c->rope_scaling_type, p->rope_scaling_type);
  EXPECT_EQ(c->rope_scaling_factor, p->rope_scaling_factor);
  EXPECT_EQ(c->rope_low_freq_factor, p->rope_low_freq_factor);
  EXPECT_EQ(c->rope_high_freq_factor, p->rope_high_freq_factor);
  EXPECT_EQ(c->rope_original_max_positions, p->rope_original_max_positions);
  EXPECT_EQ(ParameterCount(*c), 3212749824);  // Llama-3.2-3B's published count
}

TEST_F(HfConfigJson, MistralIsLlamaFamilyWithItsSlidingWindowReported) {
  auto c = ParseModelConfigJson(kMistralJson, "mistral");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_type, "mistral");
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(ParameterCount(*c), 7241732096);
}

TEST_F(HfConfigJson, Qwen2HasQkvBiasAndATiedHead) {
  auto c = ParseModelConfigJson(kQwen2Json, "qwen2");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->out_proj_bias);
  EXPECT_EQ(c->sliding_window, 0);  // use_sliding_window is false
  EXPECT_EQ(ParameterCount(*c), 494032768);
}

TEST_F(HfConfigJson, LoadsFromADirectoryAndResolvesPresetsDirsAndFiles) {
  std::string file = Write("model/config.json", kGpt2Json);
  auto from_dir = LoadModelConfig((dir_ / "model").string());
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().ToString();
  EXPECT_EQ(from_dir->name, file);
  EXPECT_EQ(ResolveModel((dir_ / "model").string())->d_model, 768);
  EXPECT_EQ(ResolveModel(file)->d_model, 768);
  EXPECT_EQ(ResolveModel("llama-13b")->d_model, 5120);
  auto missing = ResolveModel((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope"));
  EXPECT_THAT(missing.status().message(), HasSubstr("llama-7b"));
}

TEST_F(HfConfigJson, DirectoryWithoutConfigIsNotFoundNamingThePath) {
  fs::create_directories(dir_ / "empty");
  auto c = LoadModelConfig((dir_ / "empty").string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("empty/config.json"));
}

TEST_F(HfConfigJson, MalformedJsonNamesTheFile) {
  std::string file = Write("bad.json", R"({"model_type": "gpt2", "n_embd": )");
  auto c = LoadModelConfig(file);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(file));
  EXPECT_THAT(c.status().message(), HasSubstr("not valid JSON"));
  auto arr = ParseModelConfigJson("[1, 2]", "array.json");
  ASSERT_FALSE(arr.ok());
  EXPECT_THAT(arr.status().message(), HasSubstr("JSON object"));
}

TEST_F(HfConfigJson, MissingAndMistypedKeysAreNamed) {
  auto missing = ParseModelConfigJson(
      R"({"model_type": "gpt2", "vocab_size": 100, "n_positions": 64, "n_layer": 2, "n_head": 2})",
      "cfg.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("cfg.json"));
  EXPECT_THAT(missing.status().message(), HasSubstr("n_embd:"));
  EXPECT_THAT(missing.status().message(), HasSubstr("missing"));

  auto mistyped = ParseModelConfigJson(
      R"({"model_type": "llama", "vocab_size": 100, "hidden_size": "64", "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 128})",
      "cfg.json");
  ASSERT_FALSE(mistyped.ok());
  EXPECT_THAT(mistyped.status().message(), HasSubstr("hidden_size:"));
  EXPECT_THAT(mistyped.status().message(), HasSubstr("\"64\""));

  auto negative = ParseModelConfigJson(
      R"({"model_type": "llama", "vocab_size": -5, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 128})",
      "cfg.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("vocab_size:"));

  auto bad_bool = ParseModelConfigJson(
      R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 128, "tie_word_embeddings": "yes"})",
      "cfg.json");
  ASSERT_FALSE(bad_bool.ok());
  EXPECT_THAT(bad_bool.status().message(), HasSubstr("tie_word_embeddings:"));
}

TEST_F(HfConfigJson, RopeScalingIsReadOrNamedWhenBroken) {
  const std::string head =
      R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 128, "rope_scaling": )";
  auto parse = [&](const std::string& rope_scaling) {
    return ParseModelConfigJson(head + rope_scaling + "}", "cfg.json");
  };
  auto linear = parse(R"({"rope_type": "linear", "factor": 2.0})");
  ASSERT_TRUE(linear.ok()) << linear.status().ToString();
  EXPECT_EQ(linear->rope_scaling_type, "linear");
  EXPECT_EQ(linear->rope_scaling_factor, 2.0);
  auto plain = parse(R"({"rope_type": "default"})");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->rope_scaling_type, "");
  auto yarn = parse(R"({"rope_type": "yarn", "factor": 4.0})");
  ASSERT_TRUE(yarn.ok()) << "recorded here, refused when a model is built";
  EXPECT_EQ(yarn->rope_scaling_type, "yarn");

  struct Bad {
    std::string rope_scaling, key;
  };
  for (
      const Bad& b : {
          Bad{R"({"rope_type": "llama3", "low_freq_factor": 1, "high_freq_factor": 4,
                   "original_max_position_embeddings": 8192})",
              "rope_scaling.factor:"},
          Bad{R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4})",
              "rope_scaling.original_max_position_embeddings:"},
          Bad{R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4,
                   "original_max_position_embeddings": 8192})",
              "rope_scaling.high_freq_factor:"},
          Bad{R"({"rope_type": "linear", "factor": -2})", "rope_scaling.factor:"},
      }) {
    auto c = parse(b.rope_scaling);
    ASSERT_FALSE(c.ok()) << b.rope_scaling;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr(b.key));
    EXPECT_THAT(c.status().message(), HasSubstr("cfg.json"));
  }
}

TEST_F(HfConfigJson, UnsupportedModelTypesAndActivationsAreRefused) {
  auto bert = ParseModelConfigJson(R"({"model_type": "bert", "hidden_size": 768})", "bert.json");
  ASSERT_FALSE(bert.ok());
  EXPECT_THAT(bert.status().message(), HasSubstr("\"bert\""));
  EXPECT_THAT(bert.status().message(), HasSubstr("gpt2, llama, mistral, qwen2"));

  auto none = ParseModelConfigJson(R"({"hidden_size": 768})", "none.json");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("model_type:"));

  auto gelu_llama = ParseModelConfigJson(
      R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 128, "hidden_act": "gelu"})",
      "cfg.json");
  ASSERT_FALSE(gelu_llama.ok());
  EXPECT_THAT(gelu_llama.status().message(), HasSubstr("hidden_act:"));

  auto gqa = ParseModelConfigJson(
      R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128})",
      "cfg.json");
  ASSERT_FALSE(gqa.ok());
  EXPECT_THAT(gqa.status().message(), HasSubstr("num_key_value_heads:"));
}

TEST_F(HfConfigJson, LlamaDefaultsFollowTransformers) {
  auto c = ParseModelConfigJson(
      R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 128})",
      "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->max_seq_len, 2048);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->tie_embeddings);
  EXPECT_EQ(c->rope_scaling_type, "");
  // 2*(100*64) + 2*(4*64*64 + 3*64*128 + 2*64) + 64
  EXPECT_EQ(ParameterCount(*c), 2 * 6400 + 2 * (16384 + 24576 + 128) + 64);
}

// ---- issue 18: hostile config.json ----

// A small Llama config with one key's value replaced by `value` (JSON text).
std::string LlamaWith(const std::string& key, const std::string& value) {
  std::map<std::string, std::string> keys = {
      {"model_type", "\"llama\""},      {"vocab_size", "100"},        {"hidden_size", "64"},
      {"num_hidden_layers", "2"},       {"num_attention_heads", "2"}, {"intermediate_size", "128"},
      {"max_position_embeddings", "64"}};
  keys[key] = value;
  std::string text = "{";
  for (const auto& [k, v] : keys) text += (text.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
  return text + "}";
}

TEST_F(HfConfigJson, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  // 200 KB: crashed `plan` and `train` with a stack overflow before the fix.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string file = Write("deep/config.json", LlamaWith("architectures", deep));
  auto c = LoadModelConfig(file);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(file));
  EXPECT_THAT(c.status().message(), HasSubstr("nested deeper than 64"));
  // The same through ResolveModel (what `plan --model DIR` calls).
  EXPECT_FALSE(ResolveModel((dir_ / "deep").string()).ok());
}

TEST_F(HfConfigJson, DuplicateKeysStayLenientLastWins) {
  auto c = ParseModelConfigJson(
      R"({"model_type": "gpt2", "vocab_size": 1, "vocab_size": 100, "n_positions": 64,
          "n_embd": 64, "n_layer": 2, "n_head": 2})",
      "dup.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->vocab_size, 100);
}

TEST_F(HfConfigJson, HugeLayerCountIsRefusedNotSpun) {
  auto c = ParseModelConfigJson(LlamaWith("num_hidden_layers", "1000000000000000"), "huge.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              AllOf(HasSubstr("huge.json"), HasSubstr("num_hidden_layers:"),
                    HasSubstr("1000000000000000"), HasSubstr("limit of 1024")));
}

TEST_F(HfConfigJson, VocabOf2To40ReportsTheRealValueNotANarrowedOne) {
  // Was narrowed to int32 downstream and reported as "got 0".
  auto c = ParseModelConfigJson(LlamaWith("vocab_size", "1099511627776"), "v.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr("vocab_size:"), HasSubstr("1099511627776"),
                                          HasSubstr("limit of 16777216")));
  // Above INT64_MAX (stored unsigned by the parser): the value as written.
  auto u = ParseModelConfigJson(LlamaWith("vocab_size", "18446744073709551615"), "v.json");
  ASSERT_FALSE(u.ok());
  EXPECT_THAT(u.status().message(), HasSubstr("18446744073709551615"));
  EXPECT_THAT(u.status().message(), Not(HasSubstr("got -1")));
}

TEST_F(HfConfigJson, EveryDimensionHasAnUpperBoundNamingTheKey) {
  struct Case {
    const char* key;
    const char* value;
  };
  for (const Case& c :
       {Case{"hidden_size", "4294967296"}, Case{"num_attention_heads", "4096"},
        Case{"num_key_value_heads", "4096"}, Case{"intermediate_size", "4194304"},
        Case{"max_position_embeddings", "4611686018427387904"}, Case{"head_dim", "1048576"}}) {
    auto r = ParseModelConfigJson(LlamaWith(c.key, c.value), "b.json");
    ASSERT_FALSE(r.ok()) << c.key;
    EXPECT_THAT(r.status().message(), AllOf(HasSubstr(std::string(c.key) + ":"), HasSubstr(c.value),
                                            HasSubstr("limit of")))
        << c.key;
  }
}

TEST_F(HfConfigJson, ZeroIsNotAPositiveDimension) {
  auto r = ParseModelConfigJson(LlamaWith("hidden_size", "0"), "z.json");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("hidden_size: value 0 is out of range [1, "));
}

TEST_F(HfConfigJson, TensorsOf2To62ElementsAreRefused) {
  // vocab x hidden = 2^31 x 2^31 = 2^62 elements: the planner said "fits".
  auto c = ParseModelConfigJson(R"({"model_type": "gpt2", "vocab_size": 2147483648,
      "n_positions": 64, "n_embd": 2147483648, "n_layer": 2, "n_head": 2})",
                                "big.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("limit of"));
}

TEST_F(HfConfigJson, HugeStringValuesAreExcerptedInErrors) {
  auto c = ParseModelConfigJson(LlamaWith("hidden_act", "\"" + std::string(1000000, 'x') + "\""),
                                "s.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("hidden_act:"));
  EXPECT_LT(c.status().message().size(), 1000u);
  auto nested = ParseModelConfigJson(LlamaWith("hidden_size", "[[[[1]]]]"), "s.json");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.status().message(), HasSubstr("an array of 1 element"));
}

}  // namespace
}  // namespace tierflow
