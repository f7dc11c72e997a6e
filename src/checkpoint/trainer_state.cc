// Reading, validating and sealing trainer_state.json (trainer_state.h).
#include "checkpoint/trainer_state.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <limits>

#include "common/path_component.h"
#include "io/file_reader.h"
#include "io/json_util.h"
#include "offload/crc32c.h"

namespace tierflow {
namespace {

constexpr const char* kFormat = "tierflow.checkpoint";
constexpr int64_t kVersion = 2;
constexpr int64_t kVersionWithoutChecksum = 1;
constexpr const char* kChecksumKey = "crc32c";

// trainer_state.json is small (counters, unit and file lists); anything
// larger is not one, and is not read whole into memory.
constexpr size_t kMaxStateFileBytes = 64u << 20;

Status OutOfRange(const std::string& where, std::string_view key, const nlohmann::json& value,
                  const std::string& range) {
  return DataLossError(where + ": " + std::string(key) + " is " + JsonExcerpt(value) + ", not " +
                       range +
                       " (not a value tierflow writes: the file is damaged or "
                       "was edited; resume from another checkpoint)");
}

// An integer field in [lo, hi]; `out` keeps its default when the key is
// absent and `presence` allows it.
Status GetBoundedInt(const nlohmann::json& obj, std::string_view key, const std::string& where,
                     int64_t lo, int64_t hi, int64_t* out,
                     JsonField presence = JsonField::kRequired) {
  TF_RETURN_IF_ERROR(GetJsonInt64(obj, key, where, out, presence));
  if (*out < lo || *out > hi) {
    return OutOfRange(where, key, obj.contains(key) ? obj.at(key) : nlohmann::json(*out),
                      "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::Ok();
}

// The data position's shape: the loader checks it against its dataset on
// resume; what is checked here holds for any dataset.
Status CheckDataPosition(const nlohmann::json& data, const std::string& where) {
  if (!data.is_object())
    return DataLossError(where + " must be an object, not " + JsonExcerpt(data));
  int64_t value = 0;
  TF_RETURN_IF_ERROR(GetBoundedInt(data, "epoch", where, 0, kMaxCheckpointEpoch - 1, &value,
                                   JsonField::kOptional));
  for (const char* key : {"index", "batch", "seq_len", "num_tokens", "num_train_tokens"}) {
    TF_RETURN_IF_ERROR(GetBoundedInt(data, key, where, 0, std::numeric_limits<int64_t>::max(),
                                     &value, JsonField::kOptional));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<nlohmann::json> ReadCheckpointState(const std::string& checkpoint_dir) {
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  struct stat st {};
  if (::lstat(state_path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return NotFoundError(state_path + " is missing (an interrupted checkpoint)");
    return ErrnoStatus(errno, "stat " + state_path);
  }
  if (S_ISLNK(st.st_mode)) {
    return DataLossError(state_path +
                         " is a symbolic link; tierflow does not follow links out of "
                         "a checkpoint");
  }
  // O_NOFOLLOW too: a link swapped in after the lstat is refused, not read.
  ReadFileOptions no_follow;
  no_follow.no_follow = true;
  auto text = ReadFileToString(state_path, kMaxStateFileBytes, no_follow);
  if (!text.ok()) {
    // Too large is the file's own damage; an errno (EIO, EACCES) is not.
    if (text.status().code() == StatusCode::kInvalidArgument) {
      return DataLossError(text.status().message());
    }
    return text.status();
  }
  nlohmann::json doc;
  TF_RETURN_IF_ERROR(ParseJsonStrict(*text, state_path, &doc));
  std::string format;
  if (!doc.is_object() || !GetJsonString(doc, "format", state_path, &format).ok() ||
      format != kFormat) {
    return DataLossError(state_path + " is not a tierflow checkpoint state");
  }
  int64_t version = -1;
  if (!GetJsonInt64(doc, "version", state_path, &version).ok() ||
      (version != kVersion && version != kVersionWithoutChecksum)) {
    const auto v = doc.find("version");
    return DataLossError(state_path + ": unsupported version " +
                         (v == doc.end() ? std::string("(none)") : JsonExcerpt(*v)));
  }
  if (version == kVersion) {
    uint64_t want = 0;
    TF_RETURN_IF_ERROR(GetJsonUint64(doc, kChecksumKey, state_path, &want));
    const uint32_t got = TrainerStateChecksum(doc);
    if (got != want) {
      return DataLossError(state_path + ": CRC32C mismatch (the file is corrupt or was edited: " +
                           std::to_string(got) + ", expected " + std::to_string(want) +
                           "); resume from another checkpoint");
    }
  }
  return doc;
}

StatusOr<CheckpointState> ParseTrainerState(const nlohmann::json& doc,
                                            const std::string& state_path) {
  if (!doc.is_object()) return DataLossError(state_path + " is not a JSON object");
  CheckpointState state;
  TF_RETURN_IF_ERROR(GetBoundedInt(doc, "step", state_path, 0, kMaxCheckpointStep, &state.step));
  // Skipped steps do not count: Adam's counter never runs ahead of the loop's.
  TF_RETURN_IF_ERROR(GetBoundedInt(doc, "optimizer_step", state_path, 0, state.step,
                                   &state.optimizer_step, JsonField::kOptional));
  const nlohmann::json* ls = nullptr;
  TF_RETURN_IF_ERROR(GetJsonObject(doc, "loss_scaler", state_path, &ls, JsonField::kOptional));
  if (ls != nullptr) {
    const std::string where = state_path + ": loss_scaler";
    double scale = 1.0;
    int64_t good_steps = 0, hysteresis_left = 0;
    TF_RETURN_IF_ERROR(GetJsonDouble(*ls, "scale", where, &scale, JsonField::kOptional));
    // fp32's range: the scaler multiplies fp32 losses by it.
    if (!(scale > 0 && scale <= 3.0e38)) {
      return OutOfRange(where, "scale", ls->at("scale"), "a finite scale in (0, 3e38]");
    }
    TF_RETURN_IF_ERROR(
        GetBoundedInt(*ls, "good_steps", where, 0, INT32_MAX, &good_steps, JsonField::kOptional));
    TF_RETURN_IF_ERROR(GetBoundedInt(*ls, "hysteresis_left", where, 0, INT32_MAX, &hysteresis_left,
                                     JsonField::kOptional));
    state.scaler = {static_cast<float>(scale), static_cast<int>(good_steps),
                    static_cast<int>(hysteresis_left)};
  }
  if (auto d = doc.find("data"); d != doc.end() && !d->is_null()) {
    TF_RETURN_IF_ERROR(CheckDataPosition(*d, state_path + ": data"));
    state.data_state = *d;
  }
  // A loss that was not finite is written as null (JSON has no NaN).
  if (auto l = doc.find("loss"); l != doc.end() && l->is_null()) {
    state.loss = std::numeric_limits<double>::quiet_NaN();
  } else {
    TF_RETURN_IF_ERROR(GetJsonDouble(doc, "loss", state_path, &state.loss, JsonField::kOptional));
  }
  TF_RETURN_IF_ERROR(GetJsonString(doc, "model", state_path, &state.model, JsonField::kOptional));
  if (state.model.size() > kMaxCheckpointModelNameBytes) {
    return DataLossError(state_path + ": model " + QuotedExcerpt(state.model) +
                         " is longer than any path (4096 bytes)");
  }
  TF_RETURN_IF_ERROR(GetBoundedInt(doc, "world_size", state_path, 1, kMaxCheckpointWorldSize,
                                   &state.world_size, JsonField::kOptional));
  TF_RETURN_IF_ERROR(GetBoundedInt(doc, "sequences_per_step", state_path, 0,
                                   kMaxCheckpointSequencesPerStep, &state.sequences_per_step,
                                   JsonField::kOptional));
  return state;
}

StatusOr<CheckpointLayout> ParseCheckpointLayout(const nlohmann::json& doc,
                                                 const std::string& state_path) {
  CheckpointLayout out;
  std::string name = "host";  // checkpoints from before the NVMe layout have no key
  TF_RETURN_IF_ERROR(
      GetJsonString(doc, "optimizer_layout", state_path, &name, JsonField::kOptional));
  // tierflow writes only a resolved placement by its own name: "auto" or
  // DeepSpeed's "cpu" here is a file tierflow did not write.
  StatusOr<OffloadPlacement> placement = ParseOffloadPlacement("optimizer_layout", name);
  if (!placement.ok() || *placement == OffloadPlacement::kAuto ||
      OffloadPlacementName(*placement) != name) {
    return DataLossError(state_path + ": unknown optimizer_layout " + QuotedExcerpt(name));
  }
  out.layout = *placement;
  if (out.layout == OffloadPlacement::kHost) return out;
  const std::string where = state_path + ": swap_set";
  const nlohmann::json* set = nullptr;
  const nlohmann::json* dirs = nullptr;
  TF_RETURN_IF_ERROR(GetJsonObject(doc, "swap_set", state_path, &set));
  TF_RETURN_IF_ERROR(GetJsonString(*set, "run_id", where, &out.swap_set.run_id));
  auto run_id = PathComponent::Parse(out.swap_set.run_id, where + ".run_id");
  if (!run_id.ok()) return DataLossError(run_id.status().message());
  TF_RETURN_IF_ERROR(GetJsonArray(*set, "directories", where, &dirs));
  if (dirs->empty()) return DataLossError(where + ".directories is empty");
  for (size_t i = 0; i < dirs->size(); ++i) {
    const nlohmann::json& d = (*dirs)[i];
    const std::string what = where + ".directories[" + std::to_string(i) + "]";
    if (!d.is_string()) return DataLossError(what + " must be a string, not " + JsonExcerpt(d));
    // Swap directories are elsewhere by design (an NVMe drive), so they are
    // whole paths, not components; but always absolute and without '.' or
    // '..' components, as `tier migrate` writes them, so no relative path
    // can point a tier command somewhere the checkpoint's author did not
    // name outright. The same check runs in migrate before it writes.
    const std::string& dir = d.get_ref<const std::string&>();
    Status checked = CheckAbsolutePath(dir, what);
    if (!checked.ok()) return DataLossError(checked.message());
    out.swap_set.directories.push_back(dir);
  }
  return out;
}

nlohmann::json NewTrainerStateDocument(const CheckpointState& state) {
  return {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"optimizer_step", state.optimizer_step},
      {"loss_scaler",
       {{"scale", state.scaler.scale},
        {"good_steps", state.scaler.good_steps},
        {"hysteresis_left", state.scaler.hysteresis_left}}},
      {"data", state.data_state},
      {"loss", std::isfinite(state.loss) ? nlohmann::json(state.loss) : nlohmann::json(nullptr)},
      {"model", state.model},
      {"world_size", state.world_size},
      {"sequences_per_step", state.sequences_per_step},
  };
}

uint32_t TrainerStateChecksum(nlohmann::json doc) {
  if (doc.is_object()) doc.erase(kChecksumKey);
  const std::string text = doc.dump();
  return offload::Crc32c(0, text.data(), text.size());
}

std::string SealTrainerState(nlohmann::json doc) {
  doc["version"] = kVersion;
  doc[kChecksumKey] = TrainerStateChecksum(doc);
  return doc.dump(2);
}

}  // namespace tierflow
