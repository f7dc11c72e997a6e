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
#include "offload/swap_set.h"
#include "tier/swap_reader.h"

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

// CRC32C of bytes [begin, end) of a file.
StatusOr<uint32_t> RangeChecksum(const std::string& path, uint64_t begin, uint64_t end) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoStatus(errno, "open " + path);
  std::vector<char> buf(4 << 20);
  uint32_t crc = 0;
  bool failed = std::fseek(f, static_cast<long>(begin), SEEK_SET) != 0;
  uint64_t left = end - begin;
  while (!failed && left > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    const size_t n = std::fread(buf.data(), 1, want, f);
    if (n != want) failed = true;
    crc = offload::Crc32c(crc, buf.data(), n);
    left -= n;
  }
  std::fclose(f);
  if (failed) return IoError("read " + path + " bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") failed");
  return crc;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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

std::string UnitFileName(const std::string& unit) { return OptimizerUnitFileName(unit); }

Status SyncDir(const std::string& dir) { return DefaultFileSystem()->SyncDirectory(dir); }

// An nvme-layout checkpoint being retired takes its swap set with it: the
// set, its marker (tier/tier_scan.h: STORE_DIR/tierflow-swap/RUN_ID.checkpoint)
// and the then-empty store directory. Failures leave a set `tierflow tier
// clean` removes later (its checkpoint is gone), so they are not errors here.
void RemoveCheckpointSwapSet(const std::string& checkpoint_dir) {
  auto doc = ReadCheckpointState(checkpoint_dir);
  if (!doc.ok() || doc->value("optimizer_layout", "host") != "nvme") return;
  const auto& set = (*doc)["swap_set"];
  if (!set.is_object() || !set.contains("directories") || !set["directories"].is_array()) return;
  const std::string run_id = set.value("run_id", "");
  for (const auto& d : set["directories"]) {
    if (!d.is_string()) continue;
    const fs::path dir = d.get<std::string>();
    if (!offload::RemoveSwapSet(dir.string(), run_id).ok()) continue;
    std::error_code ec;
    fs::remove(dir / offload::kSwapRootName / (run_id + ".checkpoint"), ec);
    fs::remove(dir / offload::kSwapRootName, ec);  // only when empty
    fs::remove(dir, ec);
  }
}

}  // namespace

std::string OptimizerUnitFileName(const std::string& unit) { return "optimizer/" + unit + ".safetensors"; }

std::string OptimizerSwapTensorName(const std::string& unit, const std::string& array) {
  return unit + "/" + array;
}

StatusOr<nlohmann::json> DescribeCheckpointFile(const std::string& dir, const std::string& rel) {
  const std::string path = dir + "/" + rel;
  TF_ASSIGN_OR_RETURN(auto sum, FileChecksum(path));
  nlohmann::json entry = {{"path", rel}, {"bytes", sum.first}, {"crc32c", sum.second}};
  if (EndsWith(rel, ".safetensors")) {
    TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(path));
    const SafetensorsHeader& h = reader->header();
    nlohmann::json ranges = nlohmann::json::array();
    TF_ASSIGN_OR_RETURN(uint32_t header_crc, RangeChecksum(path, 0, h.data_offset_bytes()));
    ranges.push_back({{"name", "(header)"}, {"begin", 0}, {"end", h.data_offset_bytes()}, {"crc32c", header_crc}});
    for (const SafetensorsTensorInfo& t : h.tensors) {
      const uint64_t begin = h.data_offset_bytes() + t.begin_bytes, end = h.data_offset_bytes() + t.end_bytes;
      TF_ASSIGN_OR_RETURN(uint32_t crc, RangeChecksum(path, begin, end));
      ranges.push_back({{"name", t.name}, {"begin", begin}, {"end", end}, {"crc32c", crc}});
    }
    entry["tensors"] = std::move(ranges);
  }
  return entry;
}

std::string CheckCheckpointFile(const std::string& dir, const nlohmann::json& f) {
  const std::string rel = f.value("path", "");
  // Listed files live inside the checkpoint: a path that climbs out (or is
  // absolute) would make verification read, and trust, files elsewhere.
  if (rel.empty() || rel.front() == '/' || rel.find("..") != std::string::npos) {
    return dir + "/trainer_state.json: file entry '" + rel + "' is not a path inside the checkpoint";
  }
  const std::string path = dir + "/" + rel;
  auto sum = FileChecksum(path);
  if (!sum.ok()) return sum.status().message();
  if (sum->first != f.value("bytes", uint64_t{0})) {
    return path + ": " + std::to_string(sum->first) + " bytes, expected " +
           std::to_string(f.value("bytes", uint64_t{0})) + " (truncated or replaced)";
  }
  if (sum->second == f.value("crc32c", uint32_t{0})) return "";
  std::string where;
  if (f.contains("tensors") && f["tensors"].is_array()) {
    for (const auto& t : f["tensors"]) {
      const uint64_t begin = t.value("begin", uint64_t{0}), end = t.value("end", uint64_t{0});
      if (end < begin || end > sum->first) continue;
      auto crc = RangeChecksum(path, begin, end);
      if (!crc.ok() || *crc != t.value("crc32c", uint32_t{0})) {
        if (!where.empty()) where += ", ";
        where += "tensor '" + t.value("name", "") + "' bytes [" + std::to_string(begin) + ", " +
                 std::to_string(end) + ")";
      }
    }
  }
  return path + ": CRC32C mismatch (the file is corrupt" + (where.empty() ? "" : "; changed: " + where) + ")";
}

