// LineReader: a text file's lines one at a time, each checked against a byte
// bound before the caller sees it: how JSONL datasets are streamed instead of
// read whole.
//
// Memory is bounded by the longest accepted line plus one read buffer,
// whatever the file's size; a longer line is refused by its number and size
// before any of it reaches a parser. Lines end at '\n' (a '\r' before it is
// kept, as JSON parsers take it for whitespace); a last line without a '\n'
// is a line; a trailing '\n' does not start another. Blank lines are
// returned (and counted) like any other. The same reader runs over text
// already in memory (OverText), which it does not copy.
//
// errno becomes a Status here, once, naming the path. Move-only; not
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

struct LineReaderOptions {
  // The longest line accepted, in bytes (without its '\n'). REQUIRED > 0.
  size_t max_line_bytes = 0;
  // What the refusal of a longer line tells the user to do (e.g. which flag
  // raises the bound). Default: "" (nothing said).
  std::string advice;
};

class LineReader {
 public:
  // Errors: ErrnoStatus naming the path (open, fstat); InvalidArgument when
  // it is a directory or when options.max_line_bytes is 0.
  static StatusOr<LineReader> Open(const std::string& path, const LineReaderOptions& options);
  // Over `text`, which must outlive the reader; `name` names it in errors.
  static StatusOr<LineReader> OverText(std::string_view text, std::string name,
                                       const LineReaderOptions& options);

  LineReader(LineReader&& other) noexcept;
  LineReader& operator=(LineReader&& other) noexcept;
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader();

  // The next line (without its '\n') in *line, valid until the next call;
  // false at the end of the file. Errors: ErrnoStatus naming the path and
  // offset for a failed read; InvalidArgument "NAME:LINE is N bytes long,
  // more than the M accepted per line; ADVICE" for a line over the bound
  // (N is its whole length, the rest of it read but not kept; "at least N"
  // for a line still going 256 MiB or the bound past its start, so an
  // endless one such as /dev/zero is refused at once).
  StatusOr<bool> Next(std::string_view* line);

  // The number (from 1) of the line Next last returned.
  int64_t line_number() const { return line_number_; }
  const std::string& name() const { return name_; }

 private:
  LineReader() = default;
  // Appends up to one read's worth of the file to buffer_; false at its end.
  StatusOr<bool> Fill();
  // Reads past the rest of an over-long line whose first `seen` bytes are
  // buffered, then returns its refusal.
  Status RefuseLongLine(size_t seen);

  std::string name_;
  LineReaderOptions options_;
  int fd_ = -1;              // -1: over text_
  std::string_view text_;    // OverText: the whole text
  std::string buffer_;       // Open: bytes read and not yet returned start at begin_
  size_t begin_ = 0;         // start of the next line in buffer_ (or text_)
  uint64_t read_bytes_ = 0;  // bytes of the file read so far
  bool at_end_ = false;      // the file has no more bytes to read
  int64_t line_number_ = 0;
};

}  // namespace tierflow
