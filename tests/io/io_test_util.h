// Helpers for the io tests: scratch directories, raw file bytes, hand-built
// safetensors files, and a FileSystem that fails writes on demand.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/file_system.h"
#include "tests/common/scratch_dir.h"

namespace tierflow::testing_io {

// A fresh directory under the test temp dir, removed with everything in it.
class ScratchDir : public testing_common::ScratchDir {
 public:
  ScratchDir() : testing_common::ScratchDir("tierflow_io_") {}
  // Names of the directory's entries, sorted.
  std::vector<std::string> List() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path())) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string ReadBytes(const std::string& path) {
  return testing_common::ReadWholeFile(path);
}

// An 8-byte little-endian length field.
inline std::string LengthField(uint64_t n) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s;
}

// A safetensors file from a header JSON text and `data_num_bytes` bytes of data.
inline std::string BuildFile(const std::string& header_json, size_t data_num_bytes) {
  std::string data(data_num_bytes, '\0');
  for (size_t i = 0; i < data_num_bytes; ++i) data[i] = static_cast<char>(i * 31 + 7);
  return LengthField(header_json.size()) + header_json + data;
}

// Wraps DefaultFileSystem and fails writes after a byte budget (with `error`,
// e.g. ENOSPC), or every rename, to test what a failed save leaves behind.
class FaultInjectingFileSystem final : public FileSystem {
 public:
  // Appends succeed until `fail_after_bytes` bytes were written in total.
  uint64_t fail_after_bytes = UINT64_MAX;
  int error = ENOSPC;
  bool fail_rename = false;
  uint64_t bytes_written = 0;

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    TF_ASSIGN_OR_RETURN(auto file, DefaultFileSystem()->NewWritableFile(path));
    return std::unique_ptr<WritableFile>(new File(this, std::move(file), path));
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (fail_rename) return ErrnoStatus(EIO, "rename " + from + " to " + to);
    return DefaultFileSystem()->RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override {
    return DefaultFileSystem()->RemoveFile(path);
  }
  Status SyncDirectory(const std::string& dir) override {
    return DefaultFileSystem()->SyncDirectory(dir);
  }

 private:
  class File final : public WritableFile {
   public:
    File(FaultInjectingFileSystem* fs, std::unique_ptr<WritableFile> base, std::string path)
        : fs_(fs), base_(std::move(base)), path_(std::move(path)) {}
    Status Append(const void* data, size_t num_bytes) override {
      uint64_t room = fs_->fail_after_bytes > fs_->bytes_written
                          ? fs_->fail_after_bytes - fs_->bytes_written
                          : 0;
      if (num_bytes <= room) {
        fs_->bytes_written += num_bytes;
        return base_->Append(data, num_bytes);
      }
      // Like a real full disk: part of the write lands, then the error.
      TF_RETURN_IF_ERROR(base_->Append(data, room));
      fs_->bytes_written += room;
      return ErrnoStatus(fs_->error, "write " + path_);
    }
    Status Sync() override { return base_->Sync(); }
    Status Close() override { return base_->Close(); }

   private:
    FaultInjectingFileSystem* fs_;
    std::unique_ptr<WritableFile> base_;
    std::string path_;
  };
};

}  // namespace tierflow::testing_io