StatusOr<nlohmann::json> ReadCheckpointState(const std::string& checkpoint_dir) {
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  std::ifstream in(state_path);
  if (!in) return NotFoundError(state_path + " is missing (an interrupted checkpoint)");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("format") ||
      !doc["format"].is_string() || doc["format"] != kFormat) {
    return DataLossError(state_path + " is not a tierflow checkpoint state");
  }
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"] != kVersion) {
    return DataLossError(state_path + ": unsupported version " + doc.value("version", nlohmann::json()).dump());
  }
  return doc;
}

namespace {

class HostOptimizerState : public CheckpointOptimizerState {
 public:
  Status ReadUnit(size_t u, float* master, float* exp_avg, float* exp_avg_sq) const override {
    const Unit& unit = units_.at(u);
    TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(dir_ + "/" + UnitFileName(unit.name)));
    const size_t n = unit.num_params;
    TF_RETURN_IF_ERROR(reader->Read("master", DType::kF32, master, n * 4));
    TF_RETURN_IF_ERROR(reader->Read("exp_avg", DType::kF32, exp_avg, n * 4));
    return reader->Read("exp_avg_sq", DType::kF32, exp_avg_sq, n * 4);
  }
};

class NvmeOptimizerState : public CheckpointOptimizerState {
 public:
  Status ReadUnit(size_t u, float* master, float* exp_avg, float* exp_avg_sq) const override {
    const Unit& unit = units_.at(u);
    const uint64_t n = unit.num_params * 4;
    TF_RETURN_IF_ERROR(reader_->Read(OptimizerSwapTensorName(unit.name, "master"), master, n));
    TF_RETURN_IF_ERROR(reader_->Read(OptimizerSwapTensorName(unit.name, "exp_avg"), exp_avg, n));
    return reader_->Read(OptimizerSwapTensorName(unit.name, "exp_avg_sq"), exp_avg_sq, n);
  }
  std::unique_ptr<tier::SwapSetReader> reader_;
};

}  // namespace

StatusOr<std::unique_ptr<CheckpointOptimizerState>> CheckpointOptimizerState::Open(
    const std::string& checkpoint_dir) {
  TF_ASSIGN_OR_RETURN(nlohmann::json doc, ReadCheckpointState(checkpoint_dir));
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  std::unique_ptr<CheckpointOptimizerState> out;
  const std::string layout = doc.value("optimizer_layout", "host");
  if (layout == "host") {
    out = std::make_unique<HostOptimizerState>();
  } else if (layout == "nvme") {
    auto nvme = std::make_unique<NvmeOptimizerState>();
    const auto& set = doc["swap_set"];
    if (!set.is_object() || !set.contains("run_id") || !set["run_id"].is_string() ||
        !set.contains("directories") || !set["directories"].is_array() || set["directories"].empty()) {
      return DataLossError(state_path + ": optimizer_layout is nvme but swap_set is malformed");
    }
    nvme->swap_set_.run_id = set["run_id"];
    for (const auto& d : set["directories"]) {
      if (!d.is_string()) return DataLossError(state_path + ": swap_set.directories holds a non-string");
      nvme->swap_set_.directories.push_back(d);
    }
    TF_ASSIGN_OR_RETURN(nvme->reader_,
                        tier::SwapSetReader::Open(nvme->swap_set_.directories, nvme->swap_set_.run_id));
    out = std::move(nvme);
  } else {
    return DataLossError(state_path + ": unknown optimizer_layout '" + layout + "'");
  }
  out->dir_ = checkpoint_dir;
  out->layout_ = layout;
  if (!doc.contains("units") || !doc["units"].is_array()) return DataLossError(state_path + ": no unit list");
  for (const auto& u : doc["units"]) {
    if (!u.is_object()) return DataLossError(state_path + ": malformed unit entry");
    out->units_.push_back({u.value("name", ""), u.value("num_params", uint64_t{0})});
  }
  out->state_ = std::move(doc);
  return out;
}

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
    TF_ASSIGN_OR_RETURN(nlohmann::json entry, DescribeCheckpointFile(tmp.string(), rel));
    files.push_back(std::move(entry));
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
    if (info.step < state.step) {
      RemoveCheckpointSwapSet(info.path);
      fs::remove_all(info.path, ec);
    }
  }
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind(".step-", 0) == 0) fs::remove_all(entry.path(), ec);
  }
  return Status::Ok();
}

namespace {
CheckpointInfo VerifyCheckpointUnguarded(const std::string& checkpoint_dir);
}  // namespace

