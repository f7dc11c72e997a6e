// Reads Hugging Face config.json files into a ModelConfig: GPT-2 keys
// (n_embd, n_layer, ...) and Llama-family keys (hidden_size,
// num_hidden_layers, ...; also Mistral and Qwen2). Defaults for absent
// optional keys are the transformers library's defaults for that model_type,
// so a config that loads in transformers means the same thing here.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/path_component.h"
#include "io/file_reader.h"
#include "io/json_reader.h"
#include "io/json_util.h"
#include "tierflow/model_config.h"

namespace tierflow {
namespace {

using nlohmann::json;

// Typed access to one config.json object through io's JsonReader: every
// error reads "config.json 'SOURCE': KEY: ...". JSON null reads as "not
// given", as in transformers.
class ConfigReader {
 public:
  // key_prefix names a nested object in errors, e.g. "rope_scaling.".
  ConfigReader(const json& object, std::string_view source, std::string_view key_prefix = "")
      : j_(object), reader_("config.json '" + std::string(source) + "'"), prefix_(key_prefix) {}

  Status Error(std::string_view key, std::string_view what) const {
    return reader_.Error(Path(key), what);
  }

  bool Has(std::string_view key) const { return JsonReader::Find(j_, key) != nullptr; }

  // A positive integer no larger than `max` (a dimension bound from
  // model_config.h). The error shows the value as written, never narrowed.
  StatusOr<int64_t> PositiveInt(std::string_view key, int64_t max) const {
    const json* v = JsonReader::Find(j_, key);
    if (v == nullptr) return Error(key, "is missing (a positive integer)");
    int64_t i = 0;
    if (Status s = reader_.Int(*v, Path(key), 1, max, &i); !s.ok()) {
      // Say why a bound that large exists: it is tierflow's, not the model's.
      if (v->is_number() && v->get<double>() > static_cast<double>(max)) {
        return InvalidArgumentError(s.message() + " (tierflow's limit of " + std::to_string(max) +
                                    ", far above any real model)");
      }
      return s;
    }
    return i;
  }

  // The first of `keys` that is present (older GPT-2 configs say n_ctx).
  StatusOr<int64_t> PositiveIntOf(std::initializer_list<std::string_view> keys, int64_t max) const {
    for (std::string_view k : keys) {
      if (Has(k)) return PositiveInt(k, max);
    }
    return PositiveInt(*keys.begin(), max);
  }

  StatusOr<int64_t> PositiveIntOr(std::string_view key, int64_t fallback, int64_t max) const {
    if (!Has(key)) return fallback;
    return PositiveInt(key, max);
  }

  StatusOr<double> PositiveNumber(std::string_view key) const {
    if (!Has(key)) return Error(key, "is missing (a positive number)");
    return PositiveNumberOr(key, 0);
  }

  StatusOr<double> PositiveNumberOr(std::string_view key, double fallback) const {
    const json* v = JsonReader::Find(j_, key);
    if (v == nullptr) return fallback;
    double d = 0;
    TF_RETURN_IF_ERROR(reader_.PositiveNumber(*v, Path(key), &d));
    return d;
  }

  StatusOr<bool> BoolOr(std::string_view key, bool fallback) const {
    const json* v = JsonReader::Find(j_, key);
    if (v == nullptr) return fallback;
    bool b = false;
    TF_RETURN_IF_ERROR(reader_.Bool(*v, Path(key), &b));
    return b;
  }

  StatusOr<std::string> StringOr(std::string_view key, std::string fallback) const {
    const json* v = JsonReader::Find(j_, key);
    if (v == nullptr) return fallback;
    std::string str;
    TF_RETURN_IF_ERROR(reader_.String(*v, Path(key), &str));
    return str;
  }

  const json& object() const { return j_; }

 private:
  std::string Path(std::string_view key) const { return prefix_ + std::string(key); }

