// Reads tensors out of one safetensors file, validated before anything is handed out.
//
// Open() reads and fully validates the header (see safetensors.h) against the
// file's size; after that every tensor's byte range is known to lie inside
// the file. Tensor bytes are read with pread(2) on demand, straight into the
// caller's buffer, converting between F32/F16/BF16 when asked. pread rather
// than mmap: a file truncated after Open gives a DataLoss Status, not SIGBUS.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "io/safetensors.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

class SafetensorsReader {
 public:
  // Opens and validates `path`. Errors: NotFound (no such file), DataLoss
  // (malformed header or a size that disagrees with it), Unimplemented (a
  // dtype tierflow does not know), other ErrnoStatus codes for I/O failures;
  // every message names `path` and, where one is involved, the tensor.
  static StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path);

  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  // The tensor called `name`, or nullptr.
  const SafetensorsTensorInfo* Find(std::string_view name) const { return header_.Find(name); }

  // Copies the tensor's bytes as stored (any dtype) into `dst`.
  // REQUIRES: `tensor` comes from this reader's header().
  // Errors: InvalidArgument if dst_num_bytes != tensor.num_bytes(); DataLoss
  // if the file became shorter since Open; I/O errors as ErrnoStatus.
  // Thread-safe: concurrent reads of any tensors are fine.
  Status ReadRaw(const SafetensorsTensorInfo& tensor, void* dst, size_t dst_num_bytes) const;
  // Bytes [byte_offset, byte_offset + num_bytes) of the tensor as stored.
  // Errors: InvalidArgument for a range outside the tensor; as ReadRaw.
  Status ReadRawRange(const SafetensorsTensorInfo& tensor, uint64_t byte_offset, void* dst,
                      size_t num_bytes) const;

  // Reads the tensor converted to `to` (bit-exact when it is the stored dtype;
  // round-to-nearest-even when narrowing). `dst` holds
  // tensor.num_elements * DTypeSize(to) bytes.
  // Errors: as ReadRaw, plus Unimplemented if the stored dtype is not F32, F16
  // or BF16. Thread-safe.
  Status Read(const SafetensorsTensorInfo& tensor, DType to, void* dst, size_t dst_num_bytes) const;

  // Read() by name; NotFound naming the file and the tensor if it is absent.
  Status Read(std::string_view name, DType to, void* dst, size_t dst_num_bytes) const;

 private:
  SafetensorsReader(int fd, std::string path, SafetensorsHeader header)
      : fd_(fd), path_(std::move(path)), header_(std::move(header)) {}

  // pread exactly num_bytes at file offset `offset_bytes`.
  Status PreadFully(void* dst, size_t num_bytes, uint64_t offset_bytes,
                    std::string_view what) const;

  int fd_;
  std::string path_;
  SafetensorsHeader header_;
};

}  // namespace tierflow
