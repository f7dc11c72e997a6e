// flock on DIR/.tierflow.lock, with the holder written into the file.
#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <utility>

#include "io/output_path.h"

namespace tierflow {
namespace {

std::string LockPath(const std::string& dir) { return dir + "/" + DirLock::kFileName; }

// Opens the lock file without following a link. `create`: make it if absent.
StatusOr<int> OpenLockFile(const std::string& path, bool create) {
  const int fd =
      ::open(path.c_str(), (create ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd >= 0) return fd;
  if (errno == ELOOP) {
    return DataLossError(path + " is a symbolic link; tierflow does not follow it (remove it)");
  }
  return ErrnoStatus(errno, "open lock file " + path);
}

// What the holder wrote ("pid 1234 on host, since ..."), from an open lock file.
std::string Holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';  // one line, printable
  }
  return text.empty() ? "pid unknown (it has not written its name yet)" : text;
}

Status HeldError(const std::string& dir, int fd) {
  return FailedPreconditionError("directory " + dir + " is in use by another tierflow process (" +
                                 Holder(fd) + "; it holds " + LockPath(dir) +
                                 "); wait for it to finish, or use another directory (--out)");
}

}  // namespace

StatusOr<DirLock> DirLock::Acquire(const std::string& dir, std::string_view what) {
  const std::string path = LockPath(dir);
  TF_ASSIGN_OR_RETURN(int fd, OpenLockFile(path, /*create=*/true));
  // The holder's line is written in place: a lock file that is another
  // file's hard link (or not a regular file) is refused before it is touched.
  if (Status s = CheckInPlaceFile(fd, path, "lock file"); !s.ok()) {
    ::close(fd);
    return s;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    Status s = err == EWOULDBLOCK ? HeldError(dir, fd) : ErrnoStatus(err, "flock " + path);
    ::close(fd);
    return s;
  }
  DirLock lock;
  lock.fd_ = fd;
  lock.dir_ = dir;
  // Who holds it, for the message that refuses the next process. Best
  // effort: the flock, not this text, is the lock.
  char host[256] = "unknown host";
  (void)::gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  char since[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::gmtime_r(&now, &tm) != nullptr)
    std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string text = std::string(what) + ", pid " + std::to_string(::getpid()) + " on " +
                           host + ", since " + since + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, text.data(), text.size(), 0);
  return lock;
}

Status DirLock::CheckNotHeld(const std::string& dir) {
  const std::string path = LockPath(dir);
  auto fd = OpenLockFile(path, /*create=*/false);
  if (!fd.ok()) return fd.status().code() == StatusCode::kNotFound ? Status::Ok() : fd.status();
  Status s;
  if (::flock(*fd, LOCK_SH | LOCK_NB) != 0) {
    s = errno == EWOULDBLOCK ? HeldError(dir, *fd) : ErrnoStatus(errno, "flock " + path);
  }
  ::close(*fd);  // drops the probe's shared lock
  return s;
}

DirLock::DirLock(DirLock&& other) noexcept { *this = std::move(other); }

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
  }
  return *this;
}

DirLock::~DirLock() { Release(); }

void DirLock::Release() {
  if (fd_ >= 0) {
    ::close(fd_);  // the last descriptor of the open file: the flock goes with it
    fd_ = -1;
  }
}

}  // namespace tierflow
