// Run directories, flock()-based liveness, stale-set listing and removal,
// and the O_DIRECT capability check at open time.
#include "offload/swap_set.h"

#include <dirent.h>
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
#include <vector>

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

StatusOr<RunLock> RunLock::Acquire(const std::string& run_dir, bool fresh) {
  std::string path = (fs::path(run_dir) / "lock").string();
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "open lock file " + path);
  // A fresh set's lock can only be held by another process's probe
  // (ListSwapSets), for an instant: wait for it rather than fail.
  if (flock(fd, fresh ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPreconditionError("swap set " + run_dir + " is in use by a live run (its lock " +
                                     path + " is held)");
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
  switch (state) {
    case SwapSetState::kLive:
      return "live";
    case SwapSetState::kStale:
      return "stale";
    case SwapSetState::kSymlink:
      return "symlink";
  }
  return "?";
}

namespace {

// A descriptor closed on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status SymlinkRefused(const std::string& path) {
  return FailedPreconditionError(path +
                                 " is a symbolic link; tierflow does not follow links out "
                                 "of its swap directories (remove the link itself)");
}

// Opens `name` under `parent_fd` (AT_FDCWD: `name` is a path) as a
// directory without following a final symbolic link. Errors: NotFound;
// FailedPrecondition naming `path` for a link or a non-directory; errno errors.
StatusOr<int> OpenDirNoFollow(int parent_fd, const std::string& name, const std::string& path) {
  const int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int err = errno;
  if (err == ELOOP || err == ENOTDIR) {
    struct stat st {};
    if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      return SymlinkRefused(path);
    }
    return FailedPreconditionError(path + " is not a directory; tierflow expected its own there");
  }
  return ErrnoStatus(err, "open directory " + path);
}

// Unlinks the lock file and state-*.swap files of the open run directory
// `run_fd`, then the directory itself (named `run_id` under `root_fd`).
// unlinkat never follows the name it removes, so a link among them goes,
// not what it points to.
Status RemoveRunDirectoryAt(int root_fd, int run_fd, const std::string& run_dir,
                            const std::string& run_id) {
  const int list_fd = ::dup(run_fd);
  if (list_fd < 0) return ErrnoStatus(errno, "list " + run_dir);
  DIR* d = ::fdopendir(list_fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(list_fd);
    return ErrnoStatus(err, "list " + run_dir);
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const bool swap = name.rfind("state-", 0) == 0 && name.size() > 5 &&
                      name.compare(name.size() - 5, 5, ".swap") == 0;
    if (name == "lock" || name == kSwapSetOwnerFile || swap) names.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    if (::unlinkat(run_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "remove " + run_dir + "/" + name);
    }
  }
  if (::unlinkat(root_fd, run_id.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno,
                       "remove directory " + run_dir + " (it holds files tierflow did not create)");
  }
  return Status::Ok();
}

