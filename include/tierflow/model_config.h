// The shape of a transformer model: what config.json says, what the presets
// say, and the parameter tensors that follow from it.
//
// Two families: GPT-2 (learned positions, LayerNorm, GELU MLP, fused qkv in
// Hugging Face's Conv1D layout, head tied to the token embedding) and Llama
// (RoPE, RMSNorm, SwiGLU MLP, grouped-query attention, head usually untied).
// Mistral and Qwen2 configs are read as the Llama family when they fit it
// (Qwen2 adds q/k/v biases; Mistral's sliding window is reported, not applied).
//
// Everything here is a pure function of the config: no I/O except
// LoadModelConfig / ResolveModel, which read one config.json.
// Thread safety: all functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/status.h"

namespace tierflow {

enum class ModelFamily : uint8_t { kGpt2, kLlama };
enum class MlpKind : uint8_t { kGelu, kSwiGlu };
enum class NormKind : uint8_t { kLayerNorm, kRmsNorm };

// "gpt2", "llama".
std::string_view ModelFamilyName(ModelFamily family);
// Accepts "gpt2" and "llama" (also "mistral" and "qwen2", which are Llama-family).
StatusOr<ModelFamily> ParseModelFamily(std::string_view name);

struct ModelConfig {
  std::string name;        // preset name ("llama-7b") or the config.json path
  std::string model_type;  // Hugging Face model_type: gpt2, llama, mistral, qwen2
  ModelFamily family = ModelFamily::kGpt2;

  int64_t vocab_size = 0;   // V
  int64_t max_seq_len = 0;  // n_positions (GPT-2) / max_position_embeddings (Llama)
  int64_t d_model = 0;      // C (n_embd / hidden_size)
  int64_t n_layers = 0;     // L (n_layer / num_hidden_layers)
  int64_t n_heads = 0;      // H (query heads)
  int64_t n_kv_heads = 0;   // KV (key/value heads; H for GPT-2 and plain MHA)
  int64_t head_dim = 0;     // D (C / H unless config.json sets head_dim)
  int64_t d_ff = 0;         // F (n_inner or 4C / intermediate_size)

  double norm_eps = 1e-5;      // layer_norm_epsilon / rms_norm_eps
  double rope_theta = 0;       // RoPE base; 0 for GPT-2 (learned positions)
  bool tie_embeddings = true;  // lm_head shares the token embedding (counted once)

  MlpKind mlp = MlpKind::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  bool qkv_bias = true;       // bias on q/k/v (GPT-2 c_attn, Qwen2, Llama attention_bias)
  bool out_proj_bias = true;  // bias on the attention output projection
  bool mlp_bias = true;       // bias on the MLP projections
  bool norm_bias = true;      // LayerNorm has a bias; RMSNorm has none

