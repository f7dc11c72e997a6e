// Verifying one checkpoint and listing an output directory's (checkpoint_verify.h).
#include "checkpoint/checkpoint_verify.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/optimizer_state.h"
#include "checkpoint/trainer_state.h"
#include "io/json_util.h"
#include "offload/swap_reader.h"

namespace tierflow {
namespace fs = std::filesystem;

std::string CheckpointDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

namespace {
CheckpointInfo VerifyCheckpointUnguarded(const std::string& checkpoint_dir);
}  // namespace

// trainer_state.json is outside input once on disk: a field of the wrong type
// makes nlohmann throw; that must mark the checkpoint unverified, not end the
// process (found by fuzz_checkpoint_state).
CheckpointInfo VerifyCheckpoint(const std::string& checkpoint_dir) {
  CheckpointInfo info;
  try {
    info = VerifyCheckpointUnguarded(checkpoint_dir);
  } catch (const nlohmann::json::exception& e) {
    info = CheckpointInfo();
    info.path = checkpoint_dir;
    info.problem =
        checkpoint_dir + "/trainer_state.json: malformed (" + std::string(e.what()) + ")";
  }
  // A problem found without an errno behind it (format, sizes, checksums)
  // is the checkpoint's own damage.
  if (!info.verified && info.problem_code == StatusCode::kOk) {
    info.problem_code = StatusCode::kDataLoss;
  }
  if (info.verified) info.problem_code = StatusCode::kOk;
  return info;
}

namespace {
CheckpointInfo VerifyCheckpointUnguarded(const std::string& checkpoint_dir) {
  CheckpointInfo info;
  info.path = checkpoint_dir;
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  auto parsed = ReadCheckpointState(checkpoint_dir);
  if (!parsed.ok()) {
    info.problem = parsed.status().message();
    info.problem_code = parsed.status().code();
    return info;
  }
  const nlohmann::json& doc = *parsed;
  // The one validator of the counters, as resume uses it.
  auto counters = ParseTrainerState(doc, state_path);
  if (!counters.ok()) {
    info.problem = counters.status().message();
    return info;
  }
  info.step = counters->step;
  auto layout = ParseCheckpointLayout(doc, state_path);
  if (!layout.ok()) {
    info.problem = layout.status().message();
    return info;
  }
  info.layout = layout->layout;
  const nlohmann::json* files = nullptr;
  Status typed = GetJsonArray(doc, "files", state_path, &files);
  if (!typed.ok()) {
    info.problem = typed.message() + " (no file list)";
    return info;
  }
  std::set<std::string> listed;
  for (size_t i = 0; i < files->size(); ++i) {
    const nlohmann::json& f = (*files)[i];
    if (!f.is_object()) {
      info.problem = state_path + ": files[" + std::to_string(i) + "] must be an object, not " +
                     JsonExcerpt(f);
      return info;
    }
    info.problem = CheckCheckpointFile(checkpoint_dir, f, &info.problem_code);
    if (!info.problem.empty()) return info;
    listed.insert(f["path"].get<std::string>());  // CheckCheckpointFile checked it is a string
  }
  // Both layouts: Open validates every unit name (a PathComponent) and bounds
  // num_params by the unit's file or swap tensors; a unit whose file the
  // "files" list does not cover would otherwise be trusted unchecked.
  auto state = CheckpointOptimizerState::Open(checkpoint_dir);
  if (!state.ok()) {
    info.problem = state.status().message();
    info.problem_code = state.status().code();  // NotFound: e.g. its NVMe directory is missing
    return info;
  }
  if (info.layout == OffloadPlacement::kHost) {
    for (const auto& unit : (*state)->units()) {
      const std::string rel = OptimizerUnitFileName(unit.name);
      if (listed.count(rel) == 0) {
        info.problem = state_path + ": unit " + QuotedExcerpt(unit.name.str()) + " has no entry " +
                       QuotedExcerpt(rel) + " in files, so its state cannot be verified";
        return info;
      }
    }
  }
  if (info.layout == OffloadPlacement::kNvme) {
    const CheckpointSwapSet& set = (*state)->swap_set();
    auto reader = offload::SwapSetReader::Open(set.directories, set.run_id);
    if (!reader.ok()) {
      info.problem = reader.status().message();
      info.problem_code = reader.status().code();
      return info;
    }
    // Every unit's three arrays are there, whole, and every block verifies.
    for (const auto& unit : (*state)->units()) {
      for (const char* array : {"master", "exp_avg", "exp_avg_sq"}) {
        const std::string name = OptimizerSwapTensorName(unit.name, array);
        const offload::SwapTensorEntry* t = (*reader)->Find(name);
        if (t == nullptr || t->num_bytes != unit.num_params * 4) {
          info.problem = "swap set " + set.run_id + " (" + set.directories[0] + "): tensor '" +
                         name + (t == nullptr ? "' is missing" : "' has the wrong size");
          return info;
        }
      }
    }
    for (const auto& file : (*reader)->files()) {
      uint64_t checked = 0;
      auto problems = file->VerifyBlocks(&checked);
      if (!problems.empty()) {
        const offload::SwapBlockProblem& p = problems[0];
        info.problem = "swap file " + p.file + ": tensor '" + p.tensor + "' bytes [" +
                       std::to_string(p.tensor_begin_bytes) + ", " +
                       std::to_string(p.tensor_end_bytes) + ") at file offset " +
                       std::to_string(p.file_offset_bytes) + ": " + p.what;
        if (problems.size() > 1)
          info.problem += " (and " + std::to_string(problems.size() - 1) + " more blocks)";
        return info;
      }
      if (file->num_blocks_written() != file->header().num_logical_blocks) {
        info.problem =
            "swap file " + file->path() + ": " +
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
    // A symbolic link named step-N is not a checkpoint this run wrote:
    // resuming from it or applying retention through it would follow it out.
    if (name.rfind("step-", 0) != 0 || entry.is_symlink() || !entry.is_directory()) continue;
    CheckpointInfo info = VerifyCheckpoint(entry.path().string());
    if (info.step < 0) info.step = std::strtoll(name.c_str() + 5, nullptr, 10);
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step > b.step; });
  return out;
}

}  // namespace tierflow
