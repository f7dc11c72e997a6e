// Crash-safe training checkpoints.
#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "checkpoint/swap_set_owner.h"
#include "common/path_component.h"
#include "engine/master_weights.h"
#include "io/file_system.h"
#include "io/json_util.h"
#include "io/safetensors_writer.h"
#include "model/hf_model.h"

namespace tierflow {
namespace fs = std::filesystem;
namespace {

Status SyncDir(const std::string& dir) { return DefaultFileSystem()->SyncDirectory(dir); }

// Retires a superseded checkpoint. An nvme-layout one's swap set goes with it
// only when the checkpoint owns it (the rule of checkpoint/swap_set_owner.h):
// a copy of another run's checkpoint leaves that run's set alone. Its
// trainer_state.json goes first, so from then on it uses no set, and a crash
// part-way leaves at most a set `tier clean` removes. Failures to remove a
// set are notes, not errors: `tier clean` removes it later.
void RetireCheckpoint(const std::string& checkpoint_dir, std::vector<std::string>* notes) {
  // A malformed state names no set to remove (typed reads: an old
  // checkpoint's wrong field must not abort the save that retires it).
  std::optional<CheckpointSwapSet> set;
  if (auto doc = ReadCheckpointState(checkpoint_dir); doc.ok()) {
    auto layout = ParseCheckpointLayout(*doc, checkpoint_dir + "/trainer_state.json");
    if (layout.ok() && layout->layout == OffloadPlacement::kNvme) set = layout->swap_set;
  }
  std::error_code ec;
  if (set) {
    fs::remove(fs::path(checkpoint_dir) / "trainer_state.json", ec);
    const SwapSetRemover me{SwapSetRemover::Kind::kCheckpoint, checkpoint_dir};
    for (const std::string& dir : set->directories) {
      auto verdict = RemoveSwapSetIfAllowed(dir, set->run_id, me);
      if (notes == nullptr || (verdict.ok() && verdict->remove)) continue;
      if (!verdict.ok() && verdict.status().code() == StatusCode::kNotFound) continue;
      notes->push_back("retiring checkpoint " + checkpoint_dir + ": " +
                       (verdict.ok() ? "kept its swap set in " + dir + ": " + verdict->why
                                     : "could not remove its swap set in " + dir + " (" +
                                           verdict.status().message() +
                                           "); `tierflow tier clean` removes it later"));
    }
  }
  fs::remove_all(checkpoint_dir, ec);
}

}  // namespace

Status SaveTrainingCheckpoint(const std::string& out_dir, OffloadEngine& engine,
                              const ParamLayout& layout, const CheckpointState& state, int keep,
                              RetentionReport* retention, const SourceModelFiles* source) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return IoError("create " + root.string() + ": " + ec.message());
  const std::string name = CheckpointDirName(state.step);
  const fs::path tmp = root / ("." + name + ".tmp-" + std::to_string(::getpid()));
  const fs::path final_dir = root / name;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp / "optimizer", ec);
  if (ec) return IoError("create " + tmp.string() + ": " + ec.message());

  nlohmann::json files = nlohmann::json::array();
  auto record = [&](const std::string& rel) -> Status {
    TF_ASSIGN_OR_RETURN(nlohmann::json entry, DescribeCheckpointFile(tmp.string(), rel));
    files.push_back(std::move(entry));
    return Status::Ok();
  };

  // Optimizer state, one unit at a time, streamed from the sub-groups: the
  // host holds one sub-group's state and the writer's buffer, not a unit.
  TF_RETURN_IF_ERROR(engine.Finish().status());
  StateRangeReader reader(engine);
  nlohmann::json units = nlohmann::json::array();
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const UnitInfo& unit = layout.units[u];
    const int64_t n = static_cast<int64_t>(unit.num_params);
    auto stream = [&reader, u](StateRangeReader::Array array) -> SafetensorsFill {
      return [&reader, u, array](uint64_t byte_offset, uint64_t num_bytes, void* out) {
        return reader.Read(static_cast<int>(u), array, byte_offset / 4, num_bytes / 4,
                           static_cast<float*>(out));
      };
    };
    std::vector<SafetensorsEntry> entries = {
        {"master", DType::kF32, {n}, nullptr, stream(StateRangeReader::Array::kMaster)},
        {"exp_avg", DType::kF32, {n}, nullptr, stream(StateRangeReader::Array::kExpAvg)},
        {"exp_avg_sq", DType::kF32, {n}, nullptr, stream(StateRangeReader::Array::kExpAvgSq)},
    };
    TF_ASSIGN_OR_RETURN(PathComponent unit_name, PathComponent::Parse(unit.name, "unit name"));
    const std::string rel = OptimizerUnitFileName(unit_name);
    TF_RETURN_IF_ERROR(
        WriteSafetensors((tmp / rel).string(), entries,
                         {{"format", "tierflow.optimizer_state"}, {"unit", unit.name}}));
    TF_RETURN_IF_ERROR(record(rel));
    units.push_back({{"name", unit.name}, {"num_params", unit.num_params}});
  }
  TF_RETURN_IF_ERROR(SyncDir((tmp / "optimizer").string()));

  // The model, in the Hugging Face layout.
  const UnitWeightsReader weights = [&](int unit, uint64_t offset, uint64_t count, float* out) {
    return reader.Read(unit, StateRangeReader::Array::kMaster, offset, count, out);
  };
  const HfModelSaveOptions model_options = SavedModelOptions(source, DType::kBF16);
  TF_RETURN_IF_ERROR(SaveHfModel((tmp / "model").string(), layout, weights, model_options));
  if (source != nullptr)
    TF_RETURN_IF_ERROR(WriteHfSideFiles(source->side, (tmp / "model").string()));
  for (const auto& entry : fs::directory_iterator(tmp / "model")) {
    TF_RETURN_IF_ERROR(record("model/" + entry.path().filename().string()));
  }

  nlohmann::json doc = NewTrainerStateDocument(state);
  doc["units"] = units;
  doc["files"] = files;
  TF_RETURN_IF_ERROR(WriteStringToFileAtomically(nullptr, (tmp / "trainer_state.json").string(),
                                                 SealTrainerState(std::move(doc))));
  TF_RETURN_IF_ERROR(SyncDir(tmp.string()));
  // A checkpoint of the same step (a resumed run repeating it) is replaced.
  TF_RETURN_IF_ERROR(ReplaceDirectory(nullptr, tmp.string(), final_dir.string()));

  // Retention removes only what it has positively identified as superseded,
  // and only checkpoints older than the one just written:
  //  - a verified checkpoint beyond the newest `keep` verified ones;
  //  - a damaged one (its own format or checksums fail) older than the
  //    newest verified one.
  // One that could not be verified for an environmental reason (its NVMe
  // directory missing, EIO, EACCES) may verify once that is fixed, and may be
  // the newest state there is: it is kept and reported, never removed.
  int kept = 0;
  int64_t newest_verified = -1;
  for (const CheckpointInfo& info : ListCheckpoints(out_dir)) {  // newest first
    bool superseded = false;
    if (info.verified) {
      if (newest_verified < 0) newest_verified = info.step;
      superseded = ++kept > std::max(keep, 1);
    } else if (info.environmental()) {
      if (retention != nullptr) retention->kept_unverified.push_back(info);
    } else {
      superseded = newest_verified >= 0 && info.step < newest_verified;
    }
    if (!superseded || info.step >= state.step) continue;
    RetireCheckpoint(info.path, retention != nullptr ? &retention->notes : nullptr);
    if (retention != nullptr) retention->removed.push_back(info.path);
  }
  // Temporaries of interrupted saves. The caller holds the output
  // directory's lock (io/dir_lock.h), so none belongs to a live save.
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string fname = entry.path().filename().string();
    std::error_code rm;
    if (fname.rfind(".step-", 0) == 0) fs::remove_all(entry.path(), rm);
  }
  return Status::Ok();
}

