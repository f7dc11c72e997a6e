// Whole-file reading and read-only memory maps for dataset and tokenizer files.
//
// The data pipeline reads two kinds of files: text (tokenizer vocabularies,
// training text, JSONL), read fully into memory, and token files, which can be
// large and are memory-mapped so only the pages a batch touches are read.
// errno becomes a Status here, once, naming the path.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "tierflow/status.h"

namespace tierflow {

// Reads the whole file. Errors: ErrnoStatus naming the path (NotFound when
// it does not exist, InvalidArgument for a directory).
StatusOr<std::string> ReadWholeFile(const std::string& path);

// A read-only, private memory map of a whole file. Move-only; unmaps on
// destruction. An empty file has an empty span and no mapping. Thread-safe
// for concurrent reads of bytes().
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
