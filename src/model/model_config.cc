// The parameter tensors a ModelConfig implies, named and shaped as Hugging
// Face stores them, and the counts derived from them. Counting from the
// tensor list (rather than a separate formula) keeps the loader, the layout
// and the planner agreeing on one number.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "tierflow/model_config.h"

#include "common/checked_math.h"

namespace tierflow {
namespace {

void Add(ParamGroup& group, std::string name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = SaturatingMul(n, d);
  group.num_params = SaturatingAdd(group.num_params, n);
  group.tensors.push_back(ParamTensor{std::move(name), std::move(shape), n});
}

// GPT-2 block i. Conv1D weights are stored (in, out): c_attn (C, 3C) holds
// q, k, v side by side along the output dimension.
ParamGroup Gpt2Layer(const ModelConfig& c, int64_t i) {
  const int64_t C = c.d_model, F = c.d_ff;
  // Saturating: the counts must not wrap for a config not yet validated.
  const int64_t qkv = SaturatingMul(
      SaturatingAdd(c.n_heads, SaturatingMul(int64_t{2}, c.n_kv_heads)), c.head_dim);  // 3C
  const int64_t attn = SaturatingMul(c.n_heads, c.head_dim);                           // C
  const std::string p = "h." + std::to_string(i) + ".";
  ParamGroup g;
  g.name = "layer." + std::to_string(i);
  Add(g, p + "ln_1.weight", {C});
  if (c.norm_bias) Add(g, p + "ln_1.bias", {C});
  Add(g, p + "attn.c_attn.weight", {C, qkv});
  if (c.qkv_bias) Add(g, p + "attn.c_attn.bias", {qkv});
  Add(g, p + "attn.c_proj.weight", {attn, C});
  if (c.out_proj_bias) Add(g, p + "attn.c_proj.bias", {C});
  Add(g, p + "ln_2.weight", {C});
  if (c.norm_bias) Add(g, p + "ln_2.bias", {C});
  Add(g, p + "mlp.c_fc.weight", {C, F});
  if (c.mlp_bias) Add(g, p + "mlp.c_fc.bias", {F});
  Add(g, p + "mlp.c_proj.weight", {F, C});
  if (c.mlp_bias) Add(g, p + "mlp.c_proj.bias", {C});
  return g;
}

// Llama block i. nn.Linear weights are stored (out, in).
ParamGroup LlamaLayer(const ModelConfig& c, int64_t i) {
  const int64_t C = c.d_model, F = c.d_ff;
  const int64_t q = SaturatingMul(c.n_heads, c.head_dim);
  const int64_t kv = SaturatingMul(c.n_kv_heads, c.head_dim);
  const std::string p = "model.layers." + std::to_string(i) + ".";
  ParamGroup g;
  g.name = "layer." + std::to_string(i);
  Add(g, p + "input_layernorm.weight", {C});
  if (c.norm_bias) Add(g, p + "input_layernorm.bias", {C});
  Add(g, p + "self_attn.q_proj.weight", {q, C});
  if (c.qkv_bias) Add(g, p + "self_attn.q_proj.bias", {q});
  Add(g, p + "self_attn.k_proj.weight", {kv, C});
  if (c.qkv_bias) Add(g, p + "self_attn.k_proj.bias", {kv});
  Add(g, p + "self_attn.v_proj.weight", {kv, C});
  if (c.qkv_bias) Add(g, p + "self_attn.v_proj.bias", {kv});
  Add(g, p + "self_attn.o_proj.weight", {C, q});
  if (c.out_proj_bias) Add(g, p + "self_attn.o_proj.bias", {C});
  Add(g, p + "post_attention_layernorm.weight", {C});
  if (c.norm_bias) Add(g, p + "post_attention_layernorm.bias", {C});
  Add(g, p + "mlp.gate_proj.weight", {F, C});
  if (c.mlp_bias) Add(g, p + "mlp.gate_proj.bias", {F});
  Add(g, p + "mlp.up_proj.weight", {F, C});
  if (c.mlp_bias) Add(g, p + "mlp.up_proj.bias", {F});
  Add(g, p + "mlp.down_proj.weight", {C, F});
  if (c.mlp_bias) Add(g, p + "mlp.down_proj.bias", {C});
  return g;
}

ParamGroup Embeddings(const ModelConfig& c) {
  ParamGroup g;
  g.name = "embeddings";
  if (c.family == ModelFamily::kGpt2) {
    Add(g, "wte.weight", {c.vocab_size, c.d_model});
    Add(g, "wpe.weight", {c.max_seq_len, c.d_model});
  } else {
    Add(g, "model.embed_tokens.weight", {c.vocab_size, c.d_model});
  }
  return g;
}

ParamGroup Head(const ModelConfig& c) {
  ParamGroup g;
  g.name = "head";
  const bool gpt2 = c.family == ModelFamily::kGpt2;
  Add(g, gpt2 ? "ln_f.weight" : "model.norm.weight", {c.d_model});
  if (c.norm_bias) Add(g, gpt2 ? "ln_f.bias" : "model.norm.bias", {c.d_model});
  if (!c.tie_embeddings) Add(g, "lm_head.weight", {c.vocab_size, c.d_model});
  return g;
}

Status Invalid(const ModelConfig& c, const std::string& what) {
  return InvalidArgumentError("model config '" + c.name + "': " + what);
}

}  // namespace

std::string_view ModelFamilyName(ModelFamily family) {
  return family == ModelFamily::kGpt2 ? "gpt2" : "llama";
}

StatusOr<ModelFamily> ParseModelFamily(std::string_view name) {
  if (name == "gpt2") return ModelFamily::kGpt2;
  if (name == "llama" || name == "mistral" || name == "qwen2") return ModelFamily::kLlama;
  return InvalidArgumentError("unknown model family '" + std::string(name) +
                              "': use gpt2 or llama (mistral and qwen2 are llama-family)");
}

Status ValidateModelConfig(const ModelConfig& c) {
  struct Dim {
    const char* name;
    int64_t value;
    int64_t max;
  };
  for (Dim d :
       {Dim{"vocab_size", c.vocab_size, kMaxModelVocab},
        Dim{"max_seq_len", c.max_seq_len, kMaxModelSeqLen},
        Dim{"d_model", c.d_model, kMaxModelDModel}, Dim{"n_layers", c.n_layers, kMaxModelLayers},
        Dim{"n_heads", c.n_heads, kMaxModelHeads}, Dim{"n_kv_heads", c.n_kv_heads, kMaxModelHeads},
        Dim{"head_dim", c.head_dim, kMaxModelHeadDim}, Dim{"d_ff", c.d_ff, kMaxModelDff}}) {
    if (d.value <= 0) {
      return Invalid(c, std::string(d.name) + " must be positive, got " + std::to_string(d.value));
    }
    if (d.value > d.max) {
      return Invalid(c, std::string(d.name) + " is " + std::to_string(d.value) +
                            ", more than tierflow's limit of " + std::to_string(d.max) +
                            " (far above any real model; is the config corrupt?)");
    }
  }
  if (c.rope_original_max_positions > kMaxModelSeqLen || c.sliding_window > kMaxModelSeqLen ||
      c.sliding_window < 0) {
    return Invalid(c, "rope_original_max_positions (" +
                          std::to_string(c.rope_original_max_positions) + ") and sliding_window (" +
                          std::to_string(c.sliding_window) + ") must be within 0.." +
                          std::to_string(kMaxModelSeqLen));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Invalid(c, "n_heads (" + std::to_string(c.n_heads) +
                          ") must be a multiple of n_kv_heads (" + std::to_string(c.n_kv_heads) +
                          ") for grouped-query attention");
  }
  if (c.family == ModelFamily::kGpt2) {
    if (c.n_kv_heads != c.n_heads) return Invalid(c, "GPT-2 has n_kv_heads == n_heads");
    if (c.d_model % c.n_heads != 0 || c.head_dim * c.n_heads != c.d_model) {
      return Invalid(c, "GPT-2 needs d_model (" + std::to_string(c.d_model) +
                            ") divisible by n_heads (" + std::to_string(c.n_heads) + ")");
    }
  }
  if (c.family == ModelFamily::kLlama && c.head_dim % 2 != 0) {
    return Invalid(c, "head_dim must be even for RoPE, got " + std::to_string(c.head_dim));
  }
  if (!(c.norm_eps > 0)) return Invalid(c, "norm_eps must be positive");
  if (c.family == ModelFamily::kLlama && !(c.rope_theta > 0)) {
    return Invalid(c, "rope_theta must be positive");
  }
  if ((c.rope_scaling_type == "linear" || c.rope_scaling_type == "llama3") &&
      !(c.rope_scaling_factor > 0 && std::isfinite(c.rope_scaling_factor))) {
    return Invalid(c, "rope_scaling factor must be positive");
  }
  if (c.rope_scaling_type == "llama3" &&
      !(c.rope_low_freq_factor > 0 && c.rope_high_freq_factor > c.rope_low_freq_factor &&
        std::isfinite(c.rope_high_freq_factor) && c.rope_original_max_positions > 0)) {
    return Invalid(c,
                   "llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor and "
                   "original_max_position_embeddings > 0");
  }
  return Status::Ok();
}

std::vector<ParamGroup> ParameterGroups(const ModelConfig& config) {
  std::vector<ParamGroup> groups;
  groups.reserve(static_cast<size_t>(config.n_layers) + 2);
  groups.push_back(Embeddings(config));
  for (int64_t i = 0; i < config.n_layers; ++i) {
    groups.push_back(config.family == ModelFamily::kGpt2 ? Gpt2Layer(config, i)
                                                         : LlamaLayer(config, i));
  }
  groups.push_back(Head(config));
  return groups;
}

int64_t LayerParameterCount(const ModelConfig& config) {
  return (config.family == ModelFamily::kGpt2 ? Gpt2Layer(config, 0) : LlamaLayer(config, 0))
      .num_params;
}

int64_t EmbeddingParameterCount(const ModelConfig& config) { return Embeddings(config).num_params; }

int64_t HeadParameterCount(const ModelConfig& config) { return Head(config).num_params; }

int64_t ParameterCount(const ModelConfig& config) {
  // Blocks are identical, so one is built and multiplied: ParameterCount is
  // called in the planner's searches over depth.
  return SaturatingAdd(SaturatingAdd(EmbeddingParameterCount(config),
                                     SaturatingMul(config.n_layers, LayerParameterCount(config))),
                       HeadParameterCount(config));
}

int64_t LargestGroupParameterCount(const ModelConfig& config) {
  int64_t largest = std::max(EmbeddingParameterCount(config), HeadParameterCount(config));
  if (config.n_layers > 0) largest = std::max(largest, LayerParameterCount(config));
  return largest;
}

std::string CanonicalParamName(ModelFamily family, std::string_view name) {
  constexpr std::string_view kPrefix = "transformer.";
  if (family == ModelFamily::kGpt2 && name.substr(0, kPrefix.size()) == kPrefix) {
    return std::string(name.substr(kPrefix.size()));
  }
  return std::string(name);
}

}  // namespace tierflow
