// Read-only memory maps for token files, and the file-system queries the
// tokenizer loaders share.
//
// The data pipeline reads two kinds of files: text (tokenizer vocabularies,
// training text, JSONL), read whole through io/file_reader.h, and token
// files, which can be large and are memory-mapped here so only the pages a
// batch touches are read. errno becomes a Status here, once, naming the path.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "tierflow/status.h"

namespace tierflow {

// A read-only, private memory map of a whole file. Move-only; unmaps on
// destruction. An empty file has an empty span and no mapping. Thread-safe
// for concurrent reads of bytes().
// Whether `path` is (following links) a regular file / a directory. Any
// error (missing, no permission) reads as "no"; the caller's open names it.
bool IsRegularFile(const std::string& path);
bool IsDirectoryPath(const std::string& path);

class MappedFile {
 public:
  // Errors: ErrnoStatus naming the path (open, fstat, mmap).
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, num_bytes_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const std::byte* data, size_t num_bytes)
      : path_(std::move(path)), data_(data), num_bytes_(num_bytes) {}
  std::string path_;
  const std::byte* data_;
  size_t num_bytes_;
};

}  // namespace tierflow
