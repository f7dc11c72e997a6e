// Crash-safe training checkpoints.
#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/file_system.h"
#include "io/safetensors_reader.h"
#include "io/safetensors_writer.h"
#include "model/engine_weights.h"
#include "model/hf_model.h"
#include "offload/crc32c.h"

namespace tierflow {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "tierflow.checkpoint";
constexpr int kVersion = 1;

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

// Size and CRC32C of a file, read in 4 MiB pieces.
StatusOr<std::pair<uint64_t, uint32_t>> FileChecksum(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoStatus(errno, "open " + path);
  std::vector<char> buf(4 << 20);
  uint64_t total = 0;
  uint32_t crc = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = offload::Crc32c(crc, buf.data(), n);
    total += n;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return IoError("read " + path + " failed");
  return std::make_pair(total, crc);
}

// The states of one unit, gathered from its sub-groups.
Status ReadUnitState(OffloadEngine& engine, int unit, std::vector<float>* master,
                     std::vector<float>* exp_avg, std::vector<float>* exp_avg_sq) {
  const SubGroupLayout& sl = engine.layout();
  const uint64_t n = sl.unit_offsets[unit + 1] - sl.unit_offsets[unit];
  master->resize(n);
  exp_avg->resize(n);
  exp_avg_sq->resize(n);
  for (int g : sl.by_unit[unit]) {
    const uint64_t off = sl.groups[g].unit_offset;
    TF_RETURN_IF_ERROR(engine.ReadState(g, master->data() + off, exp_avg->data() + off,
                                        exp_avg_sq->data() + off));
  }
  return Status::Ok();
}

std::string UnitFileName(const std::string& unit) { return "optimizer/" + unit + ".safetensors"; }

Status SyncDir(const std::string& dir) { return DefaultFileSystem()->SyncDirectory(dir); }

}  // namespace

Status SaveTrainingCheckpoint(const std::string& out_dir, OffloadEngine& engine,
                              const ParamLayout& layout, const CheckpointState& state, int keep) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return IoError("create " + root.string() + ": " + ec.message());
  const std::string name = StepDirName(state.step);
  const fs::path tmp = root / ("." + name + ".tmp-" + std::to_string(::getpid()));
  const fs::path final_dir = root / name;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp / "optimizer", ec);
  if (ec) return IoError("create " + tmp.string() + ": " + ec.message());

  nlohmann::json files = nlohmann::json::array();
  auto record = [&](const std::string& rel) -> Status {
    TF_ASSIGN_OR_RETURN(auto sum, FileChecksum((tmp / rel).string()));
    files.push_back({{"path", rel}, {"bytes", sum.first}, {"crc32c", sum.second}});
    return Status::Ok();
  };

  // Optimizer state, one unit at a time.
  std::vector<float> master, exp_avg, exp_avg_sq;
  nlohmann::json units = nlohmann::json::array();
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const UnitInfo& unit = layout.units[u];
    TF_RETURN_IF_ERROR(ReadUnitState(engine, static_cast<int>(u), &master, &exp_avg, &exp_avg_sq));
    const int64_t n = static_cast<int64_t>(unit.num_params);
    std::vector<SafetensorsEntry> entries = {
        {"master", DType::kF32, {n}, master.data()},
        {"exp_avg", DType::kF32, {n}, exp_avg.data()},
        {"exp_avg_sq", DType::kF32, {n}, exp_avg_sq.data()},
    };
    const std::string rel = UnitFileName(unit.name);
    TF_RETURN_IF_ERROR(WriteSafetensors((tmp / rel).string(), entries,
                                        {{"format", "tierflow.optimizer_state"}, {"unit", unit.name}}));
    TF_RETURN_IF_ERROR(record(rel));
    units.push_back({{"name", unit.name}, {"num_params", unit.num_params}});
  }
  TF_RETURN_IF_ERROR(SyncDir((tmp / "optimizer").string()));

  // The model, in the Hugging Face layout.
  TF_ASSIGN_OR_RETURN(std::vector<float> weights, GatherMasterWeights(engine));
  TF_RETURN_IF_ERROR(SaveHfModel((tmp / "model").string(), layout, weights.data()));
  for (const auto& entry : fs::directory_iterator(tmp / "model")) {
    TF_RETURN_IF_ERROR(record("model/" + entry.path().filename().string()));
  }

  nlohmann::json doc = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"optimizer_step", state.optimizer_step},
      {"loss_scaler",
       {{"scale", state.scaler.scale},
        {"good_steps", state.scaler.good_steps},
        {"hysteresis_left", state.scaler.hysteresis_left}}},
      {"data", state.data_state},
      {"loss", state.loss},
      {"model", state.model},
      {"units", units},
      {"files", files},
  };
  TF_RETURN_IF_ERROR(WriteStringToFileAtomically(nullptr, (tmp / "trainer_state.json").string(),
                                                 doc.dump(2)));
  TF_RETURN_IF_ERROR(SyncDir(tmp.string()));
  // A checkpoint of the same step (a resumed run repeating it) is replaced.
  if (fs::exists(final_dir)) {
    const fs::path old = root / ("." + name + ".old-" + std::to_string(::getpid()));
    fs::rename(final_dir, old, ec);
    if (ec) return IoError("move aside " + final_dir.string() + ": " + ec.message());
    fs::remove_all(old, ec);
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) return IoError("rename " + tmp.string() + " to " + final_dir.string() + ": " + ec.message());
  TF_RETURN_IF_ERROR(SyncDir(root.string()));

  // Retention: keep the newest `keep` that verify; remove stale temporaries.
  int kept = 0;
  for (const CheckpointInfo& info : ListCheckpoints(out_dir)) {
    if (info.verified && kept < std::max(keep, 1)) {
      ++kept;
      continue;
    }
    if (info.step < state.step) fs::remove_all(info.path, ec);
  }
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind(".step-", 0) == 0) fs::remove_all(entry.path(), ec);
  }
  return Status::Ok();
}

