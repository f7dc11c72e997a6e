// Classifying tier paths and the checkpoint swap-set markers.
#include "tier/tier_scan.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/trainer_state.h"
#include "io/file_reader.h"
#include "io/file_system.h"
#include "io/json_util.h"
#include "offload/swap_set.h"

namespace tierflow::tier {
namespace fs = std::filesystem;

std::string CheckpointStoreDirectory(const std::string& nvme_dir, const std::string& run_id) {
  return (fs::path(nvme_dir) / kCheckpointStoreSubdir / run_id).string();
}

std::vector<std::string> CheckpointStoreDirectories(const std::string& nvme_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(nvme_dir) / kCheckpointStoreSubdir, ec)) {
    // Entries are store directories tierflow made: a symlink (to a directory
    // or to its tierflow-swap) is not one, and following it would let migrate
    // and clean act on swap sets elsewhere.
    if (!fs::is_directory(fs::symlink_status(e.path(), ec)) ||
        !fs::is_directory(fs::symlink_status(e.path() / offload::kSwapRootName, ec))) {
      continue;
    }
    out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
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
  if (!doc.ok()) return;
  auto layout = ParseCheckpointLayout(*doc, ckpt + "/trainer_state.json");
  if (!layout.ok() || layout->layout != OffloadPlacement::kNvme) return;
  for (const std::string& d : layout->swap_set.directories) AddSwapDir(d, out, seen);
}

}  // namespace

std::string CheckpointOutputDir(const std::string& checkpoint_dir) {
  const fs::path parent = fs::path(checkpoint_dir).lexically_normal().parent_path();
  if (parent.filename() != "checkpoints") return "";
  return parent.parent_path().empty() ? "." : parent.parent_path().string();
}

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
    // swap_runs.json is outside input like any file on disk: read bounded,
    // parsed depth-limited; an unreadable one lists no runs.
    auto text = ReadFileToString(path + "/swap_runs.json", 64u << 20);
    nlohmann::json runs;
    if (text.ok() && ParseJson(*text, path + "/swap_runs.json",
                               JsonParseOptions{.reject_duplicate_keys = false}, &runs)
                         .ok()) {
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