  // config.json's rope_scaling: "rope_type" ("" when none or "default").
  // "linear" and "llama3" are applied by the RoPE kernel (kernels/rope_freq.h);
  // any other type is recorded and refused by the transformer.
  std::string rope_scaling_type;
  double rope_scaling_factor = 1;              // linear, llama3: "factor"
  double rope_low_freq_factor = 1;             // llama3
  double rope_high_freq_factor = 4;            // llama3
  int64_t rope_original_max_positions = 8192;  // llama3: original_max_position_embeddings
  // Reported, not applied: Mistral's sliding_window (0 when none).
  int64_t sliding_window = 0;
};

// Hard upper bounds on every dimension, far above any real model (the largest
// today have ~128 layers, d_model 16384, 128 heads, head_dim 256, d_ff 53248,
// a 256K vocabulary and 10M positions) but low enough that every parameter
// and byte count derived from a valid config fits in int64 with room to
// spare: the largest valid model has under 2^53 parameters. A config outside
// them is a mistake or hostile, never a model to plan for.
inline constexpr int64_t kMaxModelLayers = 1024;
inline constexpr int64_t kMaxModelDModel = int64_t{1} << 16;   // 65536
inline constexpr int64_t kMaxModelHeads = 1024;                // query and key/value heads
inline constexpr int64_t kMaxModelHeadDim = int64_t{1} << 14;  // 16384
inline constexpr int64_t kMaxModelDff = int64_t{1} << 20;      // 1048576
inline constexpr int64_t kMaxModelVocab = int64_t{1} << 24;    // 16777216
inline constexpr int64_t kMaxModelSeqLen = int64_t{1} << 24;   // 16777216 positions
// Token ids are int32_t everywhere (data/, kernels): a valid vocab_size narrows safely.
static_assert(kMaxModelVocab <= INT32_MAX, "token ids are int32_t");

// Checks the dimensions are positive, within the bounds above, and consistent
// (H divisible by KV, ...). Errors name the config (config.name), the field,
// its value and the bound.
Status ValidateModelConfig(const ModelConfig& config);

// One parameter tensor as Hugging Face stores it.
struct ParamTensor {
  std::string name;            // e.g. "h.0.attn.c_attn.weight", "model.layers.0.mlp.up_proj.weight"
  std::vector<int64_t> shape;  // as stored: GPT-2 Conv1D weights are (in, out)
  int64_t num_elements = 0;
};

// Parameters grouped the way the engine lays them out: contiguous per group,
// groups in forward order. Group 0 is the embeddings, groups 1..L the blocks,
// the last one the final norm plus an untied lm_head.
struct ParamGroup {
  std::string name;  // "embeddings", "layer.0", ..., "head"
  std::vector<ParamTensor> tensors;
  int64_t num_params = 0;
};

// Every parameter tensor, grouped, in layout order. The tied head is not
// listed (it is the token embedding). GPT-2 names have no "transformer."
// prefix (see CanonicalParamName). REQUIRES: ValidateModelConfig(config) is OK.
std::vector<ParamGroup> ParameterGroups(const ModelConfig& config);

// Exact parameter count of the model as stored (tied head counted once).
// The counts below never overflow: they saturate at INT64_MAX for a config
// outside the bounds (which ValidateModelConfig refuses), so an unvalidated
// config can only look too big, never small.
int64_t ParameterCount(const ModelConfig& config);
// Parameters of one transformer block.
int64_t LayerParameterCount(const ModelConfig& config);
// Parameters of the input embeddings (token + learned positions).
int64_t EmbeddingParameterCount(const ModelConfig& config);
// Parameters of the final norm and the untied lm_head (0 for the head when tied).
int64_t HeadParameterCount(const ModelConfig& config);

// The LM head (logits, loss and their gradients) runs over row chunks, so
// the (N, V) logits never exist at once: at most kHeadChunkLogits logits a
// chunk, but never fewer than kHeadChunkMinRows rows, so that each chunk's
// weight-gradient GEMM (k = its rows) keeps the tensor cores busy; at
// Llama 3's 128256 vocabulary 16 Mi logits would be 130 rows, and the fp32
// (V, C) gradient would be read and written about 60 times per micro-batch.
// The model (TrainShape) and the planner cut the same way.
inline constexpr int64_t kHeadChunkLogits = int64_t{16} << 20;
inline constexpr int64_t kHeadChunkMinRows = 1024;
// Rows per chunk: budget / vocab, at least min_rows, within [1, rows].
inline int64_t HeadChunkRows(int64_t rows, int64_t vocab, int64_t budget = kHeadChunkLogits,
                             int64_t min_rows = kHeadChunkMinRows) {
  int64_t chunk = vocab > 0 ? budget / vocab : rows;
  if (chunk < min_rows) chunk = min_rows;
  if (chunk > rows) chunk = rows;
  return chunk < 1 ? 1 : chunk;
}
// The largest ParamGroup's parameter count (sizes gradient buckets).
int64_t LargestGroupParameterCount(const ModelConfig& config);

// Maps a checkpoint's tensor name onto ParameterGroups' naming: strips the
// "transformer." prefix GPT2LMHeadModel checkpoints carry. Other names are
// returned as they are.
std::string CanonicalParamName(ModelFamily family, std::string_view name);

// ---- presets (src/model/presets.cc) ----

// Built-in shapes: "tiny-gpt2", "tiny-llama" (under a million parameters, for
// tests and the default train; byte vocabulary of 256), "gpt2", "gpt2-medium",
// "gpt2-large", "gpt2-xl", "llama-1b" (Llama-3.2-1B), "llama-3b"
// (Llama-3.2-3B), "llama-7b" (Llama-2-7B), "llama-8b" (Llama-3.1-8B),
// "llama-13b" (Llama-2-13B), "llama-70b" (Llama-3.1-70B).
std::vector<std::string> PresetNames();
// NotFound naming the preset and listing the known ones.
StatusOr<ModelConfig> PresetModelConfig(std::string_view name);
// The family's presets in increasing size (the "tiny-" and "small-" toys excluded).
std::vector<ModelConfig> FamilyPresetLadder(ModelFamily family);

// A config of `family` with the family's conventions (norm, MLP, biases,
// tying, eps, rope_theta) and the given dimensions. head_dim = d_model /
// n_heads; n_kv_heads <= 0 means n_heads; d_ff <= 0 means the family default
// (GPT-2: 4C; Llama: 8C/3 rounded up to a multiple of 256). Validated.
struct ModelDimensions {
  ModelFamily family = ModelFamily::kLlama;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t d_ff = 0;
};
StatusOr<ModelConfig> MakeModelConfig(const ModelDimensions& dims);

// ---- config.json (src/model/hf_config_json.cc) ----

// Parses the text of a Hugging Face config.json. `source` names it in errors
// (usually the path). model_type must be gpt2, llama, mistral or qwen2; other
// types, missing or mistyped keys, dimensions beyond the kMaxModel* bounds,
// unsupported settings (e.g. a hidden_act other than silu for Llama) and JSON
// nested more than 64 levels deep are InvalidArgument errors that name the
// source and the key. Duplicate keys are accepted, the last one winning, as in
// transformers.
StatusOr<ModelConfig> ParseModelConfigJson(std::string_view json_text, std::string_view source);
// The most bytes a config.json may hold (real ones are a few KB); a larger
// file is refused by name rather than read into memory.
inline constexpr size_t kMaxModelConfigBytes = 16u << 20;
// Reads `path`: a config.json file, or a directory holding one. Errors:
// NotFound naming the file when it is missing; InvalidArgument when it is
// larger than kMaxModelConfigBytes; those of ParseModelConfigJson.
StatusOr<ModelConfig> LoadModelConfig(const std::string& path);
// A preset name, a directory with config.json, or a config.json path.
// NotFound when it is none of these, listing the presets.
StatusOr<ModelConfig> ResolveModel(std::string_view spec);

}  // namespace tierflow
