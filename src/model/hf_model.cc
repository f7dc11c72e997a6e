// Hugging Face model directories <-> ParamLayout: per-tensor reads into the
// unit buffers (the file's dtype converted to fp32 by HfCheckpoint), and saves
// that convert each fp32 tensor to the output dtype.
#include "model/hf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <vector>

#include "common/cancel.h"
#include "io/file_reader.h"
#include "io/json_util.h"
#include "kernels/pointwise.h"

namespace tierflow {
namespace {

namespace fs = std::filesystem;

std::vector<TensorSpec> UnitSpecs(const ParamLayout& layout, int unit) {
  std::vector<TensorSpec> specs;
  for (const TensorSlot& s : layout.tensors[unit]) {
    specs.push_back(TensorSpec{s.tensor.name, s.tensor.shape});
  }
  return specs;
}

const char* ArchitectureOf(const ModelConfig& c) {
  if (c.family == ModelFamily::kGpt2) return "GPT2LMHeadModel";
  if (c.model_type == "mistral") return "MistralForCausalLM";
  if (c.model_type == "qwen2") return "Qwen2ForCausalLM";
  return "LlamaForCausalLM";
}

const char* TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
  }
  return "float32";
}

// ModelConfig's sizes under each family's config.json name.
struct HfSizeName {
  int64_t ModelConfig::*field;
  const char* gpt2;
  const char* llama;
};
constexpr HfSizeName kHfSizeNames[] = {
    {&ModelConfig::max_seq_len, "n_positions", "max_position_embeddings"},
    {&ModelConfig::d_model, "n_embd", "hidden_size"},
    {&ModelConfig::n_layers, "n_layer", "num_hidden_layers"},
    {&ModelConfig::n_heads, "n_head", "num_attention_heads"},
    {&ModelConfig::d_ff, "n_inner", "intermediate_size"},
};

}  // namespace

TensorNameOptions HfTensorNames(const ModelConfig& config) {
  TensorNameOptions names;
  if (config.family == ModelFamily::kGpt2) names.alternative_prefixes = {"transformer."};
  return names;
}

std::vector<std::string> UnusedHfTensors(const HfCheckpoint& checkpoint,
                                         const ParamLayout& layout) {
  const ModelConfig& c = layout.config;
  const TensorNameOptions names = HfTensorNames(c);
  std::set<std::string> used;
  for (const auto& unit : layout.tensors) {
    for (const TensorSlot& s : unit) {
      StatusOr<HfCheckpoint::Location> loc =
          checkpoint.Resolve(TensorSpec{s.tensor.name, s.tensor.shape}, names);
      if (loc.ok()) used.insert(loc->tensor->name);
    }
  }
  // Buffers rebuilt from the config (see the header), as written with or
  // without the family's alternative prefixes.
  std::set<std::string> derivable;
  auto add = [&](const std::string& name) {
    derivable.insert(name);
    for (const std::string& p : names.alternative_prefixes) derivable.insert(p + name);
  };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string i = std::to_string(l);
    if (c.family == ModelFamily::kGpt2) {
      add("h." + i + ".attn.bias");
      add("h." + i + ".attn.masked_bias");
    } else {
      add("model.layers." + i + ".self_attn.rotary_emb.inv_freq");
    }
  }
  if (c.family != ModelFamily::kGpt2) add("model.rotary_emb.inv_freq");
  std::vector<std::string> unused;
  for (const std::string& name : checkpoint.TensorNames()) {
    if (!used.count(name) && !derivable.count(name)) unused.push_back(name);
  }
  return unused;
}

