// Reading a `tierflow train` JSON config: DeepSpeed's keys (so the configs
// people already have keep working) and tierflow's own under "tierflow".
//
// Every value is type-checked; a wrong type or range is an InvalidArgument
// naming the file and the JSON path. "auto" (written by the HF Trainer
// integration) keeps the default / command-line value and is noted in
// `warnings`. Keys tierflow knows but does not need are warned about as
// ignored; keys nobody knows are warned about as unknown. Two keys that set
// the same field to different values (train_micro_batch_size_per_gpu and
// tierflow.micro_batch, bf16 and fp16 both enabled, ...) are an error naming
// both.
#include "train/train_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "io/file_reader.h"
#include "io/json_reader.h"
#include "io/json_util.h"
#include "tierflow/nvme_io.h"
#include "train/train_options.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Join(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// Never serializes a container whole (an outside value may be huge or deep).
std::string Describe(const Json& v) { return JsonExcerpt(v, 60); }

std::string FormatValue(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}
std::string FormatValue(float v) { return FormatValue(static_cast<double>(v)); }
std::string FormatValue(int v) { return std::to_string(v); }
std::string FormatValue(int64_t v) { return std::to_string(v); }
std::string FormatValue(uint32_t v) { return std::to_string(v); }
std::string FormatValue(uint64_t v) { return std::to_string(v); }
std::string FormatValue(bool v) { return v ? "true" : "false"; }
std::string FormatValue(const std::string& v) { return "\"" + v + "\""; }
template <typename E>
requires requires { ChoiceNames<E>::kTable; }
std::string FormatValue(E v) { return FormatValue(std::string(ChoiceName(v))); }
std::string FormatValue(DType v) { return FormatValue(std::string(DTypeName(v))); }
std::string FormatValue(const DeviceSpec& v) { return FormatValue(DeviceSpecName(v)); }
template <typename T>
std::string FormatValue(const std::optional<T>& v) {
  return v.has_value() ? FormatValue(*v) : "\"auto\"";
}
std::string FormatValue(SubGroupCut v) {
  return v == SubGroupCut::kSlices ? "\"slices of at most N\""
                                   : "\"whole tensors of at least N (DeepSpeed's rule)\"";
}
std::string FormatValue(OffloadPlacement v) {
  return FormatValue(std::string(OffloadPlacementName(v)));
}
std::string FormatValue(ParamOffload v) { return FormatValue(std::string(ParamOffloadName(v))); }
std::string FormatValue(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + FormatValue(v[i]);
  return out + "]";
}
std::string FormatValue(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// DeepSpeed keys tierflow accepts and ignores (they tune multi-GPU
// communication, monitoring or features tierflow does not have).
const std::set<std::string>& IgnoredTopLevelKeys() {
  static const std::set<std::string> kKeys = {"steps_per_print",
                                              "wall_clock_breakdown",
                                              "zero_allow_untested_optimizer",
                                              "zero_force_ds_cpu_optimizer",
                                              "tensorboard",
                                              "wandb",
                                              "csv_monitor",
                                              "comet",
                                              "comms_logger",
                                              "flops_profiler",
                                              "dump_state",
                                              "prescale_gradients",
                                              "gradient_predivide_factor",
                                              "communication_data_type",
                                              "sparse_gradients",
                                              "memory_breakdown",
                                              "elasticity",
                                              "data_efficiency",
                                              "compression_training",
                                              "checkpoint",
                                              "data_types",
                                              "autotuning",
                                              "sparse_attention",
                                              "monitor_config",
                                              "seq_parallel_communication_data_type",
                                              "sequence_parallel_size",
                                              "torch_autocast",
                                              "graph_harvesting",
                                              "use_data_before_expert_parallelism",
                                              "timers",
                                              "weight_quantization",
                                              "hybrid_engine",
                                              "curriculum_learning",
                                              "progressive_layer_drop",
                                              "eigenvalue",
                                              "quantize_training",
                                              "disable_allgather",
                                              "fp32_allreduce",
                                              "amp",
                                              "train_dataloader",
                                              "dataloader_drop_last",
                                              "zero_force_ds_cpu_optimizer",
                                              "compile",
                                              "nebula",
                                              "aws_cpu_offload"};
  return kKeys;
}

const std::set<std::string>& IgnoredZeroKeys() {
  static const std::set<std::string> kKeys = {"allgather_partitions",
                                              "allgather_bucket_size",
                                              "overlap_comm",
                                              "reduce_scatter",
                                              "reduce_bucket_size",
                                              "contiguous_gradients",
                                              "round_robin_gradients",
                                              "elastic_checkpoint",
                                              "load_from_fp32_weights",
                                              "ignore_unused_parameters",
                                              "legacy_stage1",
                                              "use_multi_rank_bucket_allreduce",
                                              "mics_shard_size",
                                              "mics_hierarchical_params_gather",
                                              "zero_hpz_partition_size",
                                              "zero_quantized_weights",
                                              "zero_quantized_nontrainable_weights",
                                              "zero_quantized_gradients",
                                              "memory_efficient_linear",
                                              "gather_16bit_weights_on_model_save",
                                              "stage3_gather_16bit_weights_on_model_save",
                                              "stage3_gather_fp16_weights_on_model_save",
                                              "stage3_prefetch_bucket_size",
                                              "stage3_param_persistence_threshold",
                                              "stage3_model_persistence_threshold",
                                              "stage3_max_live_parameters",
                                              "stage3_max_reuse_distance",
                                              "prefetch_bucket_size",
                                              "param_persistence_threshold",
                                              "model_persistence_threshold",
                                              "max_live_parameters",
                                              "max_reuse_distance",
                                              "stage3_module_granularity_threshold",
                                              "stage3_use_all_reduce_for_fetch_params",
                                              "stage3_allgather_sequential",
                                              "allgather_sequential",
                                              "stage3_partition_stream_chunk_size",
                                              "partition_stream_chunk_size",
                                              "zeropp_loco_param",
                                              "enable_sanity_checks",
                                              "save_muon_momentum_buffer_in_memory",
                                              "leaf_module",
                                              "zenflow",
                                              "cpu_offload_use_pin_memory",
                                              "log_trace_cache_warnings",
                                              "override_module_apply",
                                              "pipeline_loading_checkpoint",
                                              "module_granularity_threshold",
                                              "use_all_reduce_for_fetch_params"};
  return kKeys;
}

// Keys of a DeepSpeed block that tierflow accepts and ignores, with the
// reason its warning gives. A value DeepSpeed would read as a flag or a
// count is still checked (a wrong type stays an error; "auto" is noted).
enum class IgnoredValue : uint8_t { kAny, kBool, kCount };
struct IgnoredKeys {
  std::set<std::string> keys;
  const char* why;
  IgnoredValue value = IgnoredValue::kAny;
  int64_t max_count = std::numeric_limits<int64_t>::max();  // kCount: 0 to this
};

class Parser {
 public:
  Parser(std::string label, const TrainConfig& base, int world_size)
      : label_(std::move(label)), json_(label_), c_(base), world_(std::max(world_size, 1)) {}

  StatusOr<TrainConfig> Run(const Json& root) {
    if (!root.is_object()) {
      return InvalidArgumentError(label_ + ": the config must be a JSON object ({...}), got " +
                                  Describe(root));
    }
    TF_RETURN_IF_ERROR(TopLevel(root));
    TF_RETURN_IF_ERROR(ResolveBatch());
    TF_RETURN_IF_ERROR(ResolvePrecision());
    TF_RETURN_IF_ERROR(ResolveOffload());
    DeepSpeedDefaults(root);
    for (auto& w : warnings_) c_.warnings.push_back(PrintableText(label_) + ": " + w);
    return c_;
  }

 private:
  // ---- errors and notes ----
  // Typed reads go through io/json_reader.h; these keep the sections short.
  Status Error(const std::string& path, const std::string& what) const {
    return json_.Error(path, what);
  }
  Status TypeError(const std::string& path, const std::string& expected, const Json& v) const {
    return json_.TypeError(path, expected, v);
  }
  // Keys come from the file: a JSON key may hold any character (an escape
  // sequence written as \u001b), so a warning is made printable.
  void Warn(const std::string& w) { warnings_.push_back(PrintableText(w)); }
  void Unknown(const std::string& path) { Warn("unknown key '" + path + "' ignored"); }
  void Ignored(const std::string& path, const std::string& why) {
    Warn("'" + path + "' ignored: " + why);
  }
  // True (and noted) if `v` is "auto": the field keeps its current value.
  bool IsAuto(const Json& v, const std::string& path) {
    if (v.is_string() && Lower(v.get<std::string>()) == "auto") {
      Warn("'" + path + "' is \"auto\": keeping the default / command-line value");
      return true;
    }
    return false;
  }

  // ---- typed readers: each names the path on failure ----
  Status ReadNumber(const Json& v, const std::string& path, double* out) const {
    return json_.Number(v, path, out);
  }
  Status ReadInt(const Json& v, const std::string& path, int64_t min_value, int64_t max_value,
                 int64_t* out) const {
    return json_.Int(v, path, min_value, max_value, out);
  }
  Status ReadBool(const Json& v, const std::string& path, bool* out) const {
    return json_.Bool(v, path, out);
  }
  Status ReadString(const Json& v, const std::string& path, std::string* out) const {
    return json_.String(v, path, out);
  }
  Status ReadStringList(const Json& v, const std::string& path,
                        std::vector<std::string>* out) const {
    return json_.StringList(v, path, out);
  }
  Status RequireObject(const Json& v, const std::string& path) const {
    return json_.Object(v, path);
  }

  // Each key of the object `v` at `path`: its name, value and JSON path.
  template <typename F>
  Status ForEachKey(const Json& v, const std::string& path, F&& visit) {
    TF_RETURN_IF_ERROR(RequireObject(v, path));
    for (auto it = v.begin(); it != v.end(); ++it) {
      TF_RETURN_IF_ERROR(visit(it.key(), it.value(), Join(path, it.key())));
    }
    return Status::Ok();
  }

  // ---- assignment with contradiction detection ----
  // Records which key set each field; a second key setting it differently
  // is a contradiction naming both.
  template <typename T>
  Status Set(const std::string& field, const std::string& path, T* dst, T value) {
    std::string shown = FormatValue(value);
    auto it = set_by_.find(field);
    if (it != set_by_.end() && it->second.second != shown) {
      return InvalidArgumentError(label_ + ": contradictory settings: '" + it->second.first +
                                  "' = " + it->second.second + " but '" + path + "' = " + shown +
                                  "; remove one of them");
    }
    set_by_[field] = {path, shown};
    c_.origins[field] = PrintableText(label_) + ": " + path;
    *dst = std::move(value);
    return Status::Ok();
  }
  bool WasSet(const std::string& field) const { return set_by_.count(field) != 0; }

  // Readers that also assign (skipping "auto").
  Status Float(const Json& v, const std::string& path, const std::string& field, float* dst) {
    if (IsAuto(v, path)) return Status::Ok();
    double d = 0;
    TF_RETURN_IF_ERROR(ReadNumber(v, path, &d));
    if (std::fabs(d) > std::numeric_limits<float>::max()) {
      return Error(path, "value " + Describe(v) + " does not fit a 32-bit float");
    }
    return Set(field, path, dst, static_cast<float>(d));
  }
  Status Double(const Json& v, const std::string& path, const std::string& field, double* dst) {
    if (IsAuto(v, path)) return Status::Ok();
    double d = 0;
    TF_RETURN_IF_ERROR(ReadNumber(v, path, &d));
    return Set(field, path, dst, d);
  }
  template <typename T>
  Status Int(const Json& v, const std::string& path, const std::string& field, T* dst,
             int64_t min_value = std::numeric_limits<int64_t>::min()) {
    if (IsAuto(v, path)) return Status::Ok();
    int64_t max_value = static_cast<int64_t>(
        std::min<uint64_t>(std::numeric_limits<T>::max(), std::numeric_limits<int64_t>::max()));
    int64_t lo = std::max<int64_t>(
        min_value, std::is_signed_v<T> ? static_cast<int64_t>(std::numeric_limits<T>::min()) : 0);
    int64_t i = 0;
    TF_RETURN_IF_ERROR(ReadInt(v, path, lo, max_value, &i));
    return Set(field, path, dst, static_cast<T>(i));
  }
  Status Bool(const Json& v, const std::string& path, const std::string& field, bool* dst) {
    if (IsAuto(v, path)) return Status::Ok();
    bool b = false;
    TF_RETURN_IF_ERROR(ReadBool(v, path, &b));
    return Set(field, path, dst, b);
  }
  Status String(const Json& v, const std::string& path, const std::string& field,
                std::string* dst) {
    if (IsAuto(v, path)) return Status::Ok();
    std::string s;
    TF_RETURN_IF_ERROR(ReadString(v, path, &s));
    return Set(field, path, dst, s);
  }
  // One of an enum's names (train/train_choices.h).
  template <typename E>
  Status Choice(const Json& v, const std::string& path, const std::string& field, E* dst) {
    if (IsAuto(v, path)) return Status::Ok();
    std::string s;
    TF_RETURN_IF_ERROR(ReadString(v, path, &s));
    StatusOr<E> e = ParseChoice<E>(s);
    if (!e.ok()) return Error(path, e.status().message());
    return Set(field, path, dst, *e);
  }

  // ---- DeepSpeed blocks ----
  // A key read by code of its own: one with no options-table row, or one
  // whose reading differs from its row's.
  using KeyRead = std::function<Status(const Json&, const std::string&)>;
  struct KeyReader {
    std::string_view key;
    KeyRead read;
  };
  // A section reader (Parser::Zero, ...) as a KeyRead.
  KeyRead Section(Status (Parser::*section)(const Json&, const std::string&)) {
    return [this, section](const Json& x, const std::string& p) { return (this->*section)(x, p); };
  }

  // The DeepSpeed block `v` at `path`, whose DeepSpeed name is `block`
  // ("fp16", "zero_optimization.offload_optimizer"; "" for the top level).
  // Each key is read by its reader in `readers`; else, where the options
  // table (train/train_options.h) names it as a row's DeepSpeed key, as that
  // row's field, like its tierflow.KEY; else it is one of `ignored`, noted;
  // else it is unknown.
  Status DeepSpeedBlock(const Json& v, const std::string& path, std::string_view block,
                        std::span<const IgnoredKeys> ignored,
                        std::initializer_list<KeyReader> readers) {
    return ForEachKey(v, path,
                      [&](const std::string& k, const Json& x, const std::string& p) -> Status {
                        for (const KeyReader& r : readers) {
                          if (r.key == k) return r.read(x, p);
                        }
                        if (const TrainOption* o = FindTrainOptionByDeepSpeedKey(block, k)) {
                          return OptionKey(*o, x, p);
                        }
                        for (const IgnoredKeys& row : ignored) {
                          if (row.keys.count(k) != 0) return Ignore(row, x, p);
                        }
                        Unknown(p);
                        return Status::Ok();
                      });
  }

  Status Ignore(const IgnoredKeys& row, const Json& x, const std::string& p) {
    if (row.value != IgnoredValue::kAny) {
      if (IsAuto(x, p)) return Status::Ok();
      if (row.value == IgnoredValue::kBool) {
        bool b = false;
        TF_RETURN_IF_ERROR(ReadBool(x, p, &b));
      } else {
        int64_t n = 0;
        TF_RETURN_IF_ERROR(ReadInt(x, p, 0, row.max_count, &n));
      }
    }
    Ignored(p, row.why);
    return Status::Ok();
  }

  // ---- sections ----
  Status TopLevel(const Json& root) {
    static const IgnoredKeys kIgnored[] = {
        {.keys = IgnoredTopLevelKeys(),
         .why = "not used by tierflow (single GPU, no DeepSpeed runtime features)"},
        {.keys = {"activation_checkpointing"},
         .why = "DeepSpeed's activation checkpointing block configures partitioning; "
                "use tierflow.activation_checkpointing (or --activation-checkpointing) "
                "to turn recomputation on"}};
    // The batch sizes, resolved together by ResolveBatch.
    auto batch = [this](std::optional<int64_t>* dst) -> KeyRead {
      return [this, dst](const Json& x, const std::string& p) -> Status {
        if (IsAuto(x, p)) return Status::Ok();
        int64_t i = 0;
        TF_RETURN_IF_ERROR(ReadInt(x, p, 1, std::numeric_limits<int>::max(), &i));
        *dst = i;
        return Status::Ok();
      };
    };
    auto zero = [&](const Json& x, const std::string& p) -> Status {
      if (!x.is_boolean()) return Zero(x, p);
      // DeepSpeed's deprecated form: true is stage 1, false stage 0.
      zero_stage_ = x.get<bool>() ? 1 : 0;
      Warn("'zero_optimization' = " + std::string(x.get<bool>() ? "true" : "false") +
           " is DeepSpeed's deprecated form of stage " + (x.get<bool>() ? "1" : "0") +
           "; read as that stage, as DeepSpeed reads it");
      return Status::Ok();
    };
    return DeepSpeedBlock(root, "", "", kIgnored,
                          {{"train_micro_batch_size_per_gpu", batch(&ds_micro_)},
                           {"gradient_accumulation_steps", batch(&ds_accum_)},
                           {"train_batch_size", batch(&ds_train_batch_)},
                           {"optimizer", Section(&Parser::Optimizer)},
                           {"scheduler", Section(&Parser::Scheduler)},
                           {"fp16", Section(&Parser::Fp16)},
                           {"bf16", Section(&Parser::Bf16)},
                           {"bfloat16", Section(&Parser::Bf16)},
                           {"zero_optimization", zero},
                           {"aio", Section(&Parser::Aio)},
                           {"tierflow", Section(&Parser::Tierflow)}});
  }

  Status Optimizer(const Json& v, const std::string& path) {
    static const IgnoredKeys kIgnoredParams[] = {
        {.keys = {"torch_adam", "fp32_optimizer_states", "set_grad_none", "fused"},
         .why = "tierflow always uses its own offloaded Adam"}};
    std::optional<std::string> type;
    std::optional<bool> adam_w_mode;
    auto read_adam_w_mode = [&](const Json& x, const std::string& p) -> Status {
      if (IsAuto(x, p)) return Status::Ok();
      bool b = false;
      TF_RETURN_IF_ERROR(ReadBool(x, p, &b));
      adam_w_mode = b;
      return Status::Ok();
    };
    auto params = [&](const Json& x, const std::string& p) -> Status {
      return DeepSpeedBlock(
          x, p, "optimizer.params", kIgnoredParams,
          {{"betas",
            [&](const Json& y, const std::string& q) -> Status {
              if (IsAuto(y, q)) return Status::Ok();
              if (!y.is_array() || y.size() != 2 || !y[0].is_number() || !y[1].is_number()) {
                return TypeError(q, "an array of two numbers", y);
              }
              TF_RETURN_IF_ERROR(Float(y[0], q + "[0]", "beta1", &c_.beta1));
              return Float(y[1], q + "[1]", "beta2", &c_.beta2);
            }},
           {"adam_w_mode", read_adam_w_mode},
           {"bias_correction",
            [&](const Json& y, const std::string& q) {
              return Bool(y, q, "bias_correction", &c_.bias_correction);
            }},
           {"amsgrad",
            [&](const Json& y, const std::string& q) -> Status {
              bool b = false;
              if (IsAuto(y, q)) return Status::Ok();
              TF_RETURN_IF_ERROR(ReadBool(y, q, &b));
              if (b) return Error(q, "AMSGrad is not supported; remove the key or set it to false");
              return Status::Ok();
            }},
           {"max_grad_norm", [&](const Json&, const std::string& q) {
              return Error(q,
                           "not an optimizer parameter (DeepSpeed rejects it too); use the "
                           "top-level 'gradient_clipping' instead");
            }}});
    };
    TF_RETURN_IF_ERROR(DeepSpeedBlock(v, path, "optimizer", {},
                                      {{"type",
                                        [&](const Json& x, const std::string& p) -> Status {
                                          std::string t;
                                          TF_RETURN_IF_ERROR(ReadString(x, p, &t));
                                          type = t;
                                          return Status::Ok();
                                        }},
                                       {"params", params},
                                       {"adam_w_mode", read_adam_w_mode}}));
    if (!type) {
      return Error(path + ".type", "missing: name the optimizer (\"AdamW\" or \"Adam\")");
    }
    std::string t = Lower(*type);
    TrainOptimizer name = TrainOptimizer::kAdamW;
    if (t == "adamw") {
      if (adam_w_mode && !*adam_w_mode) {
        Warn("'" + path +
             ".params.adam_w_mode' is false but type is AdamW: DeepSpeed uses "
             "decoupled weight decay for AdamW regardless; so does tierflow");
      }
    } else if (t == "adam") {
      // DeepSpeed: type "Adam" means AdamW (decoupled weight decay) unless
      // adam_w_mode is explicitly false (ADAM_W_MODE_DEFAULT = True).
      name = adam_w_mode.value_or(true) ? TrainOptimizer::kAdamW : TrainOptimizer::kAdam;
    } else {
      return Error(path + ".type", "optimizer '" + *type +
                                       "' is not supported; tierflow supports \"Adam\" and "
                                       "\"AdamW\" (case-insensitive)");
    }
    return Set("optimizer", path + ".type", &c_.optimizer, name);
  }

  Status Scheduler(const Json& v, const std::string& path) {
    TF_RETURN_IF_ERROR(RequireObject(v, path));
    if (!v.contains("type")) {
      return Error(path + ".type",
                   "missing: name the schedule (WarmupLR, WarmupDecayLR or "
                   "WarmupCosineLR)");
    }
    std::string type;
    TF_RETURN_IF_ERROR(ReadString(v["type"], path + ".type", &type));
    std::string t = Lower(type);
    LrScheduleConfig s = c_.scheduler;
    // DeepSpeed's constructor defaults apply to keys the block leaves out;
    // "auto" keeps the base (default / command-line) value instead.
    const Json* params = v.contains("params") ? &v["params"] : nullptr;
    auto absent = [&](const char* key) {
      return params == nullptr || !params->is_object() || !params->contains(key);
    };
    if (t == "warmuplr" || t == "warmupdecaylr") {
      s.type = t == "warmuplr" ? LrScheduleType::kWarmupLR : LrScheduleType::kWarmupDecayLR;
      if (absent("warmup_min_lr")) s.warmup_min_lr = 0.0f;
      if (absent("warmup_max_lr")) s.warmup_max_lr = 0.001f;
      if (absent("warmup_num_steps")) s.warmup_num_steps = 1000;
      if (absent("warmup_type")) s.warmup_type = WarmupType::kLog;
    } else if (t == "warmupcosinelr") {
      s.type = LrScheduleType::kWarmupCosineLR;
      if (absent("warmup_min_ratio")) s.warmup_min_ratio = 0.0f;
      if (absent("warmup_num_steps")) s.warmup_num_steps = 1000;
      if (absent("cos_min_ratio")) s.cos_min_ratio = 0.0001f;
      if (absent("warmup_type")) s.warmup_type = WarmupType::kLog;
    } else {
      return Error(path + ".type", "schedule '" + type +
                                       "' is not supported; use WarmupLR, WarmupDecayLR or "
                                       "WarmupCosineLR (or remove the scheduler block for a "
                                       "constant learning rate)");
    }
    bool has_total = s.type != LrScheduleType::kWarmupLR;
    bool cosine = s.type == LrScheduleType::kWarmupCosineLR;
    for (auto it = v.begin(); it != v.end(); ++it) {
      std::string p = Join(path, it.key());
      if (it.key() == "type") continue;
      if (it.key() != "params") {
        Unknown(p);
        continue;
      }
      TF_RETURN_IF_ERROR(RequireObject(it.value(), p));
      for (auto jt = it.value().begin(); jt != it.value().end(); ++jt) {
        const std::string& k = jt.key();
        const Json& x = jt.value();
        std::string q = Join(p, k);
        if (k == "warmup_num_steps") {
          TF_RETURN_IF_ERROR(Int(x, q, "scheduler.warmup_num_steps", &s.warmup_num_steps, 0));
        } else if (k == "warmup_type") {
          if (IsAuto(x, q)) continue;
          std::string w;
          TF_RETURN_IF_ERROR(ReadString(x, q, &w));
          StatusOr<WarmupType> warmup = ParseChoice<WarmupType>(w);
          if (!warmup.ok()) {
            // DeepSpeed's schedules warn and warm up logarithmically.
            Warn("'" + q + "' = \"" + w +
                 "\" is not a warmup type: warming up with \"log\", as DeepSpeed does (use "
                 "\"log\" or \"linear\")");
            warmup = WarmupType::kLog;
          }
          TF_RETURN_IF_ERROR(Set("scheduler.warmup_type", q, &s.warmup_type, *warmup));
        } else if (!cosine && k == "warmup_min_lr") {
          TF_RETURN_IF_ERROR(Float(x, q, "scheduler.warmup_min_lr", &s.warmup_min_lr));
        } else if (!cosine && k == "warmup_max_lr") {
          // HF writes "auto" here and fills in the optimizer's lr: same as ours (-1).
          if (x.is_string() && Lower(x.get<std::string>()) == "auto") {
            Warn("'" + q + "' is \"auto\": the optimizer's lr is used");
            s.warmup_max_lr = -1.0f;
            continue;
          }
          TF_RETURN_IF_ERROR(Float(x, q, "scheduler.warmup_max_lr", &s.warmup_max_lr));
        } else if (has_total && k == "total_num_steps") {
          if (x.is_string() && Lower(x.get<std::string>()) == "auto") {
            Warn("'" + q + "' is \"auto\": the run's step count is used");
            s.total_num_steps = 0;
            continue;
          }
          TF_RETURN_IF_ERROR(Int(x, q, "scheduler.total_num_steps", &s.total_num_steps, 1));
        } else if (cosine && k == "warmup_min_ratio") {
          TF_RETURN_IF_ERROR(Float(x, q, "scheduler.warmup_min_ratio", &s.warmup_min_ratio));
        } else if (cosine && k == "cos_min_ratio") {
          TF_RETURN_IF_ERROR(Float(x, q, "scheduler.cos_min_ratio", &s.cos_min_ratio));
        } else if (k == "last_batch_iteration") {
          Ignored(q, "use --resume to continue a run's schedule");
        } else {
          Unknown(q);
        }
      }
    }
    c_.scheduler = s;
    return Status::Ok();
  }

  // fp16.enabled / bf16.enabled: the flag, or nullopt for "auto" (noted:
  // the precision stays the default / command-line one).
  StatusOr<std::optional<bool>> Enabled(const Json& x, const std::string& p) {
    if (IsAuto(x, p)) {
      precision_auto_ = true;
      return std::optional<bool>();
    }
    bool b = false;
    TF_RETURN_IF_ERROR(ReadBool(x, p, &b));
    return std::optional<bool>(b);
  }

  Status Fp16(const Json& v, const std::string& path) {
    static const IgnoredKeys kIgnored[] = {
        {.keys = {"auto_cast", "consecutive_hysteresis", "fp16_master_weights_and_grads", "type"},
         .why = "tierflow keeps fp32 master weights and uses the standard dynamic loss scaler"}};
    return DeepSpeedBlock(v, path, "fp16", kIgnored,
                          {{"enabled", [&](const Json& x, const std::string& p) -> Status {
                              TF_ASSIGN_OR_RETURN(const std::optional<bool> enabled, Enabled(x, p));
                              if (enabled.has_value()) fp16_enabled_ = *enabled;
                              return Status::Ok();
                            }}});
  }

  Status Bf16(const Json& v, const std::string& path) {
    static const IgnoredKeys kIgnored[] = {
        {.keys = {"immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
                  "bf16_optimizer_states"},
         .why = "tierflow keeps fp32 master weights and optimizer state"}};
    auto enabled = [&](const Json& x, const std::string& p) -> Status {
      TF_ASSIGN_OR_RETURN(const std::optional<bool> on, Enabled(x, p));
      if (!on.has_value()) return Status::Ok();
      // DeepSpeed reads "bf16" and looks at its old spelling "bfloat16"
      // only without it: so does tierflow, saying so.
      if (path == "bfloat16" && bf16_path_ == "bf16" && bf16_enabled_.has_value()) {
        Ignored(p, "'bf16' is given too, and DeepSpeed reads that one");
        return Status::Ok();
      }
      if (path == "bf16" && bf16_path_ == "bfloat16" && bf16_enabled_.has_value()) {
        Ignored("bfloat16.enabled", "'bf16' is given too, and DeepSpeed reads that one");
      }
      bf16_enabled_ = *on;
      bf16_path_ = path;
      return Status::Ok();
    };
    return DeepSpeedBlock(v, path, "bf16", kIgnored, {{"enabled", enabled}});
  }

  Status Zero(const Json& v, const std::string& path) {
    static const IgnoredKeys kIgnored[] = {
        {.keys = IgnoredZeroKeys(),
         .why = "multi-GPU communication / ZeRO-3 partitioning setting, not used on one GPU"}};
    auto stage = [&](const Json& x, const std::string& p) -> Status {
      if (IsAuto(x, p)) return Status::Ok();
      int64_t n = 0;
      TF_RETURN_IF_ERROR(ReadInt(x, p, 0, 3, &n));
      zero_stage_ = n;
      return Status::Ok();
    };
    // DeepSpeed's older spelling of offload_optimizer.device = "cpu".
    auto cpu_offload = [&](const Json& x, const std::string& p) -> Status {
      bool b = false;
      if (IsAuto(x, p)) return Status::Ok();
      TF_RETURN_IF_ERROR(ReadBool(x, p, &b));
      if (b) {
        TF_RETURN_IF_ERROR(Set("offload", p, &c_.offload, OffloadPlacement::kHost));
        offload_requested_ = p;
      }
      return Status::Ok();
    };
    // DeepSpeed's meaning (whole tensors, at least N; 0: one tensor each)
    // applies at stage 3 only: ResolveOffload decides.
    auto sub_group_size = [&](const Json& x, const std::string& p) -> Status {
      if (IsAuto(x, p)) return Status::Ok();
      int64_t n = 0;
      TF_RETURN_IF_ERROR(ReadInt(x, p, 0, std::numeric_limits<int64_t>::max(), &n));
      ds_sub_group_ = static_cast<uint64_t>(n);
      return Status::Ok();
    };
    // DeepSpeed's older spelling of offload_param.device = "cpu".
    auto cpu_offload_param = [&](const Json& x, const std::string& p) -> Status {
      bool on = false;
      TF_RETURN_IF_ERROR(ReadBool(x, p, &on));
      if (on) return Set("offload_param", p, &c_.offload_param, ParamOffload::kHost);
      return Status::Ok();
    };
    return DeepSpeedBlock(v, path, "zero_optimization", kIgnored,
                          {{"stage", stage},
                           {"offload_optimizer", Section(&Parser::OffloadOptimizer)},
                           {"cpu_offload", cpu_offload},
                           {"sub_group_size", sub_group_size},
                           {"offload_param", Section(&Parser::OffloadParam)},
                           {"cpu_offload_param", cpu_offload_param}});
  }

  // An offload section's nvme_path: a string or a list of non-empty directories.
  Status NvmePath(const Json& x, const std::string& p) {
    if (IsAuto(x, p)) return Status::Ok();
    std::vector<std::string> paths;
    TF_RETURN_IF_ERROR(ReadStringList(x, p, &paths));
    if (paths.empty()) return Error(p, "the list is empty; name at least one directory");
    for (const std::string& q : paths) {
      if (q.empty()) return Error(p, "an empty path; name a directory on the drive");
    }
    return Set("nvme_paths", p, &c_.nvme_paths, paths);
  }

  // zero_optimization.offload_param: where streamed weights live.
  Status OffloadParam(const Json& v, const std::string& path) {
    static const IgnoredKeys kIgnored[] = {
        {.keys = {"buffer_count", "buffer_size", "max_in_cpu"},
         .why = "tierflow streams whole units into device slots sized by the planner; set "
                "tierflow.param_slots (or --param-slots) to choose how many",
         .value = IgnoredValue::kCount}};
    auto device = [&](const Json& x, const std::string& p) -> Status {
      if (IsAuto(x, p)) return Status::Ok();
      std::string d;
      TF_RETURN_IF_ERROR(ReadString(x, p, &d));
      StatusOr<ParamOffload> where = ParseParamOffload(label_ + ": " + p, Lower(d));
      TF_RETURN_IF_ERROR(where.status());
      return Set("offload_param", p, &c_.offload_param, *where);
    };
    auto pin_memory = [&](const Json& x, const std::string& p) -> Status {
      bool pin = true;
      TF_RETURN_IF_ERROR(Bool(x, p, "offload_param.pin_memory", &pin));
      if (!pin) {
        Ignored(p,
                "streamed weights are always in page-locked memory (they are DMA'd to the "
                "device every micro-batch)");
      }
      return Status::Ok();
    };
    return DeepSpeedBlock(v, path, "zero_optimization.offload_param", kIgnored,
                          {{"device", device},
                           // One swap directory list serves the weights and the optimizer state.
                           {"nvme_path", Section(&Parser::NvmePath)},
                           {"pin_memory", pin_memory}});
  }

  Status OffloadOptimizer(const Json& v, const std::string& path) {
    static const IgnoredKeys kIgnored[] = {
        // DeepSpeed's pool of single-tensor swap buffers; tierflow's I/O
        // slots each hold a whole sub-group's state and are sized from the
        // drive's profile (tierflow.buffer_count sets them).
        {.keys = {"buffer_count"},
         .why = "DeepSpeed's pool of single-tensor NVMe swap buffers has no counterpart: "
                "tierflow's I/O slots each hold a sub-group's whole state and follow the "
                "drive's profile; set tierflow.buffer_count to choose them",
         .value = IgnoredValue::kCount,
         .max_count = std::numeric_limits<int>::max()},
        {.keys = {"fast_init", "pipeline", "pipeline_read", "pipeline_write", "super_offload",
                  "cpuadam_cores_perc", "convert_grad_on_cpu"},
         .why = "tierflow always overlaps NVMe reads/writes with the step "
                "(see tierflow.pipeline)"}};
    auto device = [&](const Json& x, const std::string& p) -> Status {
      if (IsAuto(x, p)) return Status::Ok();
      std::string d;
      TF_RETURN_IF_ERROR(ReadString(x, p, &d));
      std::string dl = Lower(d);
      if (dl == "cpu") {
        TF_RETURN_IF_ERROR(Set("offload", p, &c_.offload, OffloadPlacement::kHost));
        offload_requested_ = p;
      } else if (dl == "nvme") {
        TF_RETURN_IF_ERROR(Set("offload", p, &c_.offload, OffloadPlacement::kNvme));
        offload_requested_ = p;
      } else if (dl == "none") {
        Warn("'" + p +
             "' is \"none\": tierflow always offloads optimizer state; using host "
             "memory");
        TF_RETURN_IF_ERROR(Set("offload", p, &c_.offload, OffloadPlacement::kHost));
      } else {
        return Error(p, "'" + d +
                            "' is not an offload device; use \"cpu\" (host memory) or "
                            "\"nvme\"");
      }
      return Status::Ok();
    };
    // DeepSpeed: the share of optimizer state the CPU updates, the rest
    // staying on the GPU; read at stage 3 only (ResolveOffload).
    auto ratio = [&](const Json& x, const std::string& p) -> Status {
      if (IsAuto(x, p)) return Status::Ok();
      double r = 0;
      TF_RETURN_IF_ERROR(ReadNumber(x, p, &r));
      if (!(r >= 0.0 && r <= 1.0)) return Error(p, "is " + Describe(x) + "; use a share in [0, 1]");
      ds_ratio_ = r;
      return Status::Ok();
    };
    return DeepSpeedBlock(
        v, path, "zero_optimization.offload_optimizer", kIgnored,
        {{"device", device}, {"nvme_path", Section(&Parser::NvmePath)}, {"ratio", ratio}});
  }

  Status Aio(const Json& v, const std::string& path) {
    static const IgnoredKeys kIgnored[] = {
        {.keys = {"single_submit", "overlap_events"},
         .why = "io_uring handles submission and completion",
         .value = IgnoredValue::kBool},
        {.keys = {"use_gds"},
         .why = "GPUDirect Storage is not used; NVMe traffic goes through pinned host memory"}};
    // DeepSpeed's I/O threads: here io_uring rings, each with its own thread.
    auto rings = [&](const Json& x, const std::string& p) -> Status {
      if (IsAuto(x, p)) return Status::Ok();
      int64_t n = 0;
      TF_RETURN_IF_ERROR(ReadInt(x, p, 1, kNvmeIoMaxRings, &n));
      return Set("aio_threads", p, &c_.aio_threads, static_cast<uint32_t>(n));
    };
    return DeepSpeedBlock(v, path, "aio", kIgnored,
                          {{"intra_op_parallelism", rings}, {"thread_count", rings}});
  }

  // tierflow's own keys: the options table's (train/train_options.h), each
  // read as its field's type.
  Status Tierflow(const Json& v, const std::string& path) {
    return ForEachKey(
        v, path, [&](const std::string& k, const Json& x, const std::string& p) -> Status {
          if (k == "dtype") {  // resolved with fp16 / bf16 (ResolvePrecision)
            if (IsAuto(x, p)) return Status::Ok();
            TF_RETURN_IF_ERROR(ReadString(x, p, &tf_dtype_));
            tf_dtype_path_ = p;
            return Status::Ok();
          }
          const TrainOption* o = FindTrainOptionByKey(k == "nvme_path" ? "nvme_paths" : k);
          if (o == nullptr) {
            Unknown(p);
            return Status::Ok();
          }
          const bool is_auto = x.is_string() && Lower(x.get<std::string>()) == "auto";
          TF_RETURN_IF_ERROR(OptionKey(*o, x, p));
          if (k == "offload" && !is_auto) offload_requested_ = p;
          if (k == "sub_group_size" && !is_auto) {
            TF_RETURN_IF_ERROR(Set("sub_group_rule", p, &c_.sub_group_cut, SubGroupCut::kSlices));
          }
          return Status::Ok();
        });
  }

  // A key into its options-table row's field, read as the field's type.
  Status OptionKey(const TrainOption& o, const Json& x, const std::string& p) {
    return std::visit([&](auto member) { return Key(o, x, p, &(c_.*member)); }, o.field);
  }
  // One key into its field, by the field's type.
  Status Key(const TrainOption& o, const Json& x, const std::string& p, std::string* dst) {
    return String(x, p, o.name, dst);
  }
  Status Key(const TrainOption& o, const Json& x, const std::string& p, bool* dst) {
    return Bool(x, p, o.name, dst);
  }
  Status Key(const TrainOption& o, const Json& x, const std::string& p, float* dst) {
    return Float(x, p, o.name, dst);
  }
  Status Key(const TrainOption& o, const Json& x, const std::string& p, double* dst) {
    return Double(x, p, o.name, dst);
  }
  template <typename T>
  requires std::is_integral_v<T> Status Key(const TrainOption& o, const Json& x,
                                            const std::string& p, T* dst) {
    return Int(x, p, o.name, dst, o.json_min);
  }
  template <typename T>
  requires std::is_integral_v<T> Status Key(const TrainOption& o, const Json& x,
                                            const std::string& p, std::optional<T>* dst) {
    if (IsAuto(x, p)) return Status::Ok();
    int64_t n = 0;
    TF_RETURN_IF_ERROR(
        ReadInt(x, p, std::max<int64_t>(o.json_min, 0),
                static_cast<int64_t>(std::min<uint64_t>(std::numeric_limits<T>::max(),
                                                        std::numeric_limits<int64_t>::max())),
                &n));
    return Set(o.name, p, dst, std::optional<T>(static_cast<T>(n)));
  }
  Status Key(const TrainOption& o, const Json& x, const std::string& p,
             std::vector<std::string>* dst) {
    if (IsAuto(x, p)) return Status::Ok();
    std::vector<std::string> paths;
    TF_RETURN_IF_ERROR(ReadStringList(x, p, &paths));
    return Set(o.name, p, dst, paths);
  }
  Status Key(const TrainOption& o, const Json& x, const std::string& p, std::vector<int64_t>* dst) {
    if (!x.is_array()) return TypeError(p, "an array of step numbers", x);
    std::vector<int64_t> steps;
    for (size_t i = 0; i < x.size(); ++i) {
      int64_t n = 0;
      TF_RETURN_IF_ERROR(ReadInt(x[i], p + "[" + std::to_string(i) + "]", o.json_min,
                                 std::numeric_limits<int64_t>::max(), &n));
      steps.push_back(n);
    }
    return Set(o.name, p, dst, steps);
  }
  // A named value (a choice, a placement, a device, a dtype): its text
  // through the table's typed parser.
  template <typename T>
  Status Key(const TrainOption& o, const Json& x, const std::string& p, T* dst) {
    if (IsAuto(x, p)) return Status::Ok();
    std::string text;
    TF_RETURN_IF_ERROR(ReadString(x, p, &text));
    TrainConfig parsed;
    TF_RETURN_IF_ERROR(
        SetOptionFromText(o, label_ + ": " + p, o.json_any_case ? Lower(text) : text, &parsed));
    return Set(o.name, p, dst, parsed.*std::get<T TrainConfig::*>(o.field));
  }

  // ---- cross-key resolution ----

  // DeepSpeed's rule: train_batch_size = micro * accum * ranks; any two of
  // the first three determine the third; train_batch_size alone means
  // accum = 1. (Per rank below: train_batch_size / ranks.)
  Status ResolveBatch() {
    std::optional<int64_t> micro = ds_micro_, accum = ds_accum_;
    if (ds_train_batch_) {
      const std::string ranks =
          world_ == 1 ? " (one GPU)" : " x " + std::to_string(world_) + " ranks";
      if (*ds_train_batch_ % world_ != 0) {
        return InvalidArgumentError(label_ +
                                    ": train_batch_size = " + std::to_string(*ds_train_batch_) +
                                    " cannot be shared by " + std::to_string(world_) +
                                    " ranks; give a multiple of the world size");
      }
      int64_t tbs = *ds_train_batch_ / world_;
      const std::string ranks_per = world_ == 1 ? "" : " / " + std::to_string(world_) + " ranks";
      if (micro && accum) {
        if (*micro * *accum != tbs) {
          return InvalidArgumentError(
              label_ +
              ": contradictory settings: train_batch_size = " + std::to_string(*ds_train_batch_) +
              " but train_micro_batch_size_per_gpu * gradient_accumulation_steps = " +
              std::to_string(*micro) + " * " + std::to_string(*accum) + ranks + " = " +
              std::to_string(*micro * *accum * world_) +
              "; fix one of them or drop train_batch_size");
        }
      } else if (micro) {
        if (tbs % *micro != 0) {
          return InvalidArgumentError(
              label_ + ": contradictory settings: train_batch_size = " +
              std::to_string(*ds_train_batch_) + ranks_per +
              " is not a multiple of train_micro_batch_size_per_gpu = " + std::to_string(*micro));
        }
        accum = tbs / *micro;
      } else if (accum) {
        if (tbs % *accum != 0) {
          return InvalidArgumentError(
              label_ + ": contradictory settings: train_batch_size = " +
              std::to_string(*ds_train_batch_) + ranks_per +
              " is not a multiple of gradient_accumulation_steps = " + std::to_string(*accum));
        }
        micro = tbs / *accum;
      } else {
        micro = tbs;
        accum = 1;
      }
    }
    if (micro) {
      TF_RETURN_IF_ERROR(
          Set("micro_batch",
              ds_train_batch_ && !ds_micro_ ? "train_batch_size" : "train_micro_batch_size_per_gpu",
              &c_.micro_batch, static_cast<int>(*micro)));
    }
    if (accum) {
      TF_RETURN_IF_ERROR(
          Set("grad_accum",
              ds_train_batch_ && !ds_accum_ ? "train_batch_size" : "gradient_accumulation_steps",
              &c_.grad_accum, static_cast<int>(*accum)));
    }
    // tierflow.micro_batch / grad_accum were recorded under the same field
    // names while reading, so the Set() calls above report any disagreement.
    return Status::Ok();
  }

  Status ResolvePrecision() {
    if (fp16_enabled_.value_or(false) && bf16_enabled_.value_or(false)) {
      return InvalidArgumentError(label_ + ": contradictory settings: fp16.enabled and " +
                                  bf16_path_ + ".enabled are both true; enable one of them");
    }
    std::optional<DType> dtype;
    std::string from;
    if (fp16_enabled_.value_or(false)) {
      dtype = DType::kF16;
      from = "fp16.enabled";
    } else if (bf16_enabled_.value_or(false)) {
      dtype = DType::kBF16;
      from = bf16_path_ + ".enabled";
    } else if (fp16_enabled_.has_value() || bf16_enabled_.has_value()) {
      // Explicitly disabled and nothing else enabled: DeepSpeed trains in fp32.
      dtype = DType::kF32;
      from = fp16_enabled_.has_value() ? "fp16.enabled" : bf16_path_ + ".enabled";
      Warn("'" + from +
           "' is false and no other precision is enabled: training in fp32, "
           "as DeepSpeed would");
    }
    if (dtype) TF_RETURN_IF_ERROR(Set("dtype", from, &c_.dtype, *dtype));
    if (!tf_dtype_path_.empty()) {
      StatusOr<DType> parsed = ParseDType(Lower(tf_dtype_));
      if (!parsed.ok()) return Error(tf_dtype_path_, parsed.status().message());
      TF_RETURN_IF_ERROR(Set("dtype", tf_dtype_path_, &c_.dtype, *parsed));
    }
    return Status::Ok();
  }

  // ZeRO stage: tierflow always keeps optimizer state off the GPU (ZeRO-2 +
  // offload on one GPU). Stages 1-2 mean exactly that; 3 would also partition
  // parameters, which tierflow does not; 0 (no ZeRO) cannot offload, so 0
  // together with an offload device is a contradiction.
  Status ResolveOffload() {
    TF_RETURN_IF_ERROR(ResolveStage3Keys());
    if (!zero_stage_) return Status::Ok();
    if (*zero_stage_ == 0) {
      if (!offload_requested_.empty()) {
        return InvalidArgumentError(
            label_ +
            ": contradictory settings: zero_optimization.stage = 0 (no ZeRO, no "
            "offload) but '" +
            offload_requested_ +
            "' asks for optimizer offload; "
            "set stage to 2 (or remove it)");
      }
      Warn(
          "'zero_optimization.stage' = 0 ignored: tierflow always offloads optimizer state "
          "(as ZeRO-2 with offload_optimizer)");
    } else if (*zero_stage_ == 3) {
      Warn(
          "'zero_optimization.stage' = 3: parameters stay on the GPU in tierflow; optimizer "
          "state is offloaded as with stage 2");
    }
    return Status::Ok();
  }

  // A config written with DeepSpeed's keys trains as DeepSpeed would where
  // it leaves a setting out: no gradient clipping and fp32, DeepSpeed's
  // defaults, not tierflow's (clipping at 1.0, bf16). A config of only
  // "tierflow" keys keeps tierflow's. "auto" keeps tierflow's too (the HF
  // Trainer fills it in from its own arguments).
  void DeepSpeedDefaults(const Json& root) {
    bool deepspeed = false;
    for (auto it = root.begin(); it != root.end(); ++it) deepspeed |= it.key() != "tierflow";
    if (!deepspeed) return;
    if (!root.contains("gradient_clipping") && !WasSet("gradient_clipping")) {
      c_.gradient_clipping = 0.0f;
      Warn(
          "no 'gradient_clipping': no clipping, DeepSpeed's default (tierflow's own is 1.0; "
          "set \"gradient_clipping\": 1.0 to clip)");
    }
    if (!WasSet("dtype") && !precision_auto_) {
      c_.dtype = DType::kF32;
      Warn(
          "neither 'bf16' nor 'fp16' is enabled: training in fp32, DeepSpeed's default "
          "(tierflow's own is bf16; add \"bf16\": {\"enabled\": true})");
    }
  }

  // sub_group_size and offload_optimizer.ratio mean something in DeepSpeed
  // at stage 3 only; below it DeepSpeed ignores them, and so does tierflow,
  // saying so.
  Status ResolveStage3Keys() {
    const bool stage3 = zero_stage_.has_value() && *zero_stage_ == 3;
    if (ds_sub_group_) {
      const std::string p = "zero_optimization.sub_group_size";
      if (stage3) {
        // The rule is part of the setting, so tierflow.sub_group_size
        // (slices) given too is a contradiction, whatever its number.
        TF_RETURN_IF_ERROR(Set("sub_group_rule", p, &c_.sub_group_cut, SubGroupCut::kWholeTensors));
        TF_RETURN_IF_ERROR(Set("sub_group_size", p, &c_.sub_group_size, *ds_sub_group_));
      } else {
        Ignored(p,
                "DeepSpeed reads it at stage 3 only; tierflow keeps its own sub-groups "
                "(tierflow.sub_group_size: slices of at most N parameters)");
      }
    }
    if (ds_ratio_) {
      const std::string p = "zero_optimization.offload_optimizer.ratio";
      if (stage3 && *ds_ratio_ < 1.0) {
        return Error(p, "is " + FormatValue(*ds_ratio_) + ": DeepSpeed would keep the other " +
                            FormatValue(1.0 - *ds_ratio_) +
                            " of the optimizer state on the GPU and update it there, and "
                            "tierflow keeps no optimizer state on the GPU; remove the key (or "
                            "set 1.0). tierflow.nvme_ratio splits the state between host RAM "
                            "and NVMe");
      }
      if (!stage3 && *ds_ratio_ != 1.0) {
        Ignored(p,
                "DeepSpeed reads it at stage 3 only (the share of optimizer state the CPU "
                "updates); for tierflow's split between host RAM and NVMe use "
                "tierflow.nvme_ratio");
      }
    }
    return Status::Ok();
  }

  std::string label_;
  JsonReader json_;  // after label_, which it copies
  TrainConfig c_;
  int world_ = 1;  // data-parallel ranks (DeepSpeed's batch rule)
  std::vector<std::string> warnings_;
  std::map<std::string, std::pair<std::string, std::string>> set_by_;  // field -> (path, value)
  std::optional<int64_t> ds_micro_, ds_accum_, ds_train_batch_, zero_stage_;
  std::optional<bool> fp16_enabled_, bf16_enabled_;
  std::string bf16_path_ = "bf16";
  std::string tf_dtype_, tf_dtype_path_;
  std::string offload_requested_;         // the key that asked for cpu/nvme offload
  std::optional<uint64_t> ds_sub_group_;  // zero_optimization.sub_group_size
  std::optional<double> ds_ratio_;        // zero_optimization.offload_optimizer.ratio
  bool precision_auto_ = false;           // fp16/bf16 "enabled": "auto"
};

}  // namespace

