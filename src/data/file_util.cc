// MappedFile: the system-call boundary of the token-file reader.
#include "data/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace tierflow {
namespace {

StatusOr<int> OpenForReading(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = ErrnoStatus(errno, "stat " + path);
    ::close(fd);
    return s;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + " is a directory; a file was expected here");
  }
  return fd;
}

}  // namespace

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  TF_ASSIGN_OR_RETURN(int fd, OpenForReading(path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = ErrnoStatus(errno, "stat " + path);
    ::close(fd);
    return s;
  }
  const size_t num_bytes = static_cast<size_t>(st.st_size);
  const std::byte* data = nullptr;
  if (num_bytes > 0) {
    void* p = ::mmap(nullptr, num_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = ErrnoStatus(errno, "mmap " + path);
      ::close(fd);
      return s;
    }
    data = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, num_bytes));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), num_bytes_);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectoryPath(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace tierflow
