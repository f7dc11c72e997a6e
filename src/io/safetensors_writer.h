// Writes one safetensors file, crash-safely, from caller-owned tensor buffers.
//
// The output is what the reference implementation writes and accepts: the
// header's keys in sorted order (deterministic bytes for the same input),
// padded with spaces so the data region starts 8-byte aligned, tensors laid
// out largest element size first and by name within a size, so every tensor
// starts aligned to its element size (zero-copy readers can use it in place).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "io/file_system.h"
#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// Writes `num_bytes` of a tensor's data, starting `byte_offset` bytes into
// it, to `out` (a whole number of elements: both are multiples of the
// element size).
using SafetensorsFill = std::function<Status(uint64_t byte_offset, uint64_t num_bytes, void* out)>;

// The largest piece WriteSafetensors asks a `fill` for at once: the one
// buffer it holds while streaming (the planner counts it).
inline constexpr uint64_t kSafetensorsFillChunkBytes = 32ull << 20;
// fp32 values a fill that converts (fp32 master weights to a 16-bit file)
// holds at a time: its scratch.
inline constexpr uint64_t kSafetensorsConvertElements = uint64_t{1} << 20;

// One tensor to write. Its bytes are borrowed (`data` must hold
// product(shape) * DTypeSize(dtype) bytes and stay valid during the write)
// or streamed (`fill`, when `data` is null: called in order over the tensor
// in pieces of at most kSafetensorsFillChunkBytes, so a tensor never has to
// exist in memory whole).
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // [] for a scalar; entries >= 0
  const void* data = nullptr;  // null only when the tensor has no elements or `fill` is set
  SafetensorsFill fill = nullptr;
};

// Bytes the data region of `entry` takes; InvalidArgument on a negative
// dimension or overflow.
StatusOr<uint64_t> SafetensorsEntryBytes(const SafetensorsEntry& entry);

// The header (length field + padded JSON) WriteSafetensors would write, and
// each entry's data offset in it: exposed so the sharding code can size files.
struct SafetensorsLayout {
  std::string header_bytes;        // 8-byte length + JSON + padding
  std::vector<size_t> data_order;  // indexes into the entries, in file order
  uint64_t data_num_bytes = 0;
};
StatusOr<SafetensorsLayout> PlanSafetensorsLayout(
    std::span<const SafetensorsEntry> entries, const std::map<std::string, std::string>& metadata);

// Writes `entries` and `metadata` (the "__metadata__" map; may be empty) to
// `path` via WriteFileAtomically: on failure `path` keeps its old contents.
// Errors: InvalidArgument (empty or duplicate names, the name "__metadata__",
// a null data pointer, a size overflow), I/O errors naming the path.
// `fs` may be null (DefaultFileSystem).
Status WriteSafetensors(const std::string& path, std::span<const SafetensorsEntry> entries,
                        const std::map<std::string, std::string>& metadata,
                        FileSystem* fs = nullptr);

}  // namespace tierflow
