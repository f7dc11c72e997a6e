// Hugging Face checkpoint directories: index validation, spec resolution, sharded crash-safe save.
#include "io/hf_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/cancel.h"
#include "common/path_component.h"
#include "io/file_reader.h"
#include "io/json_util.h"

namespace tierflow {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSaveIdKey = "tierflow_save_id";
constexpr size_t kMaxIndexBytes = size_t{256} << 20;  // real indexes are ~100 KB
constexpr size_t kMaxErrorsListed = 5;

std::string JoinPath(const std::string& dir, std::string_view name) {
  if (dir.empty() || dir.back() == '/') return dir + std::string(name);
  return dir + "/" + std::string(name);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A shard name from an index must stay inside the directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// "model-00001-of-00003.safetensors", the names save_pretrained uses.
std::string ShardName(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

bool LooksLikeShardName(const std::string& name) {
  unsigned a, b;
  char tail[32];
  return name.size() == std::string_view("model-00001-of-00001.safetensors").size() &&
         std::sscanf(name.c_str(), "model-%5u-of-%5u%31s", &a, &b, tail) == 3 &&
         std::string_view(tail) == ".safetensors";
}

}  // namespace

bool IsHfWeightFileName(std::string_view name) {
  return name == kHfSingleFileName || name == kHfIndexFileName ||
         LooksLikeShardName(std::string(name));
}

namespace {

std::string NewSaveId() {
  static std::atomic<uint64_t> counter{0};
  const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  char buf[80];
  std::snprintf(buf, sizeof(buf), "%llx-%x-%llx", static_cast<unsigned long long>(now_ns),
                static_cast<unsigned>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

}  // namespace

StatusOr<HfCheckpoint> HfCheckpoint::Open(const std::string& dir) {
  HfCheckpoint ckpt;
  ckpt.dir_ = dir;
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "open model directory " + dir);
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError(dir +
                                " is not a directory; pass the model directory that "
                                "holds config.json and the .safetensors files");
  }

  const std::string single_path = JoinPath(dir, kHfSingleFileName);
  const std::string index_path = JoinPath(dir, kHfIndexFileName);
  if (IsRegularFile(single_path)) {
    TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(single_path));
    for (const SafetensorsTensorInfo& t : reader->header().tensors) {
      ckpt.file_of_tensor_.emplace(t.name, 0);
    }
    ckpt.files_.push_back(std::move(reader));
    return ckpt;
  }
  if (!IsRegularFile(index_path)) {
    return NotFoundError("model directory " + dir + " has neither " +
                         std::string(kHfSingleFileName) + " nor " + std::string(kHfIndexFileName) +
                         "; tierflow reads Hugging Face safetensors checkpoints (convert "
                         "pytorch_model.bin files with transformers' save_pretrained)");
  }

  ckpt.sharded_ = true;
  TF_ASSIGN_OR_RETURN(std::string index_text, ReadFileToString(index_path, kMaxIndexBytes));
  Json index;
  TF_RETURN_IF_ERROR(ParseJsonStrict(index_text, "index " + index_path, &index));
  auto bad_index = [&](const std::string& what) {
    return DataLossError("index " + index_path + ": " + what +
                         "; the checkpoint is corrupt: download or save it again");
  };
  if (!index.is_object()) return bad_index("not a JSON object");
  auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object()) {
    return bad_index("missing or non-object \"weight_map\"");
  }
  std::optional<std::string> save_id;
  if (auto meta = index.find("metadata"); meta != index.end() && meta->is_object()) {
    if (auto id = meta->find(kSaveIdKey); id != meta->end() && id->is_string()) {
      save_id = id->get<std::string>();
    }
  }