namespace {
StatusOr<CheckpointState> LoadTrainingCheckpointUnguarded(const std::string& checkpoint_dir,
                                                          OffloadEngine& engine,
                                                          const ParamLayout& layout, bool upload);
}  // namespace

StatusOr<CheckpointState> LoadTrainingCheckpoint(const std::string& checkpoint_dir,
                                                 OffloadEngine& engine, const ParamLayout& layout,
                                                 bool upload) {
  try {
    return LoadTrainingCheckpointUnguarded(checkpoint_dir, engine, layout, upload);
  } catch (const nlohmann::json::exception& e) {
    return DataLossError("checkpoint " + checkpoint_dir + "/trainer_state.json is malformed (" +
                         std::string(e.what()) + "); resume from an earlier checkpoint");
  }
}

namespace {
StatusOr<CheckpointState> LoadTrainingCheckpointUnguarded(const std::string& checkpoint_dir,
                                                          OffloadEngine& engine,
                                                          const ParamLayout& layout, bool upload) {
  CheckpointInfo info = VerifyCheckpoint(checkpoint_dir);
  if (!info.verified) return DataLossError("checkpoint " + checkpoint_dir + ": " + info.problem);
  TF_ASSIGN_OR_RETURN(auto optimizer_state, CheckpointOptimizerState::Open(checkpoint_dir));
  const nlohmann::json& doc = optimizer_state->state();
  const auto& units = optimizer_state->units();
  if (units.size() != layout.units.size()) {
    return FailedPreconditionError(
        "checkpoint " + checkpoint_dir + " was written for a different model: " +
        std::to_string(units.size()) + " units there, " + std::to_string(layout.units.size()) +
        " here; resume with the same --model, or start a new --out");
  }
  for (size_t u = 0; u < layout.units.size(); ++u) {
    if (units[u].name.str() != layout.units[u].name ||
        units[u].num_params != layout.units[u].num_params) {
      return FailedPreconditionError(
          "checkpoint " + checkpoint_dir + " was written for a different model: unit " +
          std::to_string(u) + " is '" + units[u].name.str() + "' of " +
          std::to_string(units[u].num_params) + " parameters there but '" + layout.units[u].name +
          "' of " + std::to_string(layout.units[u].num_params) +
          " parameters here; resume with the same --model, or start a new --out");
    }
  }
  // The counters, through the validator verification used too.
  TF_ASSIGN_OR_RETURN(CheckpointState state,
                      ParseTrainerState(doc, checkpoint_dir + "/trainer_state.json"));
  // Sub-group by sub-group: the host holds one sub-group's state (the
  // planner's checkpoint buffers), never a unit's.
  const SubGroupLayout& sl = engine.layout();
  std::vector<float> master(sl.max_group_params), exp_avg(sl.max_group_params),
      exp_avg_sq(sl.max_group_params);
  for (size_t u = 0; u < layout.units.size(); ++u) {
    for (int g : sl.by_unit[u]) {
      const SubGroup& sg = sl.groups[g];
      TF_RETURN_IF_ERROR(optimizer_state->ReadUnitRange(
          u, sg.unit_offset, sg.num_params, master.data(), exp_avg.data(), exp_avg_sq.data()));
      TF_RETURN_IF_ERROR(engine.WriteState(g, master.data(), exp_avg.data(), exp_avg_sq.data()));
    }
  }
  if (upload) TF_RETURN_IF_ERROR(engine.UploadAllWeights());
  engine.RestoreCounters(state.optimizer_step, state.scaler);
  return state;
}

}  // namespace

HfModelSaveOptions SavedModelOptions(const SourceModelFiles* source, DType training_dtype) {
  HfModelSaveOptions options;
  options.dtype = training_dtype;
  if (source == nullptr) return options;
  options.base_config_json = source->config_json;
  if (source->weights) {
    options.dtype = source->weights->dtype.value_or(training_dtype);
    options.max_shard_bytes = source->weights->max_shard_bytes;
    options.tensor_name_prefix = source->weights->tensor_name_prefix;
  }
  return options;
}

}  // namespace tierflow
