// Swap-set owner records, checkpoint markers and the removal rule
// (swap_set_owner.h).
#include "checkpoint/swap_set_owner.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/trainer_state.h"
#include "common/path_component.h"
#include "io/file_reader.h"
#include "io/file_system.h"
#include "io/json_util.h"

namespace tierflow {
namespace fs = std::filesystem;
namespace {

// A marker holds a path and two numbers.
constexpr size_t kMaxMarkerBytes = 64u << 10;

std::string HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

std::string Absolute(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

std::string Canonical(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? Absolute(p) : c.string();
}

void PutIdentity(nlohmann::json* j, const std::optional<DirIdentity>& id) {
  if (!id) return;
  (*j)["device"] = id->device;
  (*j)["inode"] = id->inode;
}

std::optional<DirIdentity> GetIdentity(const nlohmann::json& j) {
  uint64_t device = 0, inode = 0;
  if (!GetJsonUint64(j, "device", "", &device).ok() || !GetJsonUint64(j, "inode", "", &inode).ok())
    return std::nullopt;
  return DirIdentity{device, inode};
}

std::optional<DirIdentity> IdentityIfAny(const std::string& path) {
  auto id = IdentityOf(path);
  if (!id.ok()) return std::nullopt;
  return *id;
}

// Whether `path` (the remover) is what a record naming `recorded_path` and
// `recorded_id` names: the same directory by identity where the record has
// one (so a copy is not it, and a move within its file system still is), else
// by canonical path (records from before identities).
bool SameDirectory(const std::string& path, const std::string& recorded_path,
                   const std::optional<DirIdentity>& recorded_id) {
  if (recorded_id) {
    const auto id = IdentityIfAny(path);
    return id && *id == *recorded_id;
  }
  return Canonical(path) == Canonical(recorded_path);
}

// Rule 2 for a training run's set: its owner record names `out_dir`.
SwapSetVerdict JudgeOutputDirOwner(const std::string& dir, const offload::SwapSetInfo& set,
                                   const std::string& out_dir) {
  const std::string tier_clean = "; `tierflow tier clean " + dir + "` removes it";
  auto record = offload::ReadSwapSetOwner(dir, set.run_id);
  if (!record.ok()) {
    return {false,
            "its owner record cannot be read (" + record.status().message() + ")" + tier_clean};
  }
  if (!record->has_value()) {
    return {false,
            "it has no owner record (made by an older tierflow, or its creation was "
            "interrupted), so this run cannot tell that a run of this directory made it" +
                tier_clean};
  }
  nlohmann::json owner;
  std::string owner_dir, owner_host;
  const bool parsed = ParseJsonStrict(**record, set.path + "/owner", &owner).ok() &&
                      owner.is_object() && GetJsonString(owner, "out_dir", "", &owner_dir).ok() &&
                      GetJsonString(owner, "host", "", &owner_host).ok();
  if (!parsed) {
    return {false, "its owner record is malformed" + tier_clean};
  }
  const auto owner_id = GetIdentity(owner);
  const bool same = owner_host == HostName() && SameDirectory(out_dir, owner_dir, owner_id);
  if (!same) {
    return {false, "it was made by a run of " + QuotedExcerpt(owner_dir, 256) + " on " +
                       QuotedExcerpt(owner_host, 256) + ", not of " + out_dir + tier_clean};
  }
  return {true, "left by an interrupted run of " + out_dir};
}

}  // namespace

StatusOr<DirIdentity> IdentityOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat " + path);
  return DirIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

std::string OwnerRecordForOutputDir(const std::string& out_dir) {
  nlohmann::json j = {{"out_dir", Canonical(out_dir)}, {"host", HostName()}};
  PutIdentity(&j, IdentityIfAny(out_dir));
  return j.dump() + "\n";
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
  nlohmann::json j = {{"checkpoint", checkpoint_dir}};
  PutIdentity(&j, IdentityIfAny(checkpoint_dir));
  return WriteStringToFileAtomically(nullptr, MarkerPath(store_dir, run_id), j.dump() + "\n");
}

std::optional<CheckpointMarker> ReadMarker(const std::string& store_dir,
                                           const std::string& run_id) {
  ReadFileOptions no_follow;
  no_follow.no_follow = true;
  auto text = ReadFileToString(MarkerPath(store_dir, run_id), kMaxMarkerBytes, no_follow);
  if (!text.ok() || text->empty()) return std::nullopt;
  CheckpointMarker marker;
  if (text->front() != '{') {
    // Before identities: one line, the checkpoint's absolute path.
    marker.checkpoint = text->substr(0, text->find('\n'));
    return marker;
  }
  nlohmann::json j;
  if (!ParseJsonStrict(*text, MarkerPath(store_dir, run_id), &j).ok() || !j.is_object() ||
      !GetJsonString(j, "checkpoint", "", &marker.checkpoint).ok()) {
    return std::nullopt;
  }
  marker.identity = GetIdentity(j);
  return marker;
}

void RemoveMarker(const std::string& store_dir, const std::string& run_id) {
  std::error_code ec;
  fs::remove(MarkerPath(store_dir, run_id), ec);
}

void RemoveEmptyStoreDirectory(const std::string& store_dir) {
  std::error_code ec;
  fs::remove(fs::path(store_dir) / offload::kSwapRootName, ec);  // only when empty
  fs::remove(store_dir, ec);
}

bool CheckpointUsesSwapSet(const std::string& checkpoint_dir, const std::string& run_id) {
  auto doc = ReadCheckpointState(checkpoint_dir);
  if (!doc.ok()) return false;
  auto layout = ParseCheckpointLayout(*doc, checkpoint_dir + "/trainer_state.json");
  return layout.ok() && layout->layout == OffloadPlacement::kNvme &&
         layout->swap_set.run_id == run_id;
}

SwapSetVerdict JudgeSwapSetRemoval(const std::string& dir, const offload::SwapSetInfo& set,
                                   const SwapSetRemover& remover) {
  // 1. Stale, and not a link.
  if (set.state == offload::SwapSetState::kSymlink) {
    return {false, "a symbolic link; tierflow never follows links out of its swap directories"};
  }
  if (set.state == offload::SwapSetState::kLive) {
    return {false, "live: a running process holds its lock"};
  }
  // 3. No checkpoint its marker names still uses it.
  const auto marker = ReadMarker(dir, set.run_id);
  if (marker && CheckpointUsesSwapSet(marker->checkpoint, set.run_id)) {
    return {false, "optimizer state of checkpoint " + marker->checkpoint};
  }
  // 2. The remover is its owner on record.
  switch (remover.kind) {
    case SwapSetRemover::Kind::kUser:
      return {true, !marker ? "stale swap set left by a run that did not exit cleanly"
                            : "swap set of checkpoint " + marker->checkpoint +
                                  ", which is gone or no longer uses it"};
    case SwapSetRemover::Kind::kCheckpoint:
      if (!marker) {
        return {false,
                "it has no checkpoint marker, so nothing shows that " + remover.path + " owns it"};
      }
      if (!SameDirectory(remover.path, marker->checkpoint, marker->identity)) {
        return {false, "it belongs to checkpoint " + marker->checkpoint +
                           " (its marker says so), not to " + remover.path};
      }
      return {true, "swap set of checkpoint " + remover.path + ", retired"};
    case SwapSetRemover::Kind::kOutputDir:
      if (marker) {
        return {false,
                "a checkpoint's swap set (of " + marker->checkpoint + "), not a training run's"};
      }
      return JudgeOutputDirOwner(dir, set, remover.path);
  }
  return {false, "not removable"};
}

StatusOr<SwapSetVerdict> RemoveSwapSetIfAllowed(const std::string& dir,
                                                const offload::SwapSetInfo& set,
                                                const SwapSetRemover& remover, bool dry_run) {
  SwapSetVerdict verdict = JudgeSwapSetRemoval(dir, set, remover);
  if (!verdict.remove || dry_run) return verdict;
  const bool had_marker = ReadMarker(dir, set.run_id).has_value();
  // RemoveSwapSet takes the set's lock itself: a run that started in it
  // since the listing keeps it.
  Status s = offload::RemoveSwapSet(dir, set.run_id);
  if (s.code() == StatusCode::kFailedPrecondition) {
    return SwapSetVerdict{false, "skipped: " + s.message()};  // live (or a link) meanwhile
  }
  TF_RETURN_IF_ERROR(s);
  RemoveMarker(dir, set.run_id);
  if (had_marker) RemoveEmptyStoreDirectory(dir);
  return verdict;
}

StatusOr<SwapSetVerdict> RemoveSwapSetIfAllowed(const std::string& dir, const std::string& run_id,
                                                const SwapSetRemover& remover) {
  TF_ASSIGN_OR_RETURN(std::vector<offload::SwapSetInfo> sets, offload::ListSwapSets(dir));
  for (const offload::SwapSetInfo& set : sets) {
    if (set.run_id == run_id) return RemoveSwapSetIfAllowed(dir, set, remover);
  }
  return NotFoundError("no swap set " + offload::RunDirectory(dir, run_id));
}

}  // namespace tierflow