  // shard file -> the tensors the index puts in it
  std::map<std::string, std::vector<std::string>> tensors_of_shard;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    if (!it.value().is_string() || !IsPlainFileName(it.value().get<std::string>())) {
      return bad_index("tensor " + QuotedExcerpt(it.key()) + " maps to " + JsonExcerpt(it.value()) +
                       ", which is not a file name in the model directory");
    }
    tensors_of_shard[it.value().get<std::string>()].push_back(it.key());
  }
  if (tensors_of_shard.empty()) return bad_index("\"weight_map\" lists no tensors");

  for (const auto& [shard, tensors] : tensors_of_shard) {
    TF_RETURN_IF_ERROR(CheckCancel("opening the checkpoint shards in " + dir));
    const std::string shard_path = JoinPath(dir, shard);
    if (!IsRegularFile(shard_path)) {
      return NotFoundError("index " + index_path + " puts tensor '" + tensors.front() +
                           "' in shard " + shard_path +
                           ", which does not exist; the download is incomplete");
    }
    TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(shard_path));
    const size_t file_index = ckpt.files_.size();
    for (const std::string& name : tensors) {
      if (reader->Find(name) == nullptr) {
        return bad_index("puts tensor '" + name + "' in shard " + shard_path +
                         ", which does not hold it");
      }
      ckpt.file_of_tensor_.emplace(name, file_index);
    }
    if (save_id) {
      auto id = reader->header().metadata.find(std::string(kSaveIdKey));
      if (id == reader->header().metadata.end() || id->second != *save_id) {
        return DataLossError("shard " + shard_path + " was not written by the same save as " +
                             index_path + " (save id " + *save_id +
                             "); a save into this directory was interrupted: use an older "
                             "checkpoint or save again");
      }
    }
    ckpt.files_.push_back(std::move(reader));
  }
  // Every tensor in a shard must be the one the index points to.
  for (size_t f = 0; f < ckpt.files_.size(); ++f) {
    for (const SafetensorsTensorInfo& t : ckpt.files_[f]->header().tensors) {
      auto owner = ckpt.file_of_tensor_.find(t.name);
      if (owner == ckpt.file_of_tensor_.end()) {
        return bad_index("does not list tensor '" + t.name + "', which shard " +
                         ckpt.files_[f]->path() + " holds");
      }
      if (owner->second != f) {
        return bad_index("tensor '" + t.name + "' is in both " + ckpt.files_[f]->path() + " and " +
                         ckpt.files_[owner->second]->path());
      }
    }
  }
  return ckpt;
}

std::vector<std::string> HfCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(file_of_tensor_.size());
  for (const auto& [name, file] : file_of_tensor_) names.push_back(name);
  return names;
}

HfCheckpoint::Location HfCheckpoint::Find(std::string_view name) const {
  auto it = file_of_tensor_.find(name);
  if (it == file_of_tensor_.end()) return {nullptr, nullptr};
  const SafetensorsReader* file = files_[it->second].get();
  return {file, file->Find(name)};
}

StatusOr<HfCheckpoint::Location> HfCheckpoint::Resolve(const TensorSpec& spec,
                                                       const TensorNameOptions& names) const {
  std::vector<std::string> candidates = {spec.name};
  for (const std::string& prefix : names.alternative_prefixes) {
    candidates.push_back(prefix + spec.name);
    if (!prefix.empty() && spec.name.starts_with(prefix)) {
      candidates.push_back(spec.name.substr(prefix.size()));
    }
  }
  for (const std::string& candidate : candidates) {
    Location loc = Find(candidate);
    if (loc.tensor == nullptr) continue;
    if (loc.tensor->shape != spec.shape) {
      return InvalidArgumentError("safetensors file " + loc.file->path() + ", tensor '" +
                                  candidate + "': shape " + FormatShape(loc.tensor->shape) +
                                  " but the model config needs " + FormatShape(spec.shape) +
                                  "; the checkpoint does not match config.json");
    }
    return loc;
  }
  std::string tried;
  for (const std::string& c : candidates) tried += (tried.empty() ? "'" : ", '") + c + "'";
  return NotFoundError("checkpoint " +
                       (sharded_ ? JoinPath(dir_, kHfIndexFileName) : files_.front()->path()) +
                       " has no tensor '" + spec.name + "' (tried " + tried +
                       "), which the model config needs; the checkpoint is for another model "
                       "or is incomplete");
}

Status HfCheckpoint::Validate(std::span<const TensorSpec> specs,
                              const TensorNameOptions& names) const {
  std::vector<Status> errors;
  for (const TensorSpec& spec : specs) {
    StatusOr<Location> loc = Resolve(spec, names);
    if (!loc.ok()) errors.push_back(loc.status());
  }
  if (errors.empty()) return Status::Ok();
  if (errors.size() == 1) return errors.front();
  std::string msg = std::to_string(errors.size()) + " tensors do not match: ";
  for (size_t i = 0; i < errors.size() && i < kMaxErrorsListed; ++i) {
    msg += (i ? "; " : "") + errors[i].message();
  }
  if (errors.size() > kMaxErrorsListed) msg += "; ...";
  return Status(errors.front().code(), std::move(msg));
}

