// Checks on the paths tierflow writes (io/output_path.h).
#include "io/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>

namespace tierflow {
namespace {

namespace stdfs = std::filesystem;

std::string Named(const std::string& path, std::string_view what) {
  return what.empty() ? path : std::string(what) + " " + path;
}

// What a refused file is, for the message.
std::string KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a file";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

Status CheckMode(const struct stat& st, const std::string& path, OutputWrite how,
                 std::string_view what) {
  if (S_ISLNK(st.st_mode)) {
    return FailedPreconditionError(
        Named(path, what) +
        " is a symbolic link; tierflow never writes through a link nor replaces one: remove "
        "the link, or name the file it points to");
  }
  if (!S_ISREG(st.st_mode)) {
    return FailedPreconditionError(Named(path, what) + " is " + KindOf(st.st_mode) +
                                   "; tierflow writes a regular file there: move it away, or "
                                   "name another path");
  }
  if (how == OutputWrite::kInPlace && st.st_nlink > 1) {
    return FailedPreconditionError(
        Named(path, what) + " has " + std::to_string(st.st_nlink) +
        " hard links; tierflow writes it in place, which would change the file under its other "
        "names too: remove this name (the other names keep the contents), or name another path");
  }
  return Status::Ok();
}

// `p` absolute and canonical where it exists, without a trailing separator.
stdfs::path Canonical(const std::string& p) {
  std::error_code ec;
  stdfs::path c = stdfs::weakly_canonical(stdfs::absolute(p, ec), ec);
  if (ec) c = stdfs::absolute(p, ec).lexically_normal();  // unreadable: compare as written
  if (!c.has_filename() && c.has_parent_path() && c != c.root_path()) c = c.parent_path();
  return c;
}

}  // namespace

Status CheckExistingOutputFile(const std::string& path, OutputWrite how, std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    // Absent (ENOTDIR: a parent is a file): what a missing directory means
    // is CheckOutputFile's to say.
    if (errno == ENOENT || errno == ENOTDIR) return Status::Ok();
    return ErrnoStatus(errno, "stat " + Named(path, what));
  }
  return CheckMode(st, path, how, what);
}

Status CheckInPlaceFile(int fd, const std::string& path, std::string_view what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat " + Named(path, what));
  return CheckMode(st, path, OutputWrite::kInPlace, what);
}

Status CheckOutputFile(const std::string& path, OutputWrite how, std::string_view what) {
  if (path.empty() || path.back() == '/') {
    return InvalidArgumentError(std::string(what.empty() ? "output" : what) + " '" + path +
                                "' names no file");
  }
  TF_RETURN_IF_ERROR(CheckExistingOutputFile(path, how, what));
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return NotFoundError("the directory of " + Named(path, what) + ", " + dir +
                           ", does not exist: create it first, or name another path");
    }
    return ErrnoStatus(errno, "stat " + dir + ", the directory of " + Named(path, what));
  }
  if (!S_ISDIR(st.st_mode)) {
    return FailedPreconditionError("the directory of " + Named(path, what) + ", " + dir +
                                   ", is not a directory");
  }
  // Creating a file is what the write does first; a temporary proves it can.
  static std::atomic<uint64_t> counter{0};
  const std::string probe = dir + "/.tierflow-probe-" + std::to_string(::getpid()) + "-" +
                            std::to_string(counter.fetch_add(1));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return ErrnoStatus(errno, "create a file in " + dir + " (for " + Named(path, what) + ")");
  }
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) return ErrnoStatus(errno, "remove " + probe);
  return Status::Ok();
}

Status CheckNoLinksUnder(const std::string& root, const std::string& path) {
  const stdfs::path rel =
      stdfs::path(path).lexically_normal().lexically_relative(stdfs::path(root).lexically_normal());
  if (rel.empty() || *rel.begin() == "..") {
    return InternalError(path + " is not below " + root);
  }
  stdfs::path at = root;
  for (const stdfs::path& part : rel) {
    if (part.empty() || part == ".") continue;
    at /= part;
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::Ok();  // made later, by tierflow
      return ErrnoStatus(errno, "stat " + at.string());
    }
    if (S_ISLNK(st.st_mode)) {
      return FailedPreconditionError(
          at.string() + " is a symbolic link; tierflow writes in " + root +
          " only what its listing shows and never through a link: remove the link (to keep the "
          "output on another drive, give --out there)");
    }
    if (!S_ISDIR(st.st_mode)) {
      return FailedPreconditionError(at.string() + " is " + KindOf(st.st_mode) +
                                     ", where tierflow keeps a directory: move it away");
    }
  }
  return Status::Ok();
}

bool IsPathInside(const std::string& path, const std::string& dir) {
  std::error_code ec;
  if (!stdfs::exists(dir, ec)) return false;
  const stdfs::path p = Canonical(path), d = Canonical(dir);
  auto [d_end, p_at] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return d_end == d.end();
}

Status CheckNotInside(const std::string& output, std::string_view output_what,
                      const std::string& input, std::string_view input_what) {
  if (!IsPathInside(output, input)) return Status::Ok();
  const bool same = Canonical(output) == Canonical(input);
  return InvalidArgumentError(std::string(output_what) + " " + output +
                              (same ? " is " : " is inside ") + std::string(input_what) + " " +
                              input +
                              ", which it reads; a tierflow command never writes into its input: "
                              "name a path outside it");
}

}  // namespace tierflow