// trainer_state.json is outside input once on disk: a field of the wrong type
// makes nlohmann throw; that must mark the checkpoint unverified, not end the
// process (found by fuzz_checkpoint_state).
CheckpointInfo VerifyCheckpoint(const std::string& checkpoint_dir) {
  try {
    return VerifyCheckpointUnguarded(checkpoint_dir);
  } catch (const nlohmann::json::exception& e) {
    CheckpointInfo info;
    info.path = checkpoint_dir;
    info.problem = checkpoint_dir + "/trainer_state.json: malformed (" + std::string(e.what()) + ")";
    return info;
  }
}

namespace {
CheckpointInfo VerifyCheckpointUnguarded(const std::string& checkpoint_dir) {
  CheckpointInfo info;
  info.path = checkpoint_dir;
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  auto parsed = ReadCheckpointState(checkpoint_dir);
  if (!parsed.ok()) {
    info.problem = parsed.status().message();
    return info;
  }
  const nlohmann::json& doc = *parsed;
  info.step = doc.value("step", int64_t{-1});
  info.layout = doc.value("optimizer_layout", "host");
  if (!doc.contains("files") || !doc["files"].is_array()) {
    info.problem = state_path + ": no file list";
    return info;
  }
  for (const auto& f : doc["files"]) {
    if (!f.is_object()) {
      info.problem = state_path + ": malformed file entry";
      return info;
    }
    info.problem = CheckCheckpointFile(checkpoint_dir, f);
    if (!info.problem.empty()) return info;
  }
  if (info.layout == "nvme") {
    auto state = CheckpointOptimizerState::Open(checkpoint_dir);
    if (!state.ok()) {
      info.problem = state.status().message();
      return info;
    }
    const CheckpointSwapSet& set = (*state)->swap_set();
    auto reader = tier::SwapSetReader::Open(set.directories, set.run_id);
    if (!reader.ok()) {
      info.problem = reader.status().message();
      return info;
    }
    // Every unit's three arrays are there, whole, and every block verifies.
    for (const auto& unit : (*state)->units()) {
      for (const char* array : {"master", "exp_avg", "exp_avg_sq"}) {
        const std::string name = OptimizerSwapTensorName(unit.name, array);
        const offload::SwapTensorEntry* t = (*reader)->Find(name);
        if (t == nullptr || t->num_bytes != unit.num_params * 4) {
          info.problem = "swap set " + set.run_id + " (" + set.directories[0] + "): tensor '" + name +
                         (t == nullptr ? "' is missing" : "' has the wrong size");
          return info;
        }
      }
    }
    for (const auto& file : (*reader)->files()) {
      uint64_t checked = 0;
      auto problems = file->VerifyBlocks(&checked);
      if (!problems.empty()) {
        const tier::SwapBlockProblem& p = problems[0];
        info.problem = "swap file " + p.file + ": tensor '" + p.tensor + "' bytes [" +
                       std::to_string(p.tensor_begin_bytes) + ", " + std::to_string(p.tensor_end_bytes) +
                       ") at file offset " + std::to_string(p.file_offset_bytes) + ": " + p.what;
        if (problems.size() > 1) info.problem += " (and " + std::to_string(problems.size() - 1) + " more blocks)";
        return info;
      }
      if (file->num_blocks_written() != file->header().num_logical_blocks) {
        info.problem = "swap file " + file->path() + ": " +
                       std::to_string(file->header().num_logical_blocks - file->num_blocks_written()) +
                       " blocks were never written (an incomplete set)";
        return info;
      }
    }
  }
  info.verified = true;
  return info;
}

}  // namespace

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

namespace {
StatusOr<CheckpointState> LoadTrainingCheckpointUnguarded(const std::string& checkpoint_dir,
                                                          OffloadEngine& engine,
                                                          const ParamLayout& layout);
}  // namespace

StatusOr<CheckpointState> LoadTrainingCheckpoint(const std::string& checkpoint_dir,
                                                 OffloadEngine& engine, const ParamLayout& layout) {
  try {
    return LoadTrainingCheckpointUnguarded(checkpoint_dir, engine, layout);
  } catch (const nlohmann::json::exception& e) {
    return DataLossError("checkpoint " + checkpoint_dir + "/trainer_state.json is malformed (" +
                         std::string(e.what()) + "); resume from an earlier checkpoint");
  }
}

namespace {
StatusOr<CheckpointState> LoadTrainingCheckpointUnguarded(const std::string& checkpoint_dir,
                                                          OffloadEngine& engine,
                                                          const ParamLayout& layout) {
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
  TF_ASSIGN_OR_RETURN(auto optimizer_state, CheckpointOptimizerState::Open(checkpoint_dir));
  std::vector<float> master, exp_avg, exp_avg_sq;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const size_t n = layout.units[u].num_params;
    master.resize(n);
    exp_avg.resize(n);
    exp_avg_sq.resize(n);
    TF_RETURN_IF_ERROR(optimizer_state->ReadUnit(u, master.data(), exp_avg.data(), exp_avg_sq.data()));
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

}  // namespace

}  // namespace tierflow