// Removes DIR/tierflow-swap when it is empty (and is a directory, not a link).
Status RemoveEmptySwapRoot(const std::string& dir) {
  const fs::path root = fs::path(dir) / kSwapRootName;
  if (::rmdir(root.c_str()) != 0 && errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT &&
      errno != ENOTDIR) {
    return ErrnoStatus(errno, "remove directory " + root.string());
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<SwapSetInfo>> ListSwapSets(const std::string& dir) {
  std::vector<SwapSetInfo> sets;
  fs::path root = fs::path(dir) / kSwapRootName;
  std::error_code ec;
  const fs::file_status root_status = fs::symlink_status(root, ec);
  if (!fs::exists(root_status)) return sets;
  if (fs::is_symlink(root_status)) {
    sets.push_back({"", root.string(), SwapSetState::kSymlink, 0, 0});
    return sets;
  }
  fs::directory_iterator it(root, ec);
  if (ec) return ErrnoStatus(ec.value(), "list " + root.string());
  for (const fs::directory_entry& e : it) {
    SwapSetInfo info;
    info.run_id = e.path().filename().string();
    info.path = e.path().string();
    // Never through a link: a set's lock and files are probed, sized and
    // (by tier clean) removed, and a linked "set" would be someone else's.
    const fs::file_status st = e.symlink_status(ec);
    if (fs::is_symlink(st)) {
      info.state = SwapSetState::kSymlink;
      sets.push_back(std::move(info));
      continue;
    }
    if (!fs::is_directory(st)) continue;
    // Probing with flock: we get it only when no live run holds it.
    std::string lock_path = (e.path() / "lock").string();
    int fd = open(lock_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
      info.state = flock(fd, LOCK_EX | LOCK_NB) == 0 ? SwapSetState::kStale : SwapSetState::kLive;
      close(fd);
    } else {
      info.state = SwapSetState::kStale;  // no lock file: nothing can be holding it
    }
    for (const fs::directory_entry& f : fs::directory_iterator(e.path(), ec)) {
      struct stat fst {};
      if (f.path().extension() == ".swap" && lstat(f.path().c_str(), &fst) == 0 &&
          S_ISREG(fst.st_mode)) {
        info.num_bytes += static_cast<uint64_t>(fst.st_blocks) * 512;
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
    // A set without a swap file holds nothing to lose or resume: another
    // run creating its set right now (between its mkdir and its flock: data
    // parallel ranks share the directory) or a creation that died before its
    // first file. `tier clean` still lists and removes such a set.
    if (s.state != SwapSetState::kStale || s.num_files == 0) continue;
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
  const std::string root = (fs::path(dir) / kSwapRootName).string();
  auto root_fd = OpenDirNoFollow(AT_FDCWD, root, root);
  if (!root_fd.ok()) {
    return root_fd.status().code() == StatusCode::kNotFound ? Status::Ok() : root_fd.status();
  }
  ScopedFd root_guard(*root_fd);
  const std::string run_dir = RunDirectory(dir, run_id);
  auto run_fd = OpenDirNoFollow(*root_fd, run_id, run_dir);
  if (run_fd.ok()) {
    ScopedFd run_guard(*run_fd);
    TF_RETURN_IF_ERROR(RemoveRunDirectoryAt(*root_fd, *run_fd, run_dir, run_id));
  } else if (run_fd.status().code() != StatusCode::kNotFound) {
    return run_fd.status();
  }
  return RemoveEmptySwapRoot(dir);
}

Status RemoveSwapSet(const std::string& dir, const std::string& run_id) {
  TF_RETURN_IF_ERROR(ValidateRunId(run_id));
  const std::string root = (fs::path(dir) / kSwapRootName).string();
  const std::string run_dir = RunDirectory(dir, run_id);
  auto root_fd = OpenDirNoFollow(AT_FDCWD, root, root);
  if (!root_fd.ok()) {
    if (root_fd.status().code() == StatusCode::kNotFound)
      return NotFoundError("no swap set " + run_dir);
    return root_fd.status();
  }
  ScopedFd root_guard(*root_fd);
  auto run_fd = OpenDirNoFollow(*root_fd, run_id, run_dir);
  if (!run_fd.ok()) {
    if (run_fd.status().code() == StatusCode::kNotFound)
      return NotFoundError("no swap set " + run_dir);
    return run_fd.status();
  }
  ScopedFd run_guard(*run_fd);
  // Holding the lock while removing keeps a run from starting in it meanwhile.
  const std::string lock_path = run_dir + "/lock";
  ScopedFd lock(::openat(*run_fd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (lock.get() < 0) {
    if (errno == ELOOP) return SymlinkRefused(lock_path);
    return ErrnoStatus(errno, "open lock file " + lock_path);
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return FailedPreconditionError("swap set " + run_dir + " is in use by a live run (its lock " +
                                     lock_path + " is held)");
    }
    return ErrnoStatus(errno, "flock " + lock_path);
  }
  TF_RETURN_IF_ERROR(RemoveRunDirectoryAt(*root_fd, *run_fd, run_dir, run_id));
  return RemoveEmptySwapRoot(dir);
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

Status WriteSwapSetOwner(const std::string& dir, const std::string& run_id,
                         const std::string& owner) {
  const std::string path = RunDirectory(dir, run_id) + "/" + kSwapSetOwnerFile;
  if (owner.size() > kMaxSwapSetOwnerBytes) {
    return InvalidArgumentError("owner record for " + path + " is over " +
                                std::to_string(kMaxSwapSetOwnerBytes) + " bytes");
  }
  ScopedFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) return ErrnoStatus(errno, "create " + path);
  size_t done = 0;
  while (done < owner.size()) {
    const ssize_t n = ::write(fd.get(), owner.data() + done, owner.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "write " + path);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "fsync " + path);
  return Status::Ok();
}

StatusOr<std::optional<std::string>> ReadSwapSetOwner(const std::string& dir,
                                                      const std::string& run_id) {
  const std::string path = RunDirectory(dir, run_id) + "/" + kSwapSetOwnerFile;
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return ErrnoStatus(errno, "open " + path);
  }
  std::string text(kMaxSwapSetOwnerBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read " + path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxSwapSetOwnerBytes) {
    return InvalidArgumentError(path + " is over " + std::to_string(kMaxSwapSetOwnerBytes) +
                                " bytes: not an owner record tierflow wrote");
  }
  text.resize(got);
  return std::optional<std::string>(std::move(text));
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
    struct statfs sfs {};
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
