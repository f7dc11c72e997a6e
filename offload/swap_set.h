// Swap sets on disk: where a run's swap files live, the lock that marks a
// run as live, finding stale sets left by crashed runs, removing them, and
// opening swap files with O_DIRECT (or, only when asked, buffered).
//
// Layout, per state directory (one per drive):
//   DIR/tierflow-swap/RUN_ID/lock            flock()ed while the run lives
//   DIR/tierflow-swap/RUN_ID/state-I.swap    the swap file of directory I
//   DIR/tierflow-swap/RUN_ID/owner           who made the set (opaque text the
//                                            creator chose: StateStoreOptions::owner;
//                                            checkpoint/swap_set_owner.h reads it)
// A set whose lock nobody holds is stale: its run ended without a clean
// Close (crash, kill -9). Stale sets are reported, never reused or appended
// to; `tierflow tier clean DIR` removes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tierflow/status.h"

namespace tierflow::offload {

inline constexpr char kSwapRootName[] = "tierflow-swap";

enum class IoMode : uint8_t {
  kDirect,    // O_DIRECT: bypasses the page cache (the default)
  kBuffered,  // through the page cache; only when explicitly chosen
};

inline constexpr char kSwapSetOwnerFile[] = "owner";
// Bound of an owner record: a path and a few fields.
inline constexpr size_t kMaxSwapSetOwnerBytes = 16u << 10;

// "DIR/tierflow-swap/RUN_ID".
std::string RunDirectory(const std::string& dir, const std::string& run_id);
// "DIR/tierflow-swap/RUN_ID/state-I.swap".
std::string SwapFilePath(const std::string& dir, const std::string& run_id, uint32_t dir_index);

// A fresh run id: "run-YYYYMMDD-HHMMSS-PID-N".
std::string MakeRunId();
// InvalidArgument unless `run_id` is 1..128 of [A-Za-z0-9._-] and not "."/"..".
Status ValidateRunId(const std::string& run_id);

// An flock() held on RUN_DIR/lock; released (not removed) on destruction.
class RunLock {
 public:
  RunLock() = default;
  // Creates the lock file if needed and locks it without waiting, or, for a
  // `fresh` run directory (just created by this process), waiting out
  // another process's momentary probe. Errors: FailedPrecondition when
  // another process (or open) holds it, naming the path; errno errors of
  // open/flock.
  static StatusOr<RunLock> Acquire(const std::string& run_dir, bool fresh = false);
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();
  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  void Release();

 private:
  int fd_ = -1;
  std::string path_;
};

// kSymlink: the entry (a run directory, or DIR/tierflow-swap itself) is a
// symbolic link. tierflow never follows links out of the directories it owns:
// such an entry is reported, never probed, sized or removed.
enum class SwapSetState : uint8_t { kLive, kStale, kSymlink };
std::string_view SwapSetStateName(SwapSetState state);  // "live", "stale", "symlink"

struct SwapSetInfo {
  std::string run_id;
  std::string path;  // the run directory
  SwapSetState state = SwapSetState::kStale;
  uint64_t num_bytes = 0;  // allocated on disk by its files
  uint32_t num_files = 0;
};

// The swap sets under DIR/tierflow-swap (empty when there is none). A set
// is live when its lock is held, stale otherwise; a symbolic link in place of
// a run directory (or of DIR/tierflow-swap: then run_id is "") is listed as
// kSymlink and not followed. Errors: errno errors of reading the directory.
StatusOr<std::vector<SwapSetInfo>> ListSwapSets(const std::string& dir);

// FailedPrecondition when DIR holds any stale set, naming each and saying
// how to remove them; OK when it holds none (live sets of other runs are fine).
Status CheckNoStaleSwapSets(const std::string& dir);

// Removes the stale set RUN_ID under DIR (holding its lock while removing),
// never following a symbolic link: DIR/tierflow-swap and its RUN_ID are
// opened with O_NOFOLLOW and the files are unlinked relative to them.
// Errors: FailedPrecondition when the set is live, or when either is a
// symbolic link (naming it); NotFound when absent.
Status RemoveSwapSet(const std::string& dir, const std::string& run_id);

// Removes every stale set under DIR; returns how many were removed.
StatusOr<uint32_t> RemoveStaleSwapSets(const std::string& dir);

// Writes RUN_DIR/owner in the run directory just made for `run_id` (created
// exclusively, never through a link, fsync'd). Errors: errno errors naming
// the path; InvalidArgument over kMaxSwapSetOwnerBytes.
Status WriteSwapSetOwner(const std::string& dir, const std::string& run_id,
                         const std::string& owner);
// The owner record of the set `run_id` under DIR, or nullopt when it has
// none. Read without following a link, at most kMaxSwapSetOwnerBytes.
// Errors: errno errors other than ENOENT; InvalidArgument for a larger file.
StatusOr<std::optional<std::string>> ReadSwapSetOwner(const std::string& dir,
                                                      const std::string& run_id);

// Opens (and with `create`, creates exclusively) a swap file. kDirect:
// Unavailable when the file system has no real O_DIRECT (tmpfs, ramfs, or
// open() says EINVAL), with the message "file system at PATH does not support
// O_DIRECT; use --nvme-buffered (buffered I/O through the page cache)".
// Errors of open() name the path. Returns the fd (caller closes it).
StatusOr<int> OpenSwapFile(const std::string& path, IoMode mode, bool create);

// Removes the run directory's swap files, owner record, lock file and the directory, and
// DIR/tierflow-swap when it is left empty, never following a symbolic link
// (as RemoveSwapSet). Missing files are not an error.
Status RemoveRunDirectory(const std::string& dir, const std::string& run_id);

}  // namespace tierflow::offload