CheckpointInfo VerifyCheckpoint(const std::string& checkpoint_dir) {
  CheckpointInfo info;
  info.path = checkpoint_dir;
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  std::ifstream in(state_path);
  if (!in) {
    info.problem = state_path + " is missing (an interrupted checkpoint)";
    return info;
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("format", "") != kFormat) {
    info.problem = state_path + " is not a tierflow checkpoint state";
    return info;
  }
  if (doc.value("version", 0) != kVersion) {
    info.problem = state_path + ": unsupported version " + doc.value("version", nlohmann::json()).dump();
    return info;
  }
  info.step = doc.value("step", int64_t{-1});
  if (!doc.contains("files") || !doc["files"].is_array()) {
    info.problem = state_path + ": no file list";
    return info;
  }
  for (const auto& f : doc["files"]) {
    const std::string rel = f.value("path", "");
    const std::string path = checkpoint_dir + "/" + rel;
    auto sum = FileChecksum(path);
    if (!sum.ok()) {
      info.problem = sum.status().message();
      return info;
    }
    if (sum->first != f.value("bytes", uint64_t{0})) {
      info.problem = path + ": " + std::to_string(sum->first) + " bytes, expected " +
                     std::to_string(f.value("bytes", uint64_t{0})) + " (truncated or replaced)";
      return info;
    }
    if (sum->second != f.value("crc32c", uint32_t{0})) {
      info.problem = path + ": CRC32C mismatch (the file is corrupt)";
      return info;
    }
  }
  info.verified = true;
  return info;
}

std::vector<CheckpointInfo> ListCheckpoints(const std::string& out_dir) {
  std::vector<CheckpointInfo> out;
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !entry.is_directory()) continue;
    CheckpointInfo info = VerifyCheckpoint(entry.path().string());
    if (info.step < 0) info.step = std::strtoll(name.c_str() + 5, nullptr, 10);
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step > b.step; });
  return out;
}

StatusOr<CheckpointState> LoadTrainingCheckpoint(const std::string& checkpoint_dir,
                                                 OffloadEngine& engine, const ParamLayout& layout) {
  CheckpointInfo info = VerifyCheckpoint(checkpoint_dir);
  if (!info.verified) return DataLossError("checkpoint " + checkpoint_dir + ": " + info.problem);
  std::ifstream in(checkpoint_dir + "/trainer_state.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  const auto& units = doc["units"];
  if (!units.is_array() || units.size() != layout.units.size()) {
    return FailedPreconditionError("checkpoint " + checkpoint_dir +
                                   " was written for a different model (unit count differs); "
                                   "resume with the same --model, or start a new --out");
  }
  for (size_t u = 0; u < layout.units.size(); ++u) {
    if (units[u].value("name", "") != layout.units[u].name ||
        units[u].value("num_params", uint64_t{0}) != layout.units[u].num_params) {
      return FailedPreconditionError("checkpoint " + checkpoint_dir + ": unit " +
                                     std::to_string(u) + " is '" + units[u].value("name", "") +
                                     "' there but '" + layout.units[u].name +
                                     "' here; resume with the same --model");
    }
  }
  const SubGroupLayout& sl = engine.layout();
  std::vector<float> master, exp_avg, exp_avg_sq;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const std::string path = checkpoint_dir + "/" + UnitFileName(layout.units[u].name);
    TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(path));
    const size_t n = layout.units[u].num_params;
    master.resize(n);
    exp_avg.resize(n);
    exp_avg_sq.resize(n);
    TF_RETURN_IF_ERROR(reader->Read("master", DType::kF32, master.data(), n * 4));
    TF_RETURN_IF_ERROR(reader->Read("exp_avg", DType::kF32, exp_avg.data(), n * 4));
    TF_RETURN_IF_ERROR(reader->Read("exp_avg_sq", DType::kF32, exp_avg_sq.data(), n * 4));
    for (int g : sl.by_unit[u]) {
      const uint64_t off = sl.groups[g].unit_offset;
      TF_RETURN_IF_ERROR(engine.WriteState(g, master.data() + off, exp_avg.data() + off,
                                           exp_avg_sq.data() + off));
    }
  }
  TF_RETURN_IF_ERROR(engine.UploadAllWeights());
  CheckpointState state;
  state.step = doc.value("step", int64_t{0});
  state.optimizer_step = doc.value("optimizer_step", int64_t{0});
  const auto& ls = doc["loss_scaler"];
  state.scaler = {ls.value("scale", 1.0f), ls.value("good_steps", 0), ls.value("hysteresis_left", 0)};
  state.data_state = doc["data"];
  state.loss = doc.value("loss", 0.0);
  state.model = doc.value("model", "");
  engine.RestoreCounters(state.optimizer_step, state.scaler);
  return state;
}

}  // namespace tierflow
