// LineReader: buffered reads, the per-line bound, the refusal's length count.
#include "io/line_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tierflow {
namespace {

// One read(2) at a time: large enough that a line of typical JSONL costs
// one memchr, small beside any line bound worth setting.
constexpr size_t kReadBytes = size_t{1} << 20;
// A refused line's length is counted up to here (or its bound, if higher),
// so an endless one (/dev/zero) is refused as promptly as a long one.
constexpr uint64_t kCountedLineBytes = uint64_t{256} << 20;

}  // namespace

StatusOr<LineReader> LineReader::Open(const std::string& path, const LineReaderOptions& options) {
  if (options.max_line_bytes == 0) {
    return InvalidArgumentError("reading " + path +
                                " line by line: the line bound must be positive");
  }
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  LineReader r;
  r.fd_ = fd;  // closed by r from here on
  r.name_ = path;
  r.options_ = options;
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat " + path);
  if (S_ISDIR(st.st_mode)) {
    return InvalidArgumentError(path + " is a directory; a file was expected here");
  }
  return r;
}

StatusOr<LineReader> LineReader::OverText(std::string_view text, std::string name,
                                          const LineReaderOptions& options) {
  if (options.max_line_bytes == 0) {
    return InvalidArgumentError("reading " + name +
                                " line by line: the line bound must be positive");
  }
  LineReader r;
  r.name_ = std::move(name);
  r.options_ = options;
  r.text_ = text;
  r.at_end_ = true;
  return r;
}

LineReader::LineReader(LineReader&& other) noexcept { *this = std::move(other); }

LineReader& LineReader::operator=(LineReader&& other) noexcept {
  if (this == &other) return *this;
  if (fd_ >= 0) ::close(fd_);
  name_ = std::move(other.name_);
  options_ = std::move(other.options_);
  fd_ = other.fd_;
  other.fd_ = -1;
  text_ = other.text_;
  buffer_ = std::move(other.buffer_);
  begin_ = other.begin_;
  read_bytes_ = other.read_bytes_;
  at_end_ = other.at_end_;
  line_number_ = other.line_number_;
  return *this;
}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<bool> LineReader::Fill() {
  if (at_end_) return false;
  const size_t old_size = buffer_.size();
  buffer_.resize(old_size + kReadBytes);
  while (true) {
    const ssize_t n = ::read(fd_, buffer_.data() + old_size, kReadBytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int read_errno = errno;
      buffer_.resize(old_size);
      return ErrnoStatus(read_errno, "read " + name_ + " at offset " + std::to_string(read_bytes_));
    }
    buffer_.resize(old_size + static_cast<size_t>(n));
    read_bytes_ += static_cast<uint64_t>(n);
    if (n == 0) at_end_ = true;
    return n > 0;
  }
}

Status LineReader::RefuseLongLine(size_t seen) {
  // Count the rest of the line without keeping it, so the user is told its
  // real length while memory stays at one read; past the count's cap, the
  // length so far.
  const uint64_t cap = std::max<uint64_t>(kCountedLineBytes, options_.max_line_bytes + 1);
  uint64_t length = seen;
  bool ended = false;
  if (fd_ >= 0) {
    size_t scanned = begin_ + seen;
    while (length < cap) {
      const size_t nl = buffer_.find('\n', scanned);
      if (nl != std::string::npos) {
        length += static_cast<uint64_t>(nl - scanned);
        ended = true;
        break;
      }
      length += buffer_.size() - scanned;
      buffer_.clear();
      begin_ = scanned = 0;
      TF_ASSIGN_OR_RETURN(bool more, Fill());
      if (!more) {
        ended = true;
        break;
      }
    }
  } else {
    const size_t nl = text_.find('\n', begin_ + seen);
    length = (nl == std::string_view::npos ? text_.size() : nl) - begin_;
    ended = true;
  }
  std::string message = name_ + ":" + std::to_string(line_number_) + " is " +
                        (ended ? "" : "at least ") + std::to_string(length) +
                        " bytes long, more than the " + std::to_string(options_.max_line_bytes) +
                        " accepted per line";
  if (!options_.advice.empty()) message += "; " + options_.advice;
  return InvalidArgumentError(std::move(message));
}

StatusOr<bool> LineReader::Next(std::string_view* line) {
  const size_t max = options_.max_line_bytes;
  if (fd_ < 0) {  // over text
    if (begin_ >= text_.size()) return false;
    ++line_number_;
    const size_t nl = text_.find('\n', begin_);
    const size_t end = nl == std::string_view::npos ? text_.size() : nl;
    if (end - begin_ > max) return RefuseLongLine(max + 1);
    *line = text_.substr(begin_, end - begin_);
    begin_ = end + 1;
    return true;
  }
  size_t scanned = begin_;  // no '\n' in buffer_[begin_, scanned)
  while (true) {
    const size_t nl = buffer_.find('\n', scanned);
    const size_t end = nl != std::string::npos ? nl : buffer_.size();
    if (end - begin_ > max) {
      ++line_number_;
      return RefuseLongLine(end - begin_);
    }
    if (nl != std::string::npos) {
      ++line_number_;
      *line = std::string_view(buffer_).substr(begin_, end - begin_);
      begin_ = end + 1;
      return true;
    }
    // No line end buffered: drop what was returned, then read more.
    buffer_.erase(0, begin_);
    scanned = buffer_.size();
    begin_ = 0;
    TF_ASSIGN_OR_RETURN(bool more, Fill());
    if (!more) {
      if (buffer_.empty()) return false;
      ++line_number_;
      *line = buffer_;
      begin_ = buffer_.size();
      return true;
    }
  }
}

}  // namespace tierflow
