// Run directories, flock()-based liveness, stale-set listing and removal,
// and the O_DIRECT capability check at open time.
#include "offload/swap_set.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <system_error>

namespace tierflow::offload {

namespace fs = std::filesystem;

std::string RunDirectory(const std::string& dir, const std::string& run_id) {
  return (fs::path(dir) / kSwapRootName / run_id).string();
}

std::string SwapFilePath(const std::string& dir, const std::string& run_id, uint32_t dir_index) {
  return (fs::path(RunDirectory(dir, run_id)) / ("state-" + std::to_string(dir_index) + ".swap"))
      .string();
}

std::string MakeRunId() {
  static std::atomic<uint32_t> counter{0};
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  return std::string("run-") + stamp + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

Status ValidateRunId(const std::string& run_id) {
  bool ok = !run_id.empty() && run_id.size() <= 128 && run_id != "." && run_id != "..";
  for (char c : run_id) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-');
  }
  if (!ok) {
    return InvalidArgumentError("run id '" + run_id +
                                "' is not valid: use 1-128 characters of A-Z a-z 0-9 . _ -");
  }
  return Status::Ok();
}

StatusOr<RunLock> RunLock::Acquire(const std::string& run_dir) {
  std::string path = (fs::path(run_dir) / "lock").string();
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "open lock file " + path);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPreconditionError("swap set " + run_dir +
                                     " is in use by a live run (its lock " + path + " is held)");
    }
    return ErrnoStatus(err, "flock " + path);
  }
  RunLock lock;
  lock.fd_ = fd;
  lock.path_ = path;
  return lock;
}

RunLock::RunLock(RunLock&& other) noexcept { *this = std::move(other); }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

RunLock::~RunLock() { Release(); }

void RunLock::Release() {
  if (fd_ >= 0) {
    close(fd_);  // closing the last descriptor drops the flock
    fd_ = -1;
  }
}

std::string_view SwapSetStateName(SwapSetState state) {
  return state == SwapSetState::kLive ? "live" : "stale";
}

StatusOr<std::vector<SwapSetInfo>> ListSwapSets(const std::string& dir) {
  std::vector<SwapSetInfo> sets;
  fs::path root = fs::path(dir) / kSwapRootName;
  std::error_code ec;
  if (!fs::exists(root, ec)) return sets;
  fs::directory_iterator it(root, ec);
  if (ec) return ErrnoStatus(ec.value(), "list " + root.string());
  for (const fs::directory_entry& e : it) {
    if (!e.is_directory(ec)) continue;
    SwapSetInfo info;
    info.run_id = e.path().filename().string();
    info.path = e.path().string();
    // Probing with flock: we get it only when no live run holds it.
    std::string lock_path = (e.path() / "lock").string();
    int fd = open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      info.state = flock(fd, LOCK_EX | LOCK_NB) == 0 ? SwapSetState::kStale : SwapSetState::kLive;
      close(fd);
    } else {
      info.state = SwapSetState::kStale;  // no lock file: nothing can be holding it
    }
    for (const fs::directory_entry& f : fs::directory_iterator(e.path(), ec)) {
      struct stat st{};
      if (f.path().extension() == ".swap" && stat(f.path().c_str(), &st) == 0) {
        info.num_bytes += static_cast<uint64_t>(st.st_blocks) * 512;
        ++info.num_files;
      }
    }
    sets.push_back(std::move(info));
  }
  return sets;
}

Status CheckNoStaleSwapSets(const std::string& dir) {
  TF_ASSIGN_OR_RETURN(std::vector<SwapSetInfo> sets, ListSwapSets(dir));
  std::string stale;
  for (const SwapSetInfo& s : sets) {
    if (s.state != SwapSetState::kStale) continue;
    if (!stale.empty()) stale += ", ";
    stale += s.path + " (" + std::to_string(s.num_files) + " files, " +
             std::to_string(s.num_bytes >> 20) + " MiB)";
  }
  if (stale.empty()) return Status::Ok();
  return FailedPreconditionError(
      "stale swap set(s) left by a run that did not exit cleanly: " + stale +
      "; tierflow never adds to them. Remove them with `tierflow tier clean " + dir +
      "` (or resume that run) and start again");
}

Status RemoveRunDirectory(const std::string& dir, const std::string& run_id) {
  fs::path run_dir = RunDirectory(dir, run_id);
  std::error_code ec;
  if (fs::exists(run_dir, ec)) {
    for (const fs::directory_entry& f : fs::directory_iterator(run_dir, ec)) {
      std::string name = f.path().filename().string();
      if (name == "lock" || (name.rfind("state-", 0) == 0 && f.path().extension() == ".swap")) {
        if (unlink(f.path().c_str()) != 0 && errno != ENOENT) {
          return ErrnoStatus(errno, "remove " + f.path().string());
        }
      }
    }
    if (rmdir(run_dir.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "remove directory " + run_dir.string() +
                                    " (it holds files tierflow did not create)");
    }
  }
  fs::path root = fs::path(dir) / kSwapRootName;
  if (rmdir(root.c_str()) != 0 && errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT) {
    return ErrnoStatus(errno, "remove directory " + root.string());
  }
  return Status::Ok();
}

Status RemoveSwapSet(const std::string& dir, const std::string& run_id) {
  TF_RETURN_IF_ERROR(ValidateRunId(run_id));
  std::string run_dir = RunDirectory(dir, run_id);
  std::error_code ec;
  if (!fs::exists(run_dir, ec)) return NotFoundError("no swap set " + run_dir);
  // Holding the lock while removing keeps a run from starting in it meanwhile.
  TF_ASSIGN_OR_RETURN(RunLock lock, RunLock::Acquire(run_dir));
  return RemoveRunDirectory(dir, run_id);
}

StatusOr<uint32_t> RemoveStaleSwapSets(const std::string& dir) {
  TF_ASSIGN_OR_RETURN(std::vector<SwapSetInfo> sets, ListSwapSets(dir));
  uint32_t removed = 0;
  for (const SwapSetInfo& s : sets) {
    if (s.state != SwapSetState::kStale) continue;
    Status st = RemoveSwapSet(dir, s.run_id);
    if (st.code() == StatusCode::kFailedPrecondition) continue;  // became live meanwhile
    TF_RETURN_IF_ERROR(st);
    ++removed;
  }
  return removed;
}

StatusOr<int> OpenSwapFile(const std::string& path, IoMode mode, bool create) {
  int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  auto no_direct = [&path] {
    return UnavailableError("file system at " + path +
                            " does not support O_DIRECT; use --nvme-buffered (buffered I/O "
                            "through the page cache)");
  };
  if (mode == IoMode::kDirect) {
    // tmpfs and ramfs accept O_DIRECT since Linux 6.6 but still keep every
    // byte in RAM; treat them as what they are.
    struct statfs sfs{};
    std::string parent = fs::path(path).parent_path().string();
    if (statfs(parent.c_str(), &sfs) == 0 &&
        (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC)) {
      return no_direct();
    }
    flags |= O_DIRECT;
  }
  int fd = open(path.c_str(), flags, 0600);
  if (fd < 0) {
    int err = errno;
    if (err == EINVAL && mode == IoMode::kDirect) return no_direct();
    return ErrnoStatus(err, std::string(create ? "create " : "open ") + "swap file " + path);
  }
  return fd;
}

}  // namespace tierflow::offload
