// Safetensors writer: deterministic, aligned header, then the tensors, via a temp file + rename.
#include "io/safetensors_writer.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace tierflow {

StatusOr<uint64_t> SafetensorsEntryBytes(const SafetensorsEntry& entry) {
  uint64_t num_bytes = DTypeSize(entry.dtype);
  for (int64_t d : entry.shape) {
    if (d < 0) {
      return InvalidArgumentError("tensor '" + entry.name + "': shape " + FormatShape(entry.shape) +
                                  " has a negative dimension");
    }
    if (__builtin_mul_overflow(num_bytes, static_cast<uint64_t>(d), &num_bytes)) {
      return InvalidArgumentError("tensor '" + entry.name + "': shape " + FormatShape(entry.shape) +
                                  " overflows 64 bits");
    }
  }
  return num_bytes;
}

StatusOr<SafetensorsLayout> PlanSafetensorsLayout(
    std::span<const SafetensorsEntry> entries, const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> entry_bytes(entries.size());
  std::set<std::string_view> names;
  for (size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& e = entries[i];
    if (e.name.empty() || e.name == "__metadata__") {
      return InvalidArgumentError("cannot write a tensor named '" + e.name +
                                  "' to a safetensors file");
    }
    if (!names.insert(e.name).second) {
      return InvalidArgumentError("tensor '" + e.name + "' is listed twice");
    }
    TF_ASSIGN_OR_RETURN(entry_bytes[i], SafetensorsEntryBytes(e));
    if (entry_bytes[i] > 0 && e.data == nullptr && !e.fill) {
      return InvalidArgumentError("tensor '" + e.name + "' has " + std::to_string(entry_bytes[i]) +
                                  " bytes but no data pointer or fill");
    }
  }

  SafetensorsLayout layout;
  layout.data_order.resize(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) layout.data_order[i] = i;
  std::sort(layout.data_order.begin(), layout.data_order.end(), [&](size_t a, size_t b) {
    size_t sa = DTypeSize(entries[a].dtype), sb = DTypeSize(entries[b].dtype);
    if (sa != sb) return sa > sb;
    return entries[a].name < entries[b].name;
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset_bytes = 0;
  for (size_t i : layout.data_order) {
    const SafetensorsEntry& e = entries[i];
    uint64_t end_bytes;
    if (__builtin_add_overflow(offset_bytes, entry_bytes[i], &end_bytes)) {
      return InvalidArgumentError("tensors add up to more than 2^64 bytes");
    }
    header[e.name] = {{"dtype", std::string(SafetensorsDTypeName(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset_bytes, end_bytes}}};
    offset_bytes = end_bytes;
  }
  layout.data_num_bytes = offset_bytes;

  std::string json = header.dump();  // keys come out sorted: deterministic bytes
  const size_t padded = (8 + json.size() + 7) / 8 * 8 - 8;
  json.resize(padded, ' ');
  const uint64_t header_num_bytes = json.size();
  layout.header_bytes.resize(8);
  std::memcpy(layout.header_bytes.data(), &header_num_bytes, 8);
  layout.header_bytes += json;
  return layout;
}

Status WriteSafetensors(const std::string& path, std::span<const SafetensorsEntry> entries,
                        const std::map<std::string, std::string>& metadata, FileSystem* fs) {
  StatusOr<SafetensorsLayout> layout = PlanSafetensorsLayout(entries, metadata);
  if (!layout.ok()) return layout.status().WithContext("writing safetensors file " + path);
  // One buffer for every streamed tensor: the largest piece asked for.
  uint64_t chunk = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.data != nullptr || !e.fill) continue;
    TF_ASSIGN_OR_RETURN(uint64_t num_bytes, SafetensorsEntryBytes(e));
    const uint64_t element = DTypeSize(e.dtype);
    chunk = std::max(chunk, std::min(num_bytes, kSafetensorsFillChunkBytes / element * element));
  }
  std::vector<char> buffer(chunk);
  return WriteFileAtomically(fs, path, [&](WritableFile& file) -> Status {
    TF_RETURN_IF_ERROR(file.Append(layout->header_bytes.data(), layout->header_bytes.size()));
    for (size_t i : layout->data_order) {
      const SafetensorsEntry& e = entries[i];
      TF_ASSIGN_OR_RETURN(uint64_t num_bytes, SafetensorsEntryBytes(e));
      if (num_bytes == 0) continue;
      if (e.data != nullptr) {
        TF_RETURN_IF_ERROR(file.Append(e.data, num_bytes));
        continue;
      }
      const uint64_t element = DTypeSize(e.dtype);
      const uint64_t piece = kSafetensorsFillChunkBytes / element * element;
      for (uint64_t at = 0; at < num_bytes; at += piece) {
        const uint64_t n = std::min(piece, num_bytes - at);
        TF_RETURN_IF_ERROR(e.fill(at, n, buffer.data()).WithContext("tensor '" + e.name + "'"));
        TF_RETURN_IF_ERROR(file.Append(buffer.data(), n));
      }
    }
    return Status::Ok();
  });
}

}  // namespace tierflow