StatusOr<TrainConfig> ParseTrainConfig(std::string_view json_text, const std::string& label,
                                       const TrainConfig& base, int world_size) {
  Json root;
  // Depth-limited (nesting would overflow the stack in error messages and
  // copies). Comments are allowed: people annotate their DeepSpeed configs.
  // Duplicate keys stay lenient, last wins, as DeepSpeed's Python json does.
  JsonParseOptions options;
  options.reject_duplicate_keys = false;
  options.allow_comments = true;
  if (Status parsed = ParseJson(json_text, label, options, &root); !parsed.ok()) {
    return InvalidArgumentError(parsed.message());
  }
  try {
    return Parser(label, base, world_size).Run(root);
  } catch (const Json::exception& e) {
    // Every access above is type-checked first; reaching here is a tierflow bug.
    return InternalError(label +
                         ": reading the config hit a JSON type error: " + std::string(e.what()));
  }
}

StatusOr<TrainConfig> LoadTrainConfig(const std::string& path, const TrainConfig& base,
                                      int world_size) {
  // A DeepSpeed config is a few KB; 16 MiB refuses a wrong path by name.
  auto text = ReadFileToString(path, 16u << 20);
  if (!text.ok()) return text.status().WithContext("config");
  return ParseTrainConfig(*text, path, base, world_size);
}

}  // namespace tierflow
