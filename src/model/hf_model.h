// A transformer's weights in the Hugging Face layout (config.json plus
// safetensors, sharded when large), mapped onto the engine's per-unit flat
// fp32 parameter layout (ParamLayout): load a directory, read one unit's
// tensors straight from an open checkpoint (so the engine can initialise unit
// by unit without holding the whole model), save a model crash-safely.
//
// GPT-2 tensors are written without the "transformer." prefix (GPT2Model's
// names, which GPT2LMHeadModel.from_pretrained accepts) and read with or
// without it. The tied head is not stored (transformers re-ties it).
// Thread safety: reentrant; HfCheckpoint reads are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/file_system.h"
#include "io/hf_checkpoint.h"
#include "model/param_layout.h"
#include "tierflow/dtype.h"
#include "tierflow/model_config.h"

namespace tierflow {

// The names a layout's tensors may carry in checkpoints (see TensorNameOptions).
TensorNameOptions HfTensorNames(const ModelConfig& config);

// The checkpoint's tensors that no tensor of the layout reads, sorted, less
// those a model rebuilds from its config and transformers itself skips on
// load: the rotary buffers "...rotary_emb.inv_freq" of a RoPE model (from
// rope_theta and head_dim) and GPT-2's causal masks "h.N.attn.bias" /
// "h.N.attn.masked_bias" (constants), each for a layer the config has. An
// lm_head.weight beside a tied head (tie_word_embeddings) is listed: it may be
// a copy of the embedding or a head the config throws away, and only the
// user can say which.
std::vector<std::string> UnusedHfTensors(const HfCheckpoint& checkpoint, const ParamLayout& layout);

// What ValidateHfCheckpoint does with UnusedHfTensors.
enum class UnusedHfTensorPolicy {
  kRefuse,  // an error: the config does not describe the weights (the default)
  kAllow,   // the caller trains the subset, and says so (--allow-unused-tensors)
};

// Checks every tensor of the layout is in the checkpoint with its shape, and
// (kRefuse) that the checkpoint holds no tensor the layout leaves unused: a
// config.json that says 2 layers over a 4-layer checkpoint would otherwise
// train and save a different, smaller model without a word. Errors:
// NotFound / InvalidArgument naming the checkpoint and the tensors;
// InvalidArgument for unused tensors, naming how many, a few of them, and
// what to do (fix config.json, or --allow-unused-tensors).
Status ValidateHfCheckpoint(const HfCheckpoint& checkpoint, const ParamLayout& layout,
                            UnusedHfTensorPolicy unused = UnusedHfTensorPolicy::kRefuse);

// Reads unit `unit`'s tensors (converted to fp32) into out[0, units[unit].num_params).
Status ReadHfUnit(const HfCheckpoint& checkpoint, const ParamLayout& layout, int unit, float* out);

struct HfModel {
  ModelConfig config;
  std::string config_json;  // the config.json text as found (kept for saving back)
  ParamLayout layout;
  std::vector<float> weights;  // (layout.total_params,) fp32, all units in order
};

// Loads `dir` (config.json + weights). Errors: those of LoadModelConfig,
// HfCheckpoint::Open and ValidateHfCheckpoint (naming the missing or
// mis-shaped tensor).
StatusOr<HfModel> LoadHfModel(const std::string& dir);

// A config.json for `config` (what transformers needs to rebuild the model),
// with "torch_dtype" set to `dtype`. When `base_json` (a config.json text) is
// given, it is kept as is (rope_scaling, token ids, ...) and only torch_dtype
// is replaced. Errors: InvalidArgument if base_json is not a JSON object.
StatusOr<std::string> HfConfigJson(const ModelConfig& config, DType dtype,
                                   const std::string& base_json = "");

// What `tierflow train --model SPEC` names: a preset ("tiny-gpt2"), a
// config.json (random init), or a Hugging Face directory (its weights when it
// holds model.safetensors or an index, else random init).
struct ResolvedModel {
  ModelConfig config;
  std::string weights_dir;  // for TransformerInit::weights_dir; "" = seeded init
  std::string config_json;  // the directory's config.json text ("" for presets), for saving
};
// Errors: those of ResolveModel (NotFound listing the presets, bad config.json).
StatusOr<ResolvedModel> ResolveTrainableModel(const std::string& spec);

struct HfModelSaveOptions {
  DType dtype = DType::kBF16;                // tensors' dtype in the files. Default: bf16
  std::string base_config_json;              // see HfConfigJson. Default: "" (generated)
  uint64_t max_shard_bytes = 5'000'000'000;  // Default: 5 GB, as transformers
  std::string tensor_name_prefix;  // before every tensor name ("transformer."). Default: ""
  FileSystem* fs = nullptr;        // Default: DefaultFileSystem()
};

// How a Hugging Face model directory stores its weights, so a model trained
// from it can be saved the same way (a drop-in replacement): the tensors'
// dtype (when every tensor has one floating dtype), the shard size (a sharded
// source's largest shard; a single-file source stays one file), and the
// tensor-name prefix (GPT-2 checkpoints written as "transformer.h.0...").
struct HfSourceLayout {
  std::optional<DType> dtype;  // unset: mixed dtypes (the training dtype is used)
  uint64_t max_shard_bytes = 5'000'000'000;
  std::string tensor_name_prefix;
};
// Errors: those of HfCheckpoint::Open.
StatusOr<HfSourceLayout> ReadHfSourceLayout(const std::string& dir, const ModelConfig& config);

// Saves the model whose fp32 weights (all units, layout order, (total_params,))
// are `weights` into `dir` (created if missing) via SaveHfCheckpoint
// (crash-safe). Errors: I/O errors naming the path.
Status SaveHfModel(const std::string& dir, const ParamLayout& layout, const float* weights,
                   const HfModelSaveOptions& options = {});

// Reads `count` fp32 weights of unit `unit` from unit offset `offset` into `out`.
using UnitWeightsReader =
    std::function<Status(int unit, uint64_t offset, uint64_t count, float* out)>;

// The same files, with the weights streamed from `read` tensor piece by
// tensor piece: the host holds kSafetensorsFillChunkBytes of output and
// kSafetensorsConvertElements fp32 values at a time, never the model.
Status SaveHfModel(const std::string& dir, const ParamLayout& layout, const UnitWeightsReader& read,
                   const HfModelSaveOptions& options = {});

}  // namespace tierflow
