// SafetensorsReader: open + validate, then pread tensors into caller buffers.
#include "io/safetensors_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/half.h"

namespace tierflow {
namespace {

// Conversion goes through a bounded scratch buffer, so reading a 4 GB tensor
// as another dtype does not need another 4 GB.
constexpr size_t kConvertChunkElements = size_t{1} << 20;

std::string TensorWhere(const std::string& path, std::string_view name) {
  return "safetensors file " + path + ", tensor '" + std::string(name) + "'";
}

}  // namespace

StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoStatus(errno, "open safetensors file " + path);
  // Owns fd until the reader does.
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader(fd, path, {}));

  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "stat safetensors file " + path);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgumentError("safetensors file " + path + " is not a regular file");
  }
  const uint64_t file_num_bytes = static_cast<uint64_t>(st.st_size);
  if (file_num_bytes < 8) {
    return DataLossError("safetensors file " + path + ": file is " +
                         std::to_string(file_num_bytes) +
                         " bytes, shorter than the 8-byte header length field; the file is "
                         "truncated or corrupt: download or save it again");
  }
  uint64_t header_num_bytes;
  TF_RETURN_IF_ERROR(reader->PreadFully(&header_num_bytes, 8, 0, "header length"));
  TF_RETURN_IF_ERROR(CheckSafetensorsHeaderLength(header_num_bytes, file_num_bytes, path));
  std::string json(header_num_bytes, '\0');
  TF_RETURN_IF_ERROR(reader->PreadFully(json.data(), json.size(), 8, "header"));
  TF_ASSIGN_OR_RETURN(reader->header_, ParseSafetensorsHeaderJson(
                                           json, file_num_bytes - 8 - header_num_bytes, path));
  return reader;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status SafetensorsReader::PreadFully(void* dst, size_t num_bytes, uint64_t offset_bytes,
                                     std::string_view what) const {
  char* p = static_cast<char*>(dst);
  while (num_bytes > 0) {
    ssize_t n = ::pread(fd_, p, num_bytes, static_cast<off_t>(offset_bytes));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "read " + std::string(what) + " from safetensors file " + path_ +
                                    " at offset " + std::to_string(offset_bytes));
    }
    if (n == 0) {
      return DataLossError("safetensors file " + path_ + ": end of file at offset " +
                           std::to_string(offset_bytes) + " while reading " + std::string(what) +
                           "; the file was truncated (is another process writing it?)");
    }
    p += n;
    num_bytes -= static_cast<size_t>(n);
    offset_bytes += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status SafetensorsReader::ReadRaw(const SafetensorsTensorInfo& tensor, void* dst,
                                  size_t dst_num_bytes) const {
  if (dst_num_bytes != tensor.num_bytes()) {
    return InvalidArgumentError(
        TensorWhere(path_, tensor.name) + ": holds " + std::to_string(tensor.num_bytes()) +
        " bytes but the destination buffer has " + std::to_string(dst_num_bytes));
  }
  return PreadFully(dst, dst_num_bytes, header_.data_offset_bytes() + tensor.begin_bytes,
                    "tensor '" + tensor.name + "'");
}

Status SafetensorsReader::ReadRawRange(const SafetensorsTensorInfo& tensor, uint64_t byte_offset,
                                       void* dst, size_t num_bytes) const {
  if (byte_offset > tensor.num_bytes() || num_bytes > tensor.num_bytes() - byte_offset) {
    return InvalidArgumentError(TensorWhere(path_, tensor.name) + ": bytes [" +
                                std::to_string(byte_offset) + ", +" + std::to_string(num_bytes) +
                                ") are outside its " + std::to_string(tensor.num_bytes()));
  }
  return PreadFully(dst, num_bytes, header_.data_offset_bytes() + tensor.begin_bytes + byte_offset,
                    "tensor '" + tensor.name + "'");
}

Status SafetensorsReader::Read(const SafetensorsTensorInfo& tensor, DType to, void* dst,
                               size_t dst_num_bytes) const {
  if (!tensor.dtype) {
    return UnimplementedError(TensorWhere(path_, tensor.name) + ": dtype " + tensor.dtype_name +
                              " cannot be read as floating point; tierflow reads F32, F16 "
                              "and BF16 tensors");
  }
  const uint64_t want_num_bytes = tensor.num_elements * DTypeSize(to);
  if (dst_num_bytes != want_num_bytes) {
    return InvalidArgumentError(
        TensorWhere(path_, tensor.name) + ": " + std::to_string(tensor.num_elements) +
        " elements as " + std::string(DTypeName(to)) + " need " + std::to_string(want_num_bytes) +
        " bytes but the destination buffer has " + std::to_string(dst_num_bytes));
  }
  const DType from = *tensor.dtype;
  if (from == to) return ReadRaw(tensor, dst, dst_num_bytes);

  const size_t from_bytes = DTypeSize(from);
  const size_t to_bytes = DTypeSize(to);
  std::vector<char> scratch(std::min<uint64_t>(tensor.num_elements, kConvertChunkElements) *
                            from_bytes);
  char* out = static_cast<char*>(dst);
  uint64_t offset_bytes = header_.data_offset_bytes() + tensor.begin_bytes;
  for (uint64_t done = 0; done < tensor.num_elements;) {
    const size_t n = std::min<uint64_t>(tensor.num_elements - done, kConvertChunkElements);
    TF_RETURN_IF_ERROR(
        PreadFully(scratch.data(), n * from_bytes, offset_bytes, "tensor '" + tensor.name + "'"));
    ConvertBuffer(from, scratch.data(), to, out + done * to_bytes, n);
    offset_bytes += n * from_bytes;
    done += n;
  }
  return Status::Ok();
}

Status SafetensorsReader::Read(std::string_view name, DType to, void* dst,
                               size_t dst_num_bytes) const {
  const SafetensorsTensorInfo* tensor = Find(name);
  if (tensor == nullptr) {
    return NotFoundError(TensorWhere(path_, name) + ": no such tensor in the file");
  }
  return Read(*tensor, to, dst, dst_num_bytes);
}

}  // namespace tierflow