  const json& j_;
  JsonReader reader_;
  std::string prefix_;
};

StatusOr<ModelConfig> ParseGpt2(const ConfigReader& r, std::string_view source) {
  ModelConfig c;
  c.name = std::string(source);
  c.model_type = "gpt2";
  c.family = ModelFamily::kGpt2;
  TF_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size", kMaxModelVocab));
  TF_ASSIGN_OR_RETURN(c.max_seq_len, r.PositiveIntOf({"n_positions", "n_ctx"}, kMaxModelSeqLen));
  TF_ASSIGN_OR_RETURN(c.d_model, r.PositiveInt("n_embd", kMaxModelDModel));
  TF_ASSIGN_OR_RETURN(c.n_layers, r.PositiveInt("n_layer", kMaxModelLayers));
  TF_ASSIGN_OR_RETURN(c.n_heads, r.PositiveInt("n_head", kMaxModelHeads));
  c.n_kv_heads = c.n_heads;
  if (c.d_model % c.n_heads != 0) {
    return r.Error("n_head", "must divide n_embd (" + std::to_string(c.d_model) + ")");
  }
  c.head_dim = c.d_model / c.n_heads;
  TF_ASSIGN_OR_RETURN(c.d_ff, r.PositiveIntOr("n_inner", 4 * c.d_model, kMaxModelDff));
  TF_ASSIGN_OR_RETURN(c.norm_eps, r.PositiveNumberOr("layer_norm_epsilon", 1e-5));
  TF_ASSIGN_OR_RETURN(c.tie_embeddings, r.BoolOr("tie_word_embeddings", true));
  TF_ASSIGN_OR_RETURN(std::string act, r.StringOr("activation_function", "gelu_new"));
  // gelu_new and gelu_pytorch_tanh are the tanh approximation GPT-2 was
  // trained with; exact gelu differs by < 1e-3 and is accepted too.
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu") {
    return r.Error("activation_function",
                   "is " + QuotedExcerpt(act) +
                       "; tierflow's GPT-2 supports gelu_new, gelu_pytorch_tanh, gelu");
  }
  c.rope_theta = 0;
  c.mlp = MlpKind::kGelu;
  c.norm = NormKind::kLayerNorm;
  c.qkv_bias = c.out_proj_bias = c.mlp_bias = c.norm_bias = true;
  return c;
}

StatusOr<ModelConfig> ParseLlamaFamily(const ConfigReader& r, std::string_view source,
                                       const std::string& model_type) {
  ModelConfig c;
  c.name = std::string(source);
  c.model_type = model_type;
  c.family = ModelFamily::kLlama;
  const bool qwen2 = model_type == "qwen2";
  const bool mistral = model_type == "mistral";
  TF_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size", kMaxModelVocab));
  TF_ASSIGN_OR_RETURN(c.d_model, r.PositiveInt("hidden_size", kMaxModelDModel));
  TF_ASSIGN_OR_RETURN(c.n_layers, r.PositiveInt("num_hidden_layers", kMaxModelLayers));
  TF_ASSIGN_OR_RETURN(c.n_heads, r.PositiveInt("num_attention_heads", kMaxModelHeads));
  TF_ASSIGN_OR_RETURN(c.n_kv_heads,
                      r.PositiveIntOr("num_key_value_heads", c.n_heads, kMaxModelHeads));
  TF_ASSIGN_OR_RETURN(c.d_ff, r.PositiveInt("intermediate_size", kMaxModelDff));
  // transformers' defaults: llama 2048 positions, mistral and qwen2 32768.
  TF_ASSIGN_OR_RETURN(
      c.max_seq_len,
      r.PositiveIntOr("max_position_embeddings", mistral || qwen2 ? 32768 : 2048, kMaxModelSeqLen));
  if (!r.Has("head_dim") && c.d_model % c.n_heads != 0) {
    return r.Error("num_attention_heads", "must divide hidden_size (" + std::to_string(c.d_model) +
                                              ") when head_dim is not given");
  }
  TF_ASSIGN_OR_RETURN(c.head_dim,
                      r.PositiveIntOr("head_dim", c.d_model / c.n_heads, kMaxModelHeadDim));
  if (c.n_heads % c.n_kv_heads != 0) {
    return r.Error("num_key_value_heads", "(" + std::to_string(c.n_kv_heads) +
                                              ") must divide num_attention_heads (" +
                                              std::to_string(c.n_heads) + ")");
  }
  TF_ASSIGN_OR_RETURN(c.norm_eps, r.PositiveNumberOr("rms_norm_eps", 1e-6));
  TF_ASSIGN_OR_RETURN(c.rope_theta, r.PositiveNumberOr("rope_theta", 10000.0));
  TF_ASSIGN_OR_RETURN(c.tie_embeddings, r.BoolOr("tie_word_embeddings", false));
  TF_ASSIGN_OR_RETURN(std::string act, r.StringOr("hidden_act", "silu"));
  if (act != "silu") {
    return r.Error("hidden_act",
                   "is " + QuotedExcerpt(act) + "; the Llama family's SwiGLU needs silu");
  }
  // Llama's attention_bias puts a bias on q, k, v and o; Qwen2 always has
  // q/k/v biases and none on o_proj.
  TF_ASSIGN_OR_RETURN(bool attention_bias, r.BoolOr("attention_bias", false));
  c.qkv_bias = qwen2 || attention_bias;
  c.out_proj_bias = !qwen2 && attention_bias;
  TF_ASSIGN_OR_RETURN(c.mlp_bias, r.BoolOr("mlp_bias", false));
  c.norm_bias = false;
  c.mlp = MlpKind::kSwiGlu;
  c.norm = NormKind::kRmsNorm;

  if (r.Has("rope_scaling")) {
    const json& rs = r.object().at("rope_scaling");
    if (!rs.is_object()) return r.Error("rope_scaling", "must be an object or null");
    auto type = rs.find("rope_type");
    if (type == rs.end()) type = rs.find("type");
    c.rope_scaling_type =
        (type != rs.end() && type->is_string()) ? type->get<std::string>() : "unknown";
    if (c.rope_scaling_type == "default") c.rope_scaling_type.clear();  // HF: no scaling
    const ConfigReader s(rs, source, "rope_scaling.");
    if (c.rope_scaling_type == "linear" || c.rope_scaling_type == "llama3") {
      TF_ASSIGN_OR_RETURN(c.rope_scaling_factor, s.PositiveNumber("factor"));
    }
    if (c.rope_scaling_type == "llama3") {
      TF_ASSIGN_OR_RETURN(c.rope_low_freq_factor, s.PositiveNumber("low_freq_factor"));
      TF_ASSIGN_OR_RETURN(c.rope_high_freq_factor, s.PositiveNumber("high_freq_factor"));
      TF_ASSIGN_OR_RETURN(c.rope_original_max_positions,
                          s.PositiveInt("original_max_position_embeddings", kMaxModelSeqLen));
      if (!(c.rope_high_freq_factor > c.rope_low_freq_factor)) {
        return s.Error("high_freq_factor", "must be greater than low_freq_factor (" +
                                               std::to_string(c.rope_low_freq_factor) + ")");
      }
    }
  }
  bool use_sliding_window = mistral;
  if (qwen2) {
    TF_ASSIGN_OR_RETURN(use_sliding_window, r.BoolOr("use_sliding_window", false));
  }
  if (use_sliding_window && r.Has("sliding_window")) {
    TF_ASSIGN_OR_RETURN(c.sliding_window, r.PositiveInt("sliding_window", kMaxModelSeqLen));
  }
  return c;
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfigJson(std::string_view json_text, std::string_view source) {
  json j;
  // Depth-limited (a deeply nested value would overflow the stack when copied
  // or destroyed). Duplicate keys stay lenient, last wins, as in transformers
  // (Python's json), so a config that loads there loads here.
  JsonParseOptions options;
  options.reject_duplicate_keys = false;
  if (Status parsed =
          ParseJson(json_text, "config.json '" + std::string(source) + "'", options, &j);
      !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  if (!j.is_object()) {
    return InvalidArgumentError("config.json '" + std::string(source) +
                                "' must hold a JSON object, got " + std::string(j.type_name()));
  }
  ConfigReader r(j, source);
  if (!r.Has("model_type")) {
    return r.Error("model_type", "is missing; supported model types: gpt2, llama, mistral, qwen2");
  }
  TF_ASSIGN_OR_RETURN(std::string model_type, r.StringOr("model_type", ""));
  StatusOr<ModelConfig> config = [&]() -> StatusOr<ModelConfig> {
    if (model_type == "gpt2") return ParseGpt2(r, source);
    if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2") {
      return ParseLlamaFamily(r, source, model_type);
    }
    return r.Error("model_type", "is " + QuotedExcerpt(model_type) +
                                     ", which tierflow does not support; supported model "
                                     "types: gpt2, llama, mistral, qwen2");
  }();
  if (!config.ok()) return config.status();
  TF_RETURN_IF_ERROR(ValidateModelConfig(*config));
  return config;
}

StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "config.json";
  auto text = ReadFileToString(file.string(), kMaxModelConfigBytes);
  if (text.status().code() == StatusCode::kNotFound) {
    return NotFoundError("cannot open model config '" + file.string() +
                         "': give a config.json file or a directory holding one");
  }
  if (!text.ok()) return text.status().WithContext("model config");
  return ParseModelConfigJson(*text, file.string());
}

StatusOr<ModelConfig> ResolveModel(std::string_view spec) {
  auto preset = PresetModelConfig(spec);
  if (preset.ok()) return preset;
  std::error_code ec;
  if (std::filesystem::exists(std::string(spec), ec)) return LoadModelConfig(std::string(spec));
  return NotFoundError(
      "'" + std::string(spec) +
      "' is neither a model preset nor a path to a config.json or a directory "
      "holding one; " +
      preset.status().message().substr(preset.status().message().find("presets:")));
}

}  // namespace tierflow