Status ValidateHfCheckpoint(const HfCheckpoint& checkpoint, const ParamLayout& layout,
                            UnusedHfTensorPolicy unused_policy) {
  std::vector<TensorSpec> specs;
  for (size_t u = 0; u < layout.tensors.size(); ++u) {
    std::vector<TensorSpec> unit = UnitSpecs(layout, static_cast<int>(u));
    specs.insert(specs.end(), unit.begin(), unit.end());
  }
  TF_RETURN_IF_ERROR(checkpoint.Validate(specs, HfTensorNames(layout.config)));
  if (unused_policy == UnusedHfTensorPolicy::kAllow) return Status::Ok();
  const std::vector<std::string> unused = UnusedHfTensors(checkpoint, layout);
  if (unused.empty()) return Status::Ok();
  constexpr size_t kListed = 4;
  std::string listed;
  for (size_t i = 0; i < unused.size() && i < kListed; ++i) {
    listed += (i ? ", " : "") + unused[i];
  }
  if (unused.size() > kListed)
    listed += ", and " + std::to_string(unused.size() - kListed) + " more";
  // The usual causes, said when the names show them.
  const ModelConfig& c = layout.config;
  const std::string layer_prefix = c.family == ModelFamily::kGpt2 ? "h." : "model.layers.";
  int64_t highest_layer = -1;
  bool head = false;
  for (std::string name : unused) {
    for (const std::string& p : HfTensorNames(c).alternative_prefixes) {
      if (name.rfind(p, 0) == 0) name = name.substr(p.size());
    }
    if (name == "lm_head.weight") head = true;
    if (name.rfind(layer_prefix, 0) != 0) continue;
    const std::string rest = name.substr(layer_prefix.size());
    const size_t digits = rest.find_first_not_of("0123456789");
    if (digits == 0 || digits == std::string::npos || digits > 9) continue;
    highest_layer = std::max<int64_t>(highest_layer, std::stoll(rest.substr(0, digits)));
  }
  std::string why;
  if (highest_layer >= c.n_layers) {
    why = " (the files hold layers up to " + std::to_string(highest_layer) + "; config.json says " +
          std::to_string(c.n_layers) + " layers)";
  } else if (head && c.tie_embeddings) {
    why =
        " (config.json ties the head to the token embedding, tie_word_embeddings, and the "
        "files hold a separate lm_head.weight)";
  }
  return InvalidArgumentError(
      "Hugging Face checkpoint " + checkpoint.dir() + ": " + std::to_string(unused.size()) +
      " tensor" + (unused.size() == 1 ? "" : "s") + " in its safetensors " +
      (unused.size() == 1 ? "is" : "are") + " not used by the model its config.json describes" +
      why + ": " + listed +
      ". Training would save a model without them. Fix config.json to describe the weights, "
      "or pass --allow-unused-tensors (tierflow.allow_unused_tensors) to train the tensors it "
      "describes and leave the rest out");
}

Status ReadHfUnit(const HfCheckpoint& checkpoint, const ParamLayout& layout, int unit, float* out) {
  if (unit < 0 || static_cast<size_t>(unit) >= layout.tensors.size()) {
    return InvalidArgumentError("ReadHfUnit: no unit " + std::to_string(unit));
  }
  std::vector<TensorDestination> dests;
  for (const TensorSlot& s : layout.tensors[unit]) {
    dests.push_back(
        TensorDestination{TensorSpec{s.tensor.name, s.tensor.shape}, DType::kF32, out + s.offset});
  }
  return checkpoint.ReadInto(dests, HfTensorNames(layout.config));
}

StatusOr<HfModel> LoadHfModel(const std::string& dir) {
  HfModel model;
  TF_ASSIGN_OR_RETURN(model.config, LoadModelConfig(dir));
  TF_ASSIGN_OR_RETURN(model.config_json,
                      ReadFileToString((std::filesystem::path(dir) / "config.json").string(),
                                       kMaxModelConfigBytes));
  TF_ASSIGN_OR_RETURN(model.layout, MakeParamLayout(model.config));
  TF_ASSIGN_OR_RETURN(HfCheckpoint checkpoint, HfCheckpoint::Open(dir));
  TF_RETURN_IF_ERROR(ValidateHfCheckpoint(checkpoint, model.layout));
  model.weights.resize(static_cast<size_t>(model.layout.total_params));
  for (size_t u = 0; u < model.layout.units.size(); ++u) {
    TF_RETURN_IF_ERROR(CheckCancel("loading the model from " + dir));
    TF_RETURN_IF_ERROR(ReadHfUnit(checkpoint, model.layout, static_cast<int>(u),
                                  model.weights.data() + model.layout.unit_offsets[u]));
  }
  return model;
}

