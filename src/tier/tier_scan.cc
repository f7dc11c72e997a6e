// Classifying tier paths and the checkpoint swap-set markers.
#include "tier/tier_scan.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/file_system.h"
#include "offload/swap_set.h"
#include "train/checkpoint.h"

namespace tierflow::tier {
namespace fs = std::filesystem;

std::string CheckpointStoreDirectory(const std::string& nvme_dir, const std::string& run_id) {
  return (fs::path(nvme_dir) / kCheckpointStoreSubdir / run_id).string();
}

std::vector<std::string> CheckpointStoreDirectories(const std::string& nvme_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(nvme_dir) / kCheckpointStoreSubdir, ec)) {
    if (fs::is_directory(e.path() / offload::kSwapRootName, ec)) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void RemoveEmptyStoreDirectory(const std::string& store_dir) {
  std::error_code ec;
  fs::remove(fs::path(store_dir) / offload::kSwapRootName, ec);  // only when empty
  fs::remove(store_dir, ec);
}

std::string MarkerPath(const std::string& store_dir, const std::string& run_id) {
  return (fs::path(store_dir) / offload::kSwapRootName / (run_id + ".checkpoint")).string();
}

Status WriteMarker(const std::string& store_dir, const std::string& run_id,
                   const std::string& checkpoint_dir) {
  std::error_code ec;
  fs::create_directories(fs::path(store_dir) / offload::kSwapRootName, ec);
  if (ec)
    return IoError("create " + store_dir + "/" + offload::kSwapRootName + ": " + ec.message());
  return WriteStringToFileAtomically(nullptr, MarkerPath(store_dir, run_id), checkpoint_dir + "\n");
}

std::optional<std::string> ReadMarker(const std::string& store_dir, const std::string& run_id) {
  std::ifstream in(MarkerPath(store_dir, run_id));
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  return line;
}

void RemoveMarker(const std::string& store_dir, const std::string& run_id) {
  std::error_code ec;
  fs::remove(MarkerPath(store_dir, run_id), ec);
}

bool CheckpointUsesSwapSet(const std::string& checkpoint_dir, const std::string& run_id) {
  auto doc = ReadCheckpointState(checkpoint_dir);
  if (!doc.ok() || doc->value("optimizer_layout", "host") != "nvme") return false;
  const auto& set = (*doc)["swap_set"];
  return set.is_object() && set.value("run_id", "") == run_id;
}

namespace {

std::string Canonical(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p : c.string();
}

void AddSwapDir(const std::string& dir, std::vector<std::string>* out,
                std::set<std::string>* seen) {
  std::error_code ec;
  std::vector<std::string> dirs = CheckpointStoreDirectories(dir);
  if (fs::is_directory(fs::path(dir) / offload::kSwapRootName, ec)) dirs.insert(dirs.begin(), dir);
  for (const std::string& d : dirs) {
    if (seen->insert(Canonical(d)).second) out->push_back(d);
  }
}

void AddCheckpointSwapDirs(const std::string& ckpt, std::vector<std::string>* out,
                           std::set<std::string>* seen) {
  auto doc = ReadCheckpointState(ckpt);
  if (!doc.ok() || doc->value("optimizer_layout", "host") != "nvme") return;
  const auto& set = (*doc)["swap_set"];
  if (!set.is_object() || !set.contains("directories") || !set["directories"].is_array()) return;
  for (const auto& d : set["directories"]) {
    if (d.is_string()) AddSwapDir(d.get<std::string>(), out, seen);
  }
}

}  // namespace

StatusOr<TierScan> ScanTierPath(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFoundError("no such file or directory: " + path);
  TierScan scan;
  std::set<std::string> seen;
  if (fs::exists(fs::path(path) / "trainer_state.json", ec)) {
    scan.kind = PathKind::kCheckpoint;
    scan.checkpoints.push_back(path);
    AddCheckpointSwapDirs(path, &scan.swap_dirs, &seen);
    return scan;
  }
  const bool output_dir = fs::is_directory(fs::path(path) / "checkpoints", ec) ||
                          fs::exists(fs::path(path) / "swap_runs.json", ec) ||
                          fs::exists(fs::path(path) / "metrics.jsonl", ec);
  if (output_dir) {
    scan.kind = PathKind::kOutputDir;
    for (const CheckpointInfo& info : ListCheckpoints(path)) scan.checkpoints.push_back(info.path);
    for (const std::string& c : scan.checkpoints) AddCheckpointSwapDirs(c, &scan.swap_dirs, &seen);
    std::ifstream in(path + "/swap_runs.json");
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      auto runs = nlohmann::json::parse(text.str(), nullptr, false);
      if (runs.is_array()) {
        for (const auto& run : runs) {
          if (!run.is_object() || !run.contains("paths") || !run["paths"].is_array()) continue;
          for (const auto& p : run["paths"]) {
            if (p.is_string()) AddSwapDir(p.get<std::string>(), &scan.swap_dirs, &seen);
          }
        }
      }
    }
    if (fs::is_directory(fs::path(path) / "model", ec)) scan.final_model_dir = path + "/model";
  }
  AddSwapDir(path, &scan.swap_dirs, &seen);
  if (!output_dir && !scan.swap_dirs.empty()) scan.kind = PathKind::kSwapDir;
  return scan;
}

}  // namespace tierflow::tier
