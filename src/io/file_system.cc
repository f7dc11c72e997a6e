// POSIX FileSystem and the temp-file + fsync + rename protocol used for every checkpoint file.
#include "io/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "io/output_path.h"

namespace tierflow {
namespace {

// Writes more than this per call are split: Linux caps one write(2) near 2 GiB.
constexpr size_t kMaxWriteBytes = size_t{1} << 30;

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(const void* data, size_t num_bytes) override {
    if (fd_ < 0) return FailedPreconditionError("append to closed file " + path_);
    const char* p = static_cast<const char*>(data);
    while (num_bytes > 0) {
      size_t chunk = num_bytes < kMaxWriteBytes ? num_bytes : kMaxWriteBytes;
      ssize_t n = ::write(fd_, p, chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "write " + path_ + " at offset " + std::to_string(offset_bytes_));
      }
      p += n;
      num_bytes -= static_cast<size_t>(n);
      offset_bytes_ += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  Status Sync() override {
    if (fd_ < 0) return FailedPreconditionError("fsync of closed file " + path_);
    if (::fsync(fd_) != 0) return ErrnoStatus(errno, "fsync " + path_);
    return Status::Ok();
  }

  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    int fd = fd_;
    fd_ = -1;
    // close(2) must not be retried on EINTR on Linux: the descriptor is gone either way.
    if (::close(fd) != 0 && errno != EINTR) return ErrnoStatus(errno, "close " + path_);
    return Status::Ok();
  }

 private:
  int fd_;
  std::string path_;
  uint64_t offset_bytes_ = 0;
};

class PosixFileSystem final : public FileSystem {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd;
    do {
      // O_EXCL | O_NOFOLLOW: whatever is already there (a link, another
      // process's file) is never written through.
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoStatus(errno, "create " + path);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(fd, path));
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(errno, "rename " + from + " to " + to);
    }
    return Status::Ok();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus(errno, "remove " + path);
    return Status::Ok();
  }

  Status SyncDirectory(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "open directory " + dir + " to fsync it");
    Status s;
    if (::fsync(fd) != 0) s = ErrnoStatus(errno, "fsync directory " + dir);
    ::close(fd);
    return s;
  }
};

}  // namespace

FileSystem* DefaultFileSystem() {
  static PosixFileSystem* fs = new PosixFileSystem();  // never deleted: usable during exit
  return fs;
}

StatusOr<std::unique_ptr<WritableFile>> OpenFileToAppendInPlace(const std::string& path,
                                                                bool truncate,
                                                                std::string_view what) {
  const std::string named = what.empty() ? path : std::string(what) + " " + path;
  // By name first, so that a FIFO is refused rather than opened (which waits
  // for a reader); then on the open file, so that what is written is what
  // was checked.
  TF_RETURN_IF_ERROR(CheckExistingOutputFile(path, OutputWrite::kInPlace, what));
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open " + named + " to append to it");
  auto file = std::make_unique<PosixWritableFile>(fd, path);
  TF_RETURN_IF_ERROR(CheckInPlaceFile(fd, path, what));
  if (truncate && ::ftruncate(fd, 0) != 0) return ErrnoStatus(errno, "empty " + named);
  return std::unique_ptr<WritableFile>(std::move(file));
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status WriteFileAtomically(FileSystem* fs, const std::string& path,
                           const std::function<Status(WritableFile&)>& write_body) {
  if (fs == nullptr) fs = DefaultFileSystem();
  const std::string context = "writing " + path;
  // A link in `path`'s place would be replaced by the rename, losing what
  // the user linked; refused before anything is written.
  TF_RETURN_IF_ERROR(CheckExistingOutputFile(path, OutputWrite::kReplace, "").WithContext(context));
  // pid + a process-wide counter: concurrent writers (threads or processes)
  // of the same path never share a temporary file. A name taken (a crashed
  // process's leftover of the same pid) is skipped; the temporary is created
  // O_EXCL, so one appearing meanwhile is an error, never written through.
  static std::atomic<uint64_t> counter{0};
  std::string tmp_path;
  struct stat st {};
  do {
    tmp_path =
        path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  } while (::lstat(tmp_path.c_str(), &st) == 0);
  StatusOr<std::unique_ptr<WritableFile>> file = fs->NewWritableFile(tmp_path);
  if (!file.ok()) return file.status().WithContext(context);

  Status s = write_body(**file);
  if (s.ok()) s = (*file)->Sync();
  Status close_status = (*file)->Close();
  if (s.ok()) s = close_status;
  if (s.ok()) s = fs->RenameFile(tmp_path, path);
  if (!s.ok()) {
    // Best effort: the error that matters is the one already in `s`.
    (void)fs->RemoveFile(tmp_path);
    return s.WithContext(context + " (the previous file, if any, is unchanged)");
  }
  s = fs->SyncDirectory(DirectoryOf(path));
  if (!s.ok()) return s.WithContext(context + " (renamed into place, but not yet durable)");
  return Status::Ok();
}

Status WriteStringToFileAtomically(FileSystem* fs, const std::string& path,
                                   std::string_view contents) {
  return WriteFileAtomically(
      fs, path, [contents](WritableFile& f) { return f.Append(contents.data(), contents.size()); });
}

std::string ReplacedDirectoryAsidePrefix(const std::string& name) { return "." + name + ".old-"; }

Status ReplaceDirectory(FileSystem* fs, const std::string& tmp_dir, const std::string& final_dir) {
  namespace stdfs = std::filesystem;
  if (fs == nullptr) fs = DefaultFileSystem();
  stdfs::path target(final_dir);
  if (!target.has_filename()) target = target.parent_path();  // "out/model/"
  const std::string parent = DirectoryOf(target.string());
  const std::string aside =
      (stdfs::path(parent) /
       (ReplacedDirectoryAsidePrefix(target.filename().string()) + std::to_string(::getpid())))
          .string();
  std::error_code ec;
  // symlink_status: a link in final_dir's place is itself moved aside and
  // removed, never followed. Type `none` is an error other than not-found.
  const stdfs::file_status status = stdfs::symlink_status(target, ec);
  if (status.type() == stdfs::file_type::none) {
    return IoError("stat " + target.string() + ": " + ec.message());
  }
  const bool had_old = stdfs::exists(status);
  if (had_old) {
    // An aside copy already there (same pid: an earlier failed fsync, or a
    // dead process's) is superseded by final_dir, and would make rename(2)
    // fail with ENOTEMPTY.
    stdfs::remove_all(aside, ec);
    if (ec) {
      return IoError("remove " + aside + " (an earlier replacement's leftover): " + ec.message());
    }
    TF_RETURN_IF_ERROR(fs->RenameFile(target.string(), aside)
                           .WithContext("moving the previous " + target.string() + " aside"));
  }
  if (Status s = fs->RenameFile(tmp_dir, target.string()); !s.ok()) {
    std::string kept = "the previous one, if any, is unchanged";
    if (had_old && !fs->RenameFile(aside, target.string()).ok()) {
      kept = "the previous one could not be put back and is at " + aside;
    }
    return s.WithContext("putting " + target.string() + " in place (" + kept + ")");
  }
  TF_RETURN_IF_ERROR(
      fs->SyncDirectory(parent).WithContext(target.string() + " is in place but not yet durable"));
  if (had_old) stdfs::remove_all(aside, ec);  // a leftover is the caller's to remove next time
  return Status::Ok();
}

}  // namespace tierflow
