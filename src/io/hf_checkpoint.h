// A model directory in the Hugging Face layout: open and validate it, read
// tensors into caller buffers, and save one back crash-safely.
//
// The layout (what transformers' save_pretrained writes and from_pretrained
// reads): config.json plus either one model.safetensors, or shards
// model-00001-of-0000N.safetensors listed by model.safetensors.index.json:
//   {"metadata": {"total_size": <bytes>}, "weight_map": {"<tensor>": "<shard file>", ...}}
// As in transformers, model.safetensors wins when both it and an index exist.
//
// This file knows no model: the caller (from the model config) says which
// tensors it needs and their shapes, as TensorSpecs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/file_system.h"
#include "io/safetensors.h"
#include "io/safetensors_reader.h"
#include "io/safetensors_writer.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

inline constexpr std::string_view kHfSingleFileName = "model.safetensors";
inline constexpr std::string_view kHfIndexFileName = "model.safetensors.index.json";
inline constexpr std::string_view kHfConfigFileName = "config.json";

// Whether `name` is a weights file of a Hugging Face checkpoint as tierflow
// (and save_pretrained) names them: model.safetensors, its index, or a
// shard model-NNNNN-of-NNNNN.safetensors.
bool IsHfWeightFileName(std::string_view name);

// A tensor the model needs, as the model config describes it.
struct TensorSpec {
  std::string name;            // e.g. "h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // e.g. {768, 2304}, as ParamTensor::shape
};

// How a spec's name is matched to a checkpoint's names.
struct TensorNameOptions {
  // Prefixes checkpoints of the same model may or may not carry. A spec name
  // S is looked up as S, then for each prefix P in order as P+S, and (if S
  // starts with P) as S without P. The first match wins. Example:
  // {"transformer."} lets specs "h.0.ln_1.weight" match GPT-2 files written
  // by GPT2LMHeadModel ("transformer.h.0.ln_1.weight") and by GPT2Model.
  // Default: none (exact names only).
  std::vector<std::string> alternative_prefixes;
};

// Where a caller wants one tensor: its spec (checked against the file) and a
// buffer of product(shape) * DTypeSize(dtype) bytes, e.g. a slice of a flat
// per-layer buffer. The file's F32/F16/BF16 is converted to `dtype`.
struct TensorDestination {
  TensorSpec spec;
  DType dtype = DType::kF32;
  void* data = nullptr;  // caller-owned
};

// An opened, validated checkpoint directory. Immutable after Open; reads are
// thread-safe.
class HfCheckpoint {
 public:
  // Opens `dir`. Validates every safetensors file's header, and for a sharded
  // checkpoint the index: it is a JSON object with a "weight_map" object of
  // tensor -> plain file name (no '/'), every named shard exists and holds
  // the tensors mapped to it, no tensor appears in two shards, and no shard
  // holds a tensor the index does not map to it. Errors: NotFound (no weights
  // in `dir`, a missing shard or tensor), DataLoss (a malformed file, an
  // index that disagrees with its shards, shards from two different saves),
  // each naming the file and the tensor.
  static StatusOr<HfCheckpoint> Open(const std::string& dir);

  HfCheckpoint(HfCheckpoint&&) = default;
  HfCheckpoint& operator=(HfCheckpoint&&) = default;

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  // The safetensors files, in name order.
  const std::vector<std::unique_ptr<SafetensorsReader>>& files() const { return files_; }
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;

  struct Location {
    const SafetensorsReader* file;
    const SafetensorsTensorInfo* tensor;
  };
  // The tensor called exactly `name`, or nullptr fields if it is absent.
  Location Find(std::string_view name) const;

  // Resolves `spec` (see TensorNameOptions) and checks its shape. Errors:
  // NotFound naming the checkpoint and the tensor (and the names tried);
  // InvalidArgument naming the file, the tensor, the expected and found shapes.
  StatusOr<Location> Resolve(const TensorSpec& spec, const TensorNameOptions& names = {}) const;

  // Checks every spec (all problems listed in one error, up to a few), then
  // nothing else: call before allocating buffers.
  Status Validate(std::span<const TensorSpec> specs, const TensorNameOptions& names = {}) const;

  // Validates all destinations first (as Validate; also that the stored dtype
  // is F32/F16/BF16), and only then reads each tensor into its buffer,
  // converted to the destination dtype. On error some buffers may have been
  // written. Errors: as Validate and SafetensorsReader::Read.
  Status ReadInto(std::span<const TensorDestination> destinations,
                  const TensorNameOptions& names = {}) const;

 private:
  HfCheckpoint() = default;

  std::string dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t, std::less<>> file_of_tensor_;  // tensor -> index in files_
};

struct HfSaveOptions {
  // A new shard starts when the next tensor would take the current one past
  // this many data bytes; a bigger tensor gets a shard of its own. With one
  // shard the output is model.safetensors and no index.
  // Default: 5 GB (5e9), transformers' default.
  uint64_t max_shard_bytes = 5'000'000'000;
  // "__metadata__" of every file. Default: {"format": "pt"}, which
  // transformers checks for.
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  // Where the files are written. Default (null): DefaultFileSystem().
  FileSystem* fs = nullptr;
};

// Saves `tensors` (in this order, shards filled greedily) and `config_json`
// (the text of config.json; must parse as a JSON object) into the existing
// directory `dir`. Each file is written crash-safely (temp file, fsync,
// rename, directory fsync). Shards go first, then the index, then
// config.json; files of a previous checkpoint are removed only after that.
// So an interrupted save into an empty directory, over a single-file
// checkpoint, or over a sharded one with another shard count leaves the old
// checkpoint or the new one loadable. Over a sharded checkpoint with the same
// shard names the shards are replaced one by one; every sharded save stamps
// its files with a save id ("tierflow_save_id") that Open checks, so a torn
// one is reported as DataLoss, never loaded as a silent mix. Checkpoints that
// must survive a crash mid-save should go to a fresh directory.
// Files of a previous checkpoint the new one does not use (model.safetensors,
// the index, model-*-of-*.safetensors shards) are removed at the end.
// Errors: InvalidArgument (bad config_json, names, shapes), I/O errors naming
// the path (ResourceExhausted for a full disk).
Status SaveHfCheckpoint(const std::string& dir, std::span<const SafetensorsEntry> tensors,
                        std::string_view config_json, const HfSaveOptions& options = {});

}  // namespace tierflow