StatusOr<HfSourceLayout> ReadHfSourceLayout(const std::string& dir, const ModelConfig& config) {
  TF_ASSIGN_OR_RETURN(HfCheckpoint checkpoint, HfCheckpoint::Open(dir));
  HfSourceLayout out;
  std::optional<DType> dtype;
  bool mixed = false;
  uint64_t largest_file = 0;
  for (const auto& file : checkpoint.files()) {
    const SafetensorsHeader& h = file->header();
    largest_file = std::max(largest_file, h.data_offset_bytes() + h.data_num_bytes);
    for (const SafetensorsTensorInfo& t : h.tensors) {
      if (!t.dtype) {
        mixed = true;
      } else if (!dtype) {
        dtype = t.dtype;
      } else if (*dtype != *t.dtype) {
        mixed = true;
      }
    }
  }
  if (!mixed) out.dtype = dtype;
  // transformers puts shards up to its max_shard_size; the largest shard is
  // a size the source's own sharding produced. One file stays one file.
  out.max_shard_bytes =
      checkpoint.sharded() ? largest_file : std::max<uint64_t>(out.max_shard_bytes, largest_file);
  for (const std::string& prefix : HfTensorNames(config).alternative_prefixes) {
    const std::vector<std::string> names = checkpoint.TensorNames();
    if (!names.empty() && std::all_of(names.begin(), names.end(), [&](const std::string& n) {
          return n.rfind(prefix, 0) == 0;
        })) {
      out.tensor_name_prefix = prefix;
    }
  }
  return out;
}

StatusOr<ResolvedModel> ResolveTrainableModel(const std::string& spec) {
  ResolvedModel resolved;
  TF_ASSIGN_OR_RETURN(resolved.config, ResolveModel(spec));
  if (PresetModelConfig(spec).ok()) return resolved;  // presets win over paths, as in ResolveModel
  std::error_code ec;
  fs::path path(spec);
  if (fs::is_regular_file(path, ec)) path = path.parent_path();
  if (!fs::is_directory(path, ec) || !fs::exists(path / "config.json", ec)) return resolved;
  TF_ASSIGN_OR_RETURN(resolved.config_json,
                      ReadFileToString((path / "config.json").string(), kMaxModelConfigBytes));
  if (fs::exists(path / kHfSingleFileName, ec) || fs::exists(path / kHfIndexFileName, ec)) {
    resolved.weights_dir = path.string();
  }
  return resolved;
}

