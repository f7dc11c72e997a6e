// Built-in model shapes: tiny ones for tests and the default `tierflow
// train`, and the published GPT-2 and Llama shapes for planning. The real
// shapes are copied from the models' config.json files on the Hugging Face
// hub; tests pin their parameter counts to the published ones.
#include <string>
#include <utility>

#include "tierflow/model_config.h"

namespace tierflow {
namespace {

// What a family fixes beside its dimensions.
struct FamilyTraits {
  const char* model_type;
  double rope_theta;  // 0: learned positions
  bool tie_embeddings;
  MlpKind mlp;
  NormKind norm;
  bool biases;  // on q/k/v, the output projection, the MLP and the norms
};
constexpr FamilyTraits kGpt2Traits{"gpt2", 0, true, MlpKind::kGelu, NormKind::kLayerNorm, true};
constexpr FamilyTraits kLlamaTraits{"llama", 10000, false, MlpKind::kSwiGlu, NormKind::kRmsNorm,
                                    false};

// The family's traits and `dims`, unvalidated: n_kv_heads 0 means n_heads,
// d_ff 0 the family's width (GPT-2: 4C; Llama: 8C/3 up to a multiple of 256).
ModelConfig WithDimensions(const ModelDimensions& dims) {
  const FamilyTraits& t = dims.family == ModelFamily::kGpt2 ? kGpt2Traits : kLlamaTraits;
  ModelConfig c;
  c.family = dims.family;
  c.model_type = t.model_type;
  c.norm_eps = 1e-5;
  c.rope_theta = t.rope_theta;
  c.tie_embeddings = t.tie_embeddings;
  c.mlp = t.mlp;
  c.norm = t.norm;
  c.qkv_bias = c.out_proj_bias = c.mlp_bias = c.norm_bias = t.biases;
  c.vocab_size = dims.vocab_size;
  c.max_seq_len = dims.max_seq_len;
  c.d_model = dims.d_model;
  c.n_layers = dims.n_layers;
  c.n_heads = dims.n_heads;
  c.n_kv_heads = dims.n_kv_heads > 0 ? dims.n_kv_heads : dims.n_heads;
  c.head_dim = dims.n_heads > 0 ? dims.d_model / dims.n_heads : 0;
  if (dims.d_ff > 0) {
    c.d_ff = dims.d_ff;
  } else if (dims.d_model > kMaxModelDModel || dims.d_model <= 0) {
    c.d_ff = 1;  // ValidateModelConfig refuses d_model; 4C must not overflow first
  } else if (dims.family == ModelFamily::kGpt2) {
    c.d_ff = 4 * dims.d_model;
  } else {
    c.d_ff = (8 * dims.d_model / 3 + 255) / 256 * 256;
  }
  return c;
}

ModelConfig Gpt2(std::string name, int64_t vocab, int64_t positions, int64_t d_model,
                 int64_t layers, int64_t heads) {
  ModelConfig c =
      WithDimensions({ModelFamily::kGpt2, vocab, positions, d_model, layers, heads, heads, 0});
  c.name = std::move(name);
  return c;
}

// A Llama shape as its config.json gives it; the first seven in
// ModelDimensions' order.
struct LlamaShape {
  int64_t vocab, max_positions, d_model, layers, heads, kv_heads, d_ff;
  double rope_theta;
  bool tied;
  const char* rope_scaling;
  double rope_factor;  // llama3: 32 for 3.2 1B/3B, 8 for 3.1 8B/70B
};

ModelConfig Llama(std::string name, const LlamaShape& s) {
  ModelConfig c = WithDimensions({ModelFamily::kLlama, s.vocab, s.max_positions, s.d_model,
                                  s.layers, s.heads, s.kv_heads, s.d_ff});
  c.name = std::move(name);
  c.rope_theta = s.rope_theta;
  c.tie_embeddings = s.tied;
  c.rope_scaling_type = s.rope_scaling;
  if (c.rope_scaling_type == "llama3") {  // transformers' Llama 3.1/3.2 configs
    c.rope_scaling_factor = s.rope_factor;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_positions = 8192;
  }
  return c;
}

std::vector<ModelConfig> AllPresets() {
  // Llama 3.x: vocab 128256, 128K positions, rope_theta 500000, "llama3" RoPE
  // scaling; 3.2 1B/3B tie the head. Llama 2: vocab 32000, 4K positions.
  return {
      Gpt2("tiny-gpt2", 256, 256, 128, 4, 4),
      Llama("tiny-llama", {256, 256, 128, 4, 4, 2, 352, 10000, false, "", 1}),
      // `tierflow train`'s default: 3.0M params, byte vocabulary.
      Llama("small-llama", {256, 512, 256, 4, 8, 4, 688, 10000, false, "", 1}),
      Gpt2("gpt2", 50257, 1024, 768, 12, 12),
      Gpt2("gpt2-medium", 50257, 1024, 1024, 24, 16),
      Gpt2("gpt2-large", 50257, 1024, 1280, 36, 20),
      Gpt2("gpt2-xl", 50257, 1024, 1600, 48, 25),
      Llama("llama-1b", {128256, 131072, 2048, 16, 32, 8, 8192, 500000, true, "llama3", 32}),
      Llama("llama-3b", {128256, 131072, 3072, 28, 24, 8, 8192, 500000, true, "llama3", 32}),
      Llama("llama-7b", {32000, 4096, 4096, 32, 32, 32, 11008, 10000, false, "", 1}),
      Llama("llama-8b", {128256, 131072, 4096, 32, 32, 8, 14336, 500000, false, "llama3", 8}),
      Llama("llama-13b", {32000, 4096, 5120, 40, 40, 40, 13824, 10000, false, "", 1}),
      Llama("llama-70b", {128256, 131072, 8192, 80, 64, 8, 28672, 500000, false, "llama3", 8}),
  };
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const ModelConfig& c : AllPresets()) names.push_back(c.name);
  return names;
}

StatusOr<ModelConfig> PresetModelConfig(std::string_view name) {
  for (ModelConfig& c : AllPresets()) {
    if (c.name == name) return std::move(c);
  }
  std::string known;
  for (const std::string& n : PresetNames()) known += (known.empty() ? "" : ", ") + n;
  return NotFoundError("no model preset named '" + std::string(name) + "'; presets: " + known);
}

std::vector<ModelConfig> FamilyPresetLadder(ModelFamily family) {
  std::vector<ModelConfig> ladder;
  for (ModelConfig& c : AllPresets()) {
    const bool toy = c.name.rfind("tiny-", 0) == 0 || c.name.rfind("small-", 0) == 0;
    if (c.family == family && !toy) ladder.push_back(std::move(c));
  }
  return ladder;  // AllPresets lists each family in increasing size
}

StatusOr<ModelConfig> MakeModelConfig(const ModelDimensions& dims) {
  ModelConfig c = WithDimensions(dims);
  c.name = std::string(ModelFamilyName(dims.family)) + " (" + std::to_string(dims.n_layers) +
           " layers, d_model " + std::to_string(dims.d_model) + ")";
  if (dims.n_heads > 0 && dims.d_model % dims.n_heads != 0) {
    return InvalidArgumentError("model config '" + c.name + "': d_model (" +
                                std::to_string(dims.d_model) + ") must be divisible by n_heads (" +
                                std::to_string(dims.n_heads) + ")");
  }
  TF_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

}  // namespace tierflow
