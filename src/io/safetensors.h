// The safetensors file format: its dtypes, its header, and a validating parser.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON, then the tensor bytes:
//   {"__metadata__": {"k": "v", ...},
//    "<name>": {"dtype": "BF16", "shape": [768, 2304], "data_offsets": [begin, end]}, ...}
// with offsets relative to the first byte after the header. The parser here
// accepts exactly what the reference implementation (huggingface/safetensors)
// accepts: header length <= 100,000,000 bytes and within the file, a JSON
// object starting with '{' (trailing spaces allowed), every shape and offset a
// non-negative integer, shape product * dtype size == end - begin without
// overflow, and the tensors' byte ranges tiling the data region exactly, with
// no gap, no overlap and nothing after the last one. In addition it rejects
// duplicate keys, which JSON parsers otherwise resolve silently.
//
// Every error is a Status (DataLoss for a malformed file, Unimplemented for a
// dtype tierflow does not know) whose message names the file (the caller's
// `file_label`) and, where one is involved, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/dtype.h"
#include "tierflow/status.h"

namespace tierflow {

// The reference implementation's cap on the JSON header (100 MB, decimal).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// The dtype names safetensors files use. Every one of them can be parsed,
// listed and size-checked; only F32, F16 and BF16 map to a tierflow DType and
// can be read as floats or written.
struct SafetensorsDTypeInfo {
  std::string_view name;       // "F32", "BF16", "I64", ...
  uint32_t element_bytes;      // 1, 2, 4 or 8
  std::optional<DType> dtype;  // set for F32, F16, BF16
};

// Looks up a dtype name from a file header; nullopt if it is not one of
// BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 I16 U16 F16 BF16 I32 U32 F32 I64 U64 F64 C64.
std::optional<SafetensorsDTypeInfo> FindSafetensorsDType(std::string_view name);

// The name a tierflow DType is written with: "F32", "BF16" or "F16".
std::string_view SafetensorsDTypeName(DType dtype);

// One tensor as the header describes it.
struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype_name;      // as in the file, e.g. "BF16"
  uint32_t element_bytes = 0;  // size of one element of dtype_name
  std::optional<DType> dtype;  // set when tierflow can read it as floats (F32/F16/BF16)
  std::vector<int64_t> shape;  // [] for a scalar; entries are >= 0 and may be 0
  uint64_t num_elements = 0;   // product of shape (1 for a scalar)
  uint64_t begin_bytes = 0;    // [begin_bytes, end_bytes) within the data region
  uint64_t end_bytes = 0;

  uint64_t num_bytes() const { return end_bytes - begin_bytes; }
};

// A parsed, fully validated header.
struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty if absent
  std::vector<SafetensorsTensorInfo> tensors;   // in data order (ascending begin_bytes)
  uint64_t header_num_bytes = 0;                // N, the JSON's length including padding
  uint64_t data_num_bytes = 0;                  // the data region, = last tensor's end

  // Byte offset of the data region in the file.
  uint64_t data_offset_bytes() const { return 8 + header_num_bytes; }
  // The tensor called `name`, or nullptr. O(log n).
  const SafetensorsTensorInfo* Find(std::string_view name) const;

  // name -> position in `tensors`; filled by the parser, used by Find.
  std::map<std::string, size_t, std::less<>> index_by_name;
};

// Checks the 8-byte length field's value `header_num_bytes` against the
// format's cap and the size of the file.
Status CheckSafetensorsHeaderLength(uint64_t header_num_bytes, uint64_t file_num_bytes,
                                    std::string_view file_label);

// Parses and validates the JSON header `json` (the N bytes after the length
// field) of a file whose data region is `data_num_bytes` long.
StatusOr<SafetensorsHeader> ParseSafetensorsHeaderJson(std::string_view json,
                                                       uint64_t data_num_bytes,
                                                       std::string_view file_label);

// Parses and validates a whole safetensors file held in memory, without
// touching any file: the entry point for fuzzing. `file_bytes` is the entire
// file; the tensor data itself is not inspected beyond its length.
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_bytes,
                                                   std::string_view file_label = "<memory>");

// "[768, 2304]", for error messages.
std::string FormatShape(const std::vector<int64_t>& shape);

}  // namespace tierflow