Status HfCheckpoint::ReadInto(std::span<const TensorDestination> destinations,
                              const TensorNameOptions& names) const {
  std::vector<TensorSpec> specs;
  specs.reserve(destinations.size());
  for (const TensorDestination& d : destinations) specs.push_back(d.spec);
  TF_RETURN_IF_ERROR(Validate(specs, names));

  std::vector<Location> locations;
  locations.reserve(destinations.size());
  for (const TensorDestination& d : destinations) {
    TF_ASSIGN_OR_RETURN(Location loc, Resolve(d.spec, names));
    if (!loc.tensor->dtype) {
      return UnimplementedError("safetensors file " + loc.file->path() + ", tensor '" +
                                loc.tensor->name + "': dtype " + loc.tensor->dtype_name +
                                " cannot be loaded as weights; tierflow reads F32, F16, BF16");
    }
    if (d.data == nullptr && loc.tensor->num_elements > 0) {
      return InvalidArgumentError("no destination buffer for tensor '" + d.spec.name + "'");
    }
    locations.push_back(loc);
  }
  for (size_t i = 0; i < destinations.size(); ++i) {
    TF_RETURN_IF_ERROR(CheckCancel("reading tensors from " + dir_));
    const TensorDestination& d = destinations[i];
    TF_RETURN_IF_ERROR(
        locations[i].file->Read(*locations[i].tensor, d.dtype, d.data,
                                locations[i].tensor->num_elements * DTypeSize(d.dtype)));
  }
  return Status::Ok();
}

Status SaveHfCheckpoint(const std::string& dir, std::span<const SafetensorsEntry> tensors,
                        std::string_view config_json, const HfSaveOptions& options) {
  FileSystem* fs = options.fs ? options.fs : DefaultFileSystem();
  const std::string context = "saving checkpoint to " + dir;
  {
    Json config;
    Status s = ParseJsonStrict(config_json, "config.json text", &config);
    if (!s.ok()) return InvalidArgumentError(context + ": " + s.message());
    if (!config.is_object()) {
      return InvalidArgumentError(context + ": config.json text is not a JSON object");
    }
  }
  if (tensors.empty()) return InvalidArgumentError(context + ": no tensors to save");
  // Validates names, duplicates and sizes of the whole set before any file is touched.
  {
    StatusOr<SafetensorsLayout> all = PlanSafetensorsLayout(tensors, {});
    if (!all.ok()) return all.status().WithContext(context);
  }

  // Greedy sharding in the caller's order (as save_pretrained does).
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const SafetensorsEntry& e : tensors) {
    TF_ASSIGN_OR_RETURN(uint64_t num_bytes, SafetensorsEntryBytes(e));
    if (!shards.back().empty() && shard_bytes + num_bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(e);
    shard_bytes += num_bytes;
    total_bytes += num_bytes;
  }

  std::set<std::string> written;
  if (shards.size() == 1) {
    TF_RETURN_IF_ERROR(CheckCancel(context));
    TF_RETURN_IF_ERROR(
        WriteSafetensors(JoinPath(dir, kHfSingleFileName), shards.front(), options.metadata, fs));
    written.insert(std::string(kHfSingleFileName));
  } else {
    const std::string save_id = NewSaveId();
    std::map<std::string, std::string> metadata = options.metadata;
    metadata[std::string(kSaveIdKey)] = save_id;
    Json weight_map = Json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      TF_RETURN_IF_ERROR(CheckCancel(context));
      const std::string name = ShardName(i, shards.size());
      TF_RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, name), shards[i], metadata, fs));
      for (const SafetensorsEntry& e : shards[i]) weight_map[e.name] = name;
      written.insert(name);
    }
    Json index = {{"metadata", {{"total_size", total_bytes}, {std::string(kSaveIdKey), save_id}}},
                  {"weight_map", std::move(weight_map)}};
    TF_RETURN_IF_ERROR(
        WriteStringToFileAtomically(fs, JoinPath(dir, kHfIndexFileName), index.dump(2) + "\n"));
    written.insert(std::string(kHfIndexFileName));
  }
  TF_RETURN_IF_ERROR(
      WriteStringToFileAtomically(fs, JoinPath(dir, kHfConfigFileName), config_json));

  // The new checkpoint is complete; files of an older one would shadow it
  // (model.safetensors wins over an index) or just waste space.
  // Listed first, removed after: unlinking while readdir walks the directory is unspecified.
  std::error_code ec;
  std::vector<std::string> stale;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (IsHfWeightFileName(name) && !written.count(name)) stale.push_back(entry.path().string());
  }
  if (ec) {
    return ErrnoStatus(ec.value(), "list " + dir + " for files of a previous checkpoint")
        .WithContext(context);
  }
  for (const std::string& path : stale) {
    TF_RETURN_IF_ERROR(
        fs->RemoveFile(path).WithContext(context + ": removing a file of the previous checkpoint"));
  }
  const bool removed_any = !stale.empty();
  if (removed_any) TF_RETURN_IF_ERROR(fs->SyncDirectory(dir).WithContext(context));
  return Status::Ok();
}

}  // namespace tierflow