StatusOr<std::string> HfConfigJson(const ModelConfig& c, DType dtype,
                                   const std::string& base_json) {
  nlohmann::json j;
  if (!base_json.empty()) {
    // The base is the source model's config.json (outside input): depth-limited
    // before dump() recurses over it; duplicate keys lenient, as when it was loaded.
    JsonParseOptions options;
    options.reject_duplicate_keys = false;
    if (Status parsed = ParseJson(base_json, "HfConfigJson: the base config.json", options, &j);
        !parsed.ok()) {
      return InvalidArgumentError(parsed.message());
    }
    if (!j.is_object()) {
      return InvalidArgumentError("HfConfigJson: the base config.json is not a JSON object");
    }
    j["torch_dtype"] = TorchDTypeName(dtype);
    return j.dump(2) + "\n";
  }
  j["architectures"] = {ArchitectureOf(c)};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["torch_dtype"] = TorchDTypeName(dtype);
  const bool gpt2 = c.family == ModelFamily::kGpt2;
  for (const HfSizeName& size : kHfSizeNames) j[gpt2 ? size.gpt2 : size.llama] = c.*size.field;
  j[gpt2 ? "layer_norm_epsilon" : "rms_norm_eps"] = c.norm_eps;
  if (gpt2) {
    j["n_ctx"] = c.max_seq_len;
    j["activation_function"] = "gelu_new";
  } else {
    j["num_key_value_heads"] = c.n_kv_heads;
    j["head_dim"] = c.head_dim;
    j["rope_theta"] = c.rope_theta;
    if (c.rope_scaling_type == "linear") {
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling_factor}};
    } else if (c.rope_scaling_type == "llama3") {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling_factor},
                           {"low_freq_factor", c.rope_low_freq_factor},
                           {"high_freq_factor", c.rope_high_freq_factor},
                           {"original_max_position_embeddings", c.rope_original_max_positions}};
    }
    j["hidden_act"] = "silu";
    j["mlp_bias"] = c.mlp_bias;
    if (c.model_type != "qwen2") j["attention_bias"] = c.qkv_bias;
  }
  return j.dump(2) + "\n";
}

Status SaveHfModel(const std::string& dir, const ParamLayout& layout, const float* weights,
                   const HfModelSaveOptions& options) {
  const UnitWeightsReader read = [&](int unit, uint64_t offset, uint64_t count, float* out) {
    std::memcpy(out, weights + layout.unit_offsets[unit] + offset, count * sizeof(float));
    return Status::Ok();
  };
  return SaveHfModel(dir, layout, read, options);
}

Status SaveHfModel(const std::string& dir, const ParamLayout& layout, const UnitWeightsReader& read,
                   const HfModelSaveOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return IoError("cannot create the model directory '" + dir + "': " + ec.message());
  }
  TF_ASSIGN_OR_RETURN(std::string config_json,
                      HfConfigJson(layout.config, options.dtype, options.base_config_json));
  // Each tensor streams: fp32 from `read`, converted block by block into the
  // writer's buffer.
  const size_t esize = DTypeSize(options.dtype);
  const DType dtype = options.dtype;
  auto scratch = std::make_shared<std::vector<float>>();
  std::vector<SafetensorsEntry> entries;
  for (size_t u = 0; u < layout.tensors.size(); ++u) {
    for (const TensorSlot& s : layout.tensors[u]) {
      const int unit = static_cast<int>(u);
      const auto first = static_cast<uint64_t>(s.offset);
      SafetensorsFill fill = [&read, scratch, unit, first, esize, dtype](
                                 uint64_t byte_offset, uint64_t num_bytes, void* out) -> Status {
        const uint64_t begin = byte_offset / esize, n = num_bytes / esize;
        auto* dst = static_cast<unsigned char*>(out);
        if (dtype == DType::kF32) return read(unit, first + begin, n, static_cast<float*>(out));
        for (uint64_t done = 0; done < n;) {
          const uint64_t block = std::min(n - done, kSafetensorsConvertElements);
          scratch->resize(std::max<size_t>(scratch->size(), block));
          TF_RETURN_IF_ERROR(read(unit, first + begin + done, block, scratch->data()));
          TF_RETURN_IF_ERROR(
              CastCpu(DType::kF32, scratch->data(), dtype, dst + done * esize, block));
          done += block;
        }
        return Status::Ok();
      };
      entries.push_back(SafetensorsEntry{options.tensor_name_prefix + s.tensor.name, dtype,
                                         s.tensor.shape, nullptr, fill});
    }
  }
  HfSaveOptions save;
  save.max_shard_bytes = options.max_shard_bytes;
  save.fs = options.fs;
  return SaveHfCheckpoint(dir, entries, config_json, save);
}

}  // namespace tierflow
