// Hugging Face load/save of the transformer layout: load -> save -> load is
// bit-exact (fp32 and bf16, single file and sharded), GPT-2 names with the
// "transformer." prefix load, the generated config.json reads back as the
// same config, and a missing or mis-shaped tensor is an error naming it.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <signal.h>

#include "common/cancel.h"
#include "common/half.h"
#include "model/hf_model.h"
#include "model/transformer.h"
#include "tests/model/model_test_util.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tierflow-hfmodel-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string sub(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> RandomWeights(const ParamLayout& layout, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> w(layout.total_params);
  for (float& v : w) v = dist(rng);
  return w;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The SafetensorsEntry list of a layout (fp32), optionally renaming or reshaping.
std::vector<SafetensorsEntry> Entries(const ParamLayout& layout, const std::vector<float>& w) {
  std::vector<SafetensorsEntry> entries;
  for (size_t u = 0; u < layout.tensors.size(); ++u) {
    for (const TensorSlot& s : layout.tensors[u]) {
      entries.push_back({s.tensor.name, DType::kF32, s.tensor.shape,
                         w.data() + layout.unit_offsets[u] + s.offset});
    }
  }
  return entries;
}

struct Case {
  ModelConfig config;
  DType dtype;
};

class HfModelRoundTripTest : public ::testing::TestWithParam<Case> {};

