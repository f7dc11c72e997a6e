// ReadFileToString: open, size check, read loop, all errno paths named.
#include "io/file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tierflow {
namespace {

Status TooLarge(const std::string& path, size_t max_num_bytes) {
  return InvalidArgumentError(path + " is larger than " + std::to_string(max_num_bytes) +
                              " bytes, the most accepted for this file; is it the right file?");
}

}  // namespace

StatusOr<std::string> ReadFileToString(const std::string& path, size_t max_num_bytes,
                                       const ReadFileOptions& options) {
  const int flags = O_RDONLY | O_CLOEXEC | (options.no_follow ? O_NOFOLLOW : 0);
  int fd;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);

  std::string contents;
  Status s = [&]() -> Status {
    struct stat st;
    if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat " + path);
    if (S_ISDIR(st.st_mode)) {
      return InvalidArgumentError(path + " is a directory; a file was expected here");
    }
    // st_size is exact for a regular file: refuse before allocating. It is 0
    // for /proc files and pipes, which the loop below caps instead.
    if (S_ISREG(st.st_mode)) {
      const auto size = static_cast<uint64_t>(st.st_size);
      if (size > max_num_bytes) return TooLarge(path, max_num_bytes);
      contents.reserve(static_cast<size_t>(size));
    }
    char buf[1 << 16];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "read " + path + " at offset " + std::to_string(contents.size()));
      }
      if (n == 0) return Status();
      if (static_cast<size_t>(n) > max_num_bytes - contents.size()) {
        return TooLarge(path, max_num_bytes);
      }
      contents.append(buf, static_cast<size_t>(n));
    }
  }();
  ::close(fd);
  if (!s.ok()) return s;
  return contents;
}

}  // namespace tierflow