TEST_P(HfModelRoundTripTest, LoadSaveLoadIsBitExact) {
  const Case c = GetParam();
  auto layout = MakeParamLayout(c.config).value();
  const std::vector<float> original = RandomWeights(layout, 3);
  TempDir tmp;
  for (uint64_t shard_bytes : {uint64_t{5'000'000'000}, uint64_t{4096}}) {
    const std::string a = tmp.sub("a" + std::to_string(shard_bytes));
    const std::string b = tmp.sub("b" + std::to_string(shard_bytes));
    HfModelSaveOptions save = testing_util::SaveOptions(c.dtype);
    save.max_shard_bytes = shard_bytes;
    ASSERT_TRUE(SaveHfModel(a, layout, original.data(), save).ok());
    auto first = LoadHfModel(a);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    if (c.dtype == DType::kF32) {
      EXPECT_TRUE(BitEqual(original, first->weights));
    } else {
      for (size_t i = 0; i < original.size(); ++i) {
        ASSERT_EQ(Bf16ToFloat(FloatToBf16(original[i])), first->weights[i]) << i;
      }
    }
    save.base_config_json = first->config_json;
    ASSERT_TRUE(SaveHfModel(b, first->layout, first->weights.data(), save).ok());
    auto second = LoadHfModel(b);
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_TRUE(BitEqual(first->weights, second->weights));
    const bool sharded = fs::exists(fs::path(a) / "model.safetensors.index.json");
    EXPECT_EQ(shard_bytes == 4096, sharded);
    if (!sharded) {
      EXPECT_EQ(FileBytes(a + "/model.safetensors"), FileBytes(b + "/model.safetensors"));
    }
    EXPECT_EQ(FileBytes(a + "/config.json"), FileBytes(b + "/config.json"));
  }
}

// A model created from a directory starts from exactly its weights.
TEST_P(HfModelRoundTripTest, TransformerInitialisesFromDirectory) {
  const Case c = GetParam();
  auto layout = MakeParamLayout(c.config).value();
  const std::vector<float> original = RandomWeights(layout, 5);
  TempDir tmp;
  const std::string dir = tmp.sub("m");
  ASSERT_TRUE(SaveHfModel(dir, layout, original.data(), testing_util::SaveOptions(c.dtype)).ok());
  auto loaded = LoadHfModel(dir).value();
  auto device = testing_util::MakeCpuDevice();
  TransformerInit init;
  init.weights_dir = dir;
  auto model = TransformerModel::Create(*device, loaded.config, {1, 4, false, c.dtype}, init);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE(BitEqual(loaded.weights, testing_util::InitialFlat(**model)));
}

TEST_P(HfModelRoundTripTest, GeneratedConfigJsonReadsBack) {
  const ModelConfig c = GetParam().config;
  auto text = HfConfigJson(c, DType::kBF16);
  ASSERT_TRUE(text.ok());
  auto back = ParseModelConfigJson(*text, "generated");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *text;
  EXPECT_EQ(c.family, back->family);
  EXPECT_EQ(c.model_type, back->model_type);
  EXPECT_EQ(ParameterCount(c), ParameterCount(*back));
  EXPECT_EQ(c.n_kv_heads, back->n_kv_heads);
  EXPECT_EQ(c.d_ff, back->d_ff);
  EXPECT_EQ(c.tie_embeddings, back->tie_embeddings);
  EXPECT_EQ(c.qkv_bias, back->qkv_bias);
  EXPECT_EQ(c.norm_eps, back->norm_eps);
  EXPECT_EQ(c.rope_theta, back->rope_theta);
  EXPECT_EQ(c.rope_scaling_type, back->rope_scaling_type);
  EXPECT_EQ(c.rope_scaling_factor, back->rope_scaling_factor);
  EXPECT_EQ(c.rope_low_freq_factor, back->rope_low_freq_factor);
  EXPECT_EQ(c.rope_high_freq_factor, back->rope_high_freq_factor);
  EXPECT_EQ(c.rope_original_max_positions, back->rope_original_max_positions);
}

INSTANTIATE_TEST_SUITE_P(Families, HfModelRoundTripTest,
                         ::testing::Values(Case{testing_util::TinyGpt2(), DType::kF32},
                                           Case{testing_util::TinyGpt2(), DType::kBF16},
                                           Case{testing_util::TinyLlama(), DType::kF32},
                                           Case{testing_util::TinyLlama(), DType::kBF16},
                                           Case{testing_util::TinyLlama3(), DType::kBF16},
                                           Case{testing_util::TinyQwenTied(), DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.config.name + "_" +
                                              std::string(DTypeName(info.param.dtype));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// GPT2LMHeadModel checkpoints carry "transformer." on every name.
TEST(HfModelTest, Gpt2PrefixedNamesLoad) {
  auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
  const std::vector<float> w = RandomWeights(layout, 8);
  std::vector<SafetensorsEntry> entries = Entries(layout, w);
  for (SafetensorsEntry& e : entries) e.name = "transformer." + e.name;
  TempDir tmp;
  const std::string dir = tmp.sub("m");
  fs::create_directories(dir);
  ASSERT_TRUE(
      SaveHfCheckpoint(dir, entries, HfConfigJson(layout.config, DType::kF32).value()).ok());
  auto loaded = LoadHfModel(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(BitEqual(w, loaded->weights));
}

// What a saved model copies from its source: the "transformer." prefix of a
// GPT-2 checkpoint (written back by SaveHfModel), a uniform fp16 dtype, one
// file staying one file; a source of mixed dtypes leaves the dtype unset.
TEST(HfModelTest, TheSourcesLayoutIsReadAndWrittenBack) {
  auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
  const std::vector<float> w = RandomWeights(layout, 9);
  TempDir tmp;
  HfModelSaveOptions save;
  save.dtype = DType::kF16;
  save.tensor_name_prefix = "transformer.";
  const std::string dir = tmp.sub("gpt2");
  ASSERT_TRUE(SaveHfModel(dir, layout, w.data(), save).ok());
  auto source = ReadHfSourceLayout(dir, layout.config);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->tensor_name_prefix, "transformer.");
  EXPECT_EQ(source->dtype, DType::kF16);
  EXPECT_GE(source->max_shard_bytes, 5'000'000'000u);
  auto checkpoint = HfCheckpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok());
  for (const std::string& name : checkpoint->TensorNames()) {
    EXPECT_EQ(name.rfind("transformer.", 0), 0u) << name;
  }
  EXPECT_TRUE(LoadHfModel(dir).ok());

  // Mixed: one tensor stored in fp32, the rest fp16.
  std::vector<SafetensorsEntry> entries = Entries(layout, w);
  for (size_t i = 1; i < entries.size(); ++i) entries[i].dtype = DType::kF16;
  const std::string mixed = tmp.sub("mixed");
  fs::create_directories(mixed);
  ASSERT_TRUE(
      SaveHfCheckpoint(mixed, entries, HfConfigJson(layout.config, DType::kF32).value()).ok());
  auto m = ReadHfSourceLayout(mixed, layout.config);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->dtype.has_value());
  EXPECT_EQ(m->tensor_name_prefix, "");
}

// Issue 18: the source model's config.json is re-serialized when the model
// is saved; a deep one must be an error, not a stack overflow in dump().
TEST(HfModelTest, DeeplyNestedBaseConfigIsAnErrorNotAStackOverflow) {
  auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto text = HfConfigJson(layout.config, DType::kF32, "{\"x\": " + deep + "}");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(text.status().message().find("nested deeper than 64"), std::string::npos)
      << text.status().message();
  // Duplicate keys stay lenient (as when the config was loaded): last wins.
  auto dup = HfConfigJson(layout.config, DType::kF32, R"({"a": 1, "a": 2})");
  ASSERT_TRUE(dup.ok()) << dup.status().ToString();
  EXPECT_NE(dup->find("\"a\": 2"), std::string::npos) << *dup;
}

TEST(HfModelTest, APendingCancelStopsLoadingWithAborted) {
  auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
  const std::vector<float> w = RandomWeights(layout, 9);
  TempDir tmp;
  const std::string dir = tmp.sub("m");
  fs::create_directories(dir);
  ASSERT_TRUE(
      SaveHfCheckpoint(dir, Entries(layout, w), HfConfigJson(layout.config, DType::kF32).value())
          .ok());
  ResetCancelForTesting();
  RequestCancel(SIGTERM);
  auto loaded = LoadHfModel(dir);
  ResetCancelForTesting();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kAborted);
  EXPECT_NE(loaded.status().message().find("loading the model from " + dir), std::string::npos)
      << loaded.status().message();
  EXPECT_TRUE(LoadHfModel(dir).ok());
}

TEST(HfModelTest, MissingTensorIsNamed) {
  auto layout = MakeParamLayout(testing_util::TinyLlama()).value();
  const std::vector<float> w = RandomWeights(layout, 8);
  std::vector<SafetensorsEntry> entries = Entries(layout, w);
  const std::string missing = "model.layers.1.mlp.up_proj.weight";
  std::erase_if(entries, [&](const SafetensorsEntry& e) { return e.name == missing; });
  TempDir tmp;
  const std::string dir = tmp.sub("m");
  fs::create_directories(dir);
  ASSERT_TRUE(
      SaveHfCheckpoint(dir, entries, HfConfigJson(layout.config, DType::kF32).value()).ok());
  auto loaded = LoadHfModel(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(StatusCode::kNotFound, loaded.status().code());
  EXPECT_NE(std::string::npos, loaded.status().message().find(missing))
      << loaded.status().ToString();
  auto device = testing_util::MakeCpuDevice();
  TransformerInit init;
  init.weights_dir = dir;
  auto model = TransformerModel::Create(*device, layout.config, {1, 4}, init);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(std::string::npos, model.status().message().find(missing));
}

TEST(HfModelTest, WrongShapeIsNamed) {
  auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
  const std::vector<float> w = RandomWeights(layout, 8);
  std::vector<SafetensorsEntry> entries = Entries(layout, w);
  const std::string wrong = "h.0.attn.c_attn.weight";
  for (SafetensorsEntry& e : entries) {
    if (e.name == wrong) std::swap(e.shape[0], e.shape[1]);  // (3C, C): an nn.Linear layout
  }
  TempDir tmp;
  const std::string dir = tmp.sub("m");
  fs::create_directories(dir);
  ASSERT_TRUE(
      SaveHfCheckpoint(dir, entries, HfConfigJson(layout.config, DType::kF32).value()).ok());
  auto loaded = LoadHfModel(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(StatusCode::kInvalidArgument, loaded.status().code());
  EXPECT_NE(std::string::npos, loaded.status().message().find(wrong)) << loaded.status().ToString();
}

// Writes `entries` with `config`'s config.json into tmp/name; returns the dir.
std::string WriteCheckpoint(const TempDir& tmp, const std::string& name, const ModelConfig& config,
                            const std::vector<SafetensorsEntry>& entries) {
  const std::string dir = tmp.sub(name);
  fs::create_directories(dir);
  EXPECT_TRUE(SaveHfCheckpoint(dir, entries, HfConfigJson(config, DType::kF32).value()).ok());
  return dir;
}

// Finding 11: a config.json that says 2 layers over a 4-layer checkpoint
// trained and saved a 2-layer model, with no word about the 18 tensors it
// ignored. Tensors the config leaves unused are refused unless allowed.
TEST(HfModelTest, ConfigWithFewerLayersThanTheCheckpointIsRefusedNamingTheUnusedTensors) {
  const ModelConfig four = MakeModelConfig({ModelFamily::kLlama, 23, 16, 8, 4, 4, 2, 24}).value();
  ModelConfig two = MakeModelConfig({ModelFamily::kLlama, 23, 16, 8, 2, 4, 2, 24}).value();
  auto layout = MakeParamLayout(four).value();
  const std::vector<float> w = RandomWeights(layout, 11);
  TempDir tmp;
  const std::string dir = WriteCheckpoint(tmp, "m", two, Entries(layout, w));
  size_t beyond = 0;  // the tensors of layers 2 and 3: 9 each
  for (const SafetensorsEntry& e : Entries(layout, w)) {
    beyond += e.name.rfind("model.layers.2.", 0) == 0 || e.name.rfind("model.layers.3.", 0) == 0;
  }
  ASSERT_EQ(beyond, 18u);

  auto loaded = LoadHfModel(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = loaded.status().message();
  for (const char* part : {"18 tensors", "model.layers.2.", "and 14 more", "layers up to 3",
                           "says 2 layers", "--allow-unused-tensors", dir.c_str()}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
  }
  auto device = testing_util::MakeCpuDevice();
  TransformerInit init;
  init.weights_dir = dir;
  auto refused = TransformerModel::Create(*device, two, {1, 4}, init);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("18 tensors"), std::string::npos);
  // Asked for: the model trains the tensors its config describes and lists the rest.
  init.allow_unused_tensors = true;
  auto allowed = TransformerModel::Create(*device, two, {1, 4}, init);
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
  EXPECT_EQ((*allowed)->unused_checkpoint_tensors().size(), 18u);
  EXPECT_EQ((*allowed)->unused_checkpoint_tensors().front().rfind("model.layers.2.", 0), 0u);
}

// The buffers real checkpoints carry that a model rebuilds from its config
// (and transformers skips on load) are not "unused": Llama's rotary
// inv_freq, GPT-2's causal masks. For a layer the config does not have they
// are, like any other tensor of that layer.
TEST(HfModelTest, DerivableBuffersAreAcceptedForTheConfigsLayersOnly) {
  TempDir tmp;
  {
    auto layout = MakeParamLayout(testing_util::TinyLlama()).value();
    const std::vector<float> w = RandomWeights(layout, 12);
    const std::vector<float> inv_freq(layout.config.head_dim / 2, 1.0f);
    std::vector<SafetensorsEntry> entries = Entries(layout, w);
    for (int l = 0; l < layout.config.n_layers; ++l) {
      entries.push_back({"model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq",
                         DType::kF32,
                         {layout.config.head_dim / 2},
                         inv_freq.data()});
    }
    const std::string dir = WriteCheckpoint(tmp, "llama", layout.config, entries);
    auto loaded = LoadHfModel(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_TRUE(BitEqual(w, loaded->weights));
    entries.push_back({"model.layers.7.self_attn.rotary_emb.inv_freq",
                       DType::kF32,
                       {layout.config.head_dim / 2},
                       inv_freq.data()});
    const std::string extra = WriteCheckpoint(tmp, "llama-extra", layout.config, entries);
    auto refused = LoadHfModel(extra);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("model.layers.7.self_attn.rotary_emb.inv_freq"),
              std::string::npos)
        << refused.status().message();
  }
  {
    auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
    const std::vector<float> w = RandomWeights(layout, 13);
    const int64_t n = layout.config.max_seq_len;
    const std::vector<float> mask(static_cast<size_t>(n * n), 1.0f);
    std::vector<SafetensorsEntry> entries = Entries(layout, w);
    for (SafetensorsEntry& e : entries) e.name = "transformer." + e.name;
    for (int l = 0; l < layout.config.n_layers; ++l) {
      entries.push_back({"transformer.h." + std::to_string(l) + ".attn.bias",
                         DType::kF32,
                         {1, 1, n, n},
                         mask.data()});
    }
    const std::string dir = WriteCheckpoint(tmp, "gpt2", layout.config, entries);
    auto loaded = LoadHfModel(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_TRUE(BitEqual(w, loaded->weights));
  }
}

// A separate lm_head.weight beside a head the config ties to the embedding
// may be a copy or a head the config would throw away: refused, saying so.
TEST(HfModelTest, AnLmHeadBesideATiedHeadIsRefusedSayingWhy) {
  auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
  ASSERT_TRUE(layout.config.tie_embeddings);
  const std::vector<float> w = RandomWeights(layout, 14);
  std::vector<SafetensorsEntry> entries = Entries(layout, w);
  const SafetensorsEntry* wte = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.name == "wte.weight") wte = &e;
  }
  ASSERT_NE(wte, nullptr);
  SafetensorsEntry head = *wte;
  head.name = "lm_head.weight";
  entries.push_back(head);
  TempDir tmp;
  const std::string dir = WriteCheckpoint(tmp, "m", layout.config, entries);
  auto loaded = LoadHfModel(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("tie_word_embeddings"), std::string::npos)
      << loaded.status().message();
  EXPECT_NE(loaded.status().message().find("1 tensor in its safetensors is not used"),
            std::string::npos)
      << loaded.status().message();
}

TEST(HfModelTest, ResolveTrainableModelFindsWeights) {
  auto preset = ResolveTrainableModel("tiny-llama");
  ASSERT_TRUE(preset.ok());
  EXPECT_EQ("", preset->weights_dir);
  EXPECT_EQ(256, preset->config.vocab_size);
  auto layout = MakeParamLayout(testing_util::TinyGpt2()).value();
  const std::vector<float> w = RandomWeights(layout, 8);
  TempDir tmp;
  const std::string dir = tmp.sub("m");
  ASSERT_TRUE(SaveHfModel(dir, layout, w.data(), testing_util::SaveOptions(DType::kBF16)).ok());
  auto with_weights = ResolveTrainableModel(dir);
  ASSERT_TRUE(with_weights.ok()) << with_weights.status().ToString();
  EXPECT_EQ(dir, with_weights->weights_dir);
  EXPECT_NE(std::string::npos, with_weights->config_json.find("bfloat16"));
  fs::remove(fs::path(dir) / "model.safetensors");
  auto config_only = ResolveTrainableModel(dir + "/config.json");
  ASSERT_TRUE(config_only.ok()) << config_only.status().ToString();
  EXPECT_EQ("", config_only->weights_dir);
  EXPECT_EQ(ParameterCount(layout.config), ParameterCount(config_only->config));
  EXPECT_EQ(StatusCode::kNotFound, ResolveTrainableModel(tmp.sub("nothing")).status().code());
}

TEST(HfModelTest, LayoutIsContiguousPerUnit) {
  for (const ModelConfig& c : {testing_util::TinyGpt2(), testing_util::TinyLlama()}) {
    auto layout = MakeParamLayout(c).value();
    ASSERT_EQ(static_cast<size_t>(c.n_layers) + 2, layout.units.size());
    EXPECT_EQ(ParameterCount(c), layout.total_params);
    for (size_t u = 0; u < layout.units.size(); ++u) {
      int64_t next = 0;
      for (const TensorSlot& s : layout.tensors[u]) {
        EXPECT_EQ(next, s.offset) << s.tensor.name;
        next += s.tensor.num_elements;
      }
      EXPECT_EQ(static_cast<int64_t>(layout.units[u].num_params), next);
    }
    EXPECT_EQ(c.tie_embeddings, layout.head.lm_head < 0);
  }
}

}  // namespace
}  // namespace tierflow
