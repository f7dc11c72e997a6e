// Validating parser for safetensors headers; see safetensors.h for the rules it enforces.
#include "io/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "io/json_util.h"

namespace tierflow {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; tierflow reads it in place");

using Json = nlohmann::json;

constexpr std::array<SafetensorsDTypeInfo, 17> kDTypes = {{
    {"BOOL", 1, std::nullopt},
    {"U8", 1, std::nullopt},
    {"I8", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt},
    {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},
    {"F16", 2, DType::kF16},
    {"BF16", 2, DType::kBF16},
    {"I32", 4, std::nullopt},
    {"U32", 4, std::nullopt},
    {"F32", 4, DType::kF32},
    {"I64", 8, std::nullopt},
    {"U64", 8, std::nullopt},
    {"F64", 8, std::nullopt},
    {"C64", 8, std::nullopt},
}};

std::string FileContext(std::string_view file_label) {
  return "safetensors file " + std::string(file_label);
}

std::string TensorContext(std::string_view file_label, std::string_view tensor) {
  return FileContext(file_label) + ", tensor '" + std::string(tensor) + "'";
}

Status Corrupt(std::string what) {
  return DataLossError(std::move(what) +
                       "; the file is truncated or corrupt: download or save it again");
}

// A JSON value that must be a non-negative integer (shape entry or offset).
bool AsUnsigned(const Json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

Status ParseTensorEntry(const std::string& name, const Json& entry, std::string_view file_label,
                        uint64_t data_num_bytes, SafetensorsTensorInfo* info) {
  const std::string where = TensorContext(file_label, name);
  if (!entry.is_object()) return Corrupt(where + ": header entry is not a JSON object");
  info->name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return Corrupt(where + ": missing or non-string \"dtype\"");
  }
  info->dtype_name = dtype_it->get<std::string>();
  std::optional<SafetensorsDTypeInfo> dtype = FindSafetensorsDType(info->dtype_name);
  if (!dtype) {
    return UnimplementedError(where + ": unknown dtype '" + info->dtype_name +
                              "'; tierflow knows BOOL, U8, I8, F8_*, I16, U16, F16, BF16, I32, "
                              "U32, F32, I64, U64, F64, C64");
  }
  info->element_bytes = dtype->element_bytes;
  info->dtype = dtype->dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return Corrupt(where + ": missing or non-array \"shape\"");
  }
  info->shape.clear();
  info->num_elements = 1;
  for (const Json& dim : *shape_it) {
    uint64_t d;
    if (!AsUnsigned(dim, &d)) {
      return Corrupt(where + ": shape entry " + JsonExcerpt(dim) +
                     " is not a non-negative integer");
    }
    if (d > static_cast<uint64_t>(INT64_MAX)) {
      return Corrupt(where + ": shape entry " + JsonExcerpt(dim) + " is larger than 2^63 - 1");
    }
    info->shape.push_back(static_cast<int64_t>(d));
    if (__builtin_mul_overflow(info->num_elements, d, &info->num_elements)) {
      return Corrupt(where + ": shape " + JsonExcerpt(*shape_it) + " overflows 64 bits");
    }
  }
  uint64_t expected_num_bytes;
  if (__builtin_mul_overflow(info->num_elements, uint64_t{info->element_bytes},
                             &expected_num_bytes)) {
    return Corrupt(where + ": shape " + JsonExcerpt(*shape_it) + " times " +
                   std::to_string(info->element_bytes) + " bytes overflows 64 bits");
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !AsUnsigned((*offsets_it)[0], &info->begin_bytes) ||
      !AsUnsigned((*offsets_it)[1], &info->end_bytes)) {
    return Corrupt(where + ": \"data_offsets\" must be [begin, end] with non-negative integers");
  }
  const std::string offsets =
      "[" + std::to_string(info->begin_bytes) + "," + std::to_string(info->end_bytes) + "]";
  if (info->end_bytes < info->begin_bytes) {
    return Corrupt(where + ": data_offsets " + offsets + " end before they begin");
  }
  if (info->end_bytes > data_num_bytes) {
    return Corrupt(where + ": data_offsets " + offsets + " extend past the data " +
                   "region, which is " + std::to_string(data_num_bytes) + " bytes");
  }
  if (info->num_bytes() != expected_num_bytes) {
    return Corrupt(where + ": dtype " + info->dtype_name + " and shape " +
                   FormatShape(info->shape) + " need " + std::to_string(expected_num_bytes) +
                   " bytes but data_offsets " + offsets + " span " +
                   std::to_string(info->num_bytes()));
  }
  return Status::Ok();
}

}  // namespace

std::optional<SafetensorsDTypeInfo> FindSafetensorsDType(std::string_view name) {
  for (const SafetensorsDTypeInfo& d : kDTypes) {
    if (d.name == name) return d;
  }
  return std::nullopt;
}

std::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
  }
  return "?";
}

std::string FormatShape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const SafetensorsTensorInfo* SafetensorsHeader::Find(std::string_view name) const {
  auto it = index_by_name.find(name);
  return it == index_by_name.end() ? nullptr : &tensors[it->second];
}

Status CheckSafetensorsHeaderLength(uint64_t header_num_bytes, uint64_t file_num_bytes,
                                    std::string_view file_label) {
  if (header_num_bytes > kSafetensorsMaxHeaderBytes) {
    return Corrupt(FileContext(file_label) + ": header length field says " +
                   std::to_string(header_num_bytes) + " bytes, more than the format's limit of " +
                   std::to_string(kSafetensorsMaxHeaderBytes) +
                   " (is this a safetensors file at all?)");
  }
  if (file_num_bytes < 8 || header_num_bytes > file_num_bytes - 8) {
    return Corrupt(FileContext(file_label) + ": header length field says " +
                   std::to_string(header_num_bytes) + " bytes but the file is only " +
                   std::to_string(file_num_bytes) + " bytes");
  }
  if (header_num_bytes < 2) {
    return Corrupt(FileContext(file_label) + ": header is " + std::to_string(header_num_bytes) +
                   " bytes, too short to be a JSON object");
  }
  return Status::Ok();
}

StatusOr<SafetensorsHeader> ParseSafetensorsHeaderJson(std::string_view json,
                                                       uint64_t data_num_bytes,
                                                       std::string_view file_label) {
  const std::string where = FileContext(file_label);
  if (json.empty() || json.front() != '{') {
    return Corrupt(where + ": header does not start with '{'");
  }
  Json root;
  Status parsed = ParseJsonStrict(json, where + ": header", &root);
  if (!parsed.ok()) {
    return Corrupt(parsed.message());
  }
  if (!root.is_object()) return Corrupt(where + ": header is not a JSON object");

  SafetensorsHeader header;
  header.header_num_bytes = json.size();
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return Corrupt(where + ": \"__metadata__\" is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return Corrupt(where + ": \"__metadata__\" value of \"" + m.key() + "\" is not a string");
        }
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    SafetensorsTensorInfo info;
    TF_RETURN_IF_ERROR(ParseTensorEntry(it.key(), it.value(), file_label, data_num_bytes, &info));
    header.tensors.push_back(std::move(info));
  }

  // The byte ranges must tile [0, data_num_bytes): sort by (begin, end) so
  // zero-byte tensors sit before a non-empty one starting at the same offset.
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
              if (a.begin_bytes != b.begin_bytes) return a.begin_bytes < b.begin_bytes;
              if (a.end_bytes != b.end_bytes) return a.end_bytes < b.end_bytes;
              return a.name < b.name;
            });
  uint64_t covered_bytes = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo& t : header.tensors) {
    if (t.begin_bytes < covered_bytes) {
      return Corrupt(TensorContext(file_label, t.name) + ": bytes [" +
                     std::to_string(t.begin_bytes) + ", " + std::to_string(t.end_bytes) +
                     ") overlap tensor '" + previous->name + "', which ends at " +
                     std::to_string(covered_bytes));
    }
    if (t.begin_bytes > covered_bytes) {
      return Corrupt(TensorContext(file_label, t.name) + ": starts at data offset " +
                     std::to_string(t.begin_bytes) + ", leaving a gap of " +
                     std::to_string(t.begin_bytes - covered_bytes) + " bytes after " +
                     (previous ? "tensor '" + previous->name + "'" : "the header"));
    }
    covered_bytes = t.end_bytes;
    previous = &t;
  }
  if (covered_bytes != data_num_bytes) {
    return Corrupt(where + ": the tensors cover " + std::to_string(covered_bytes) +
                   " data bytes but the file holds " + std::to_string(data_num_bytes) +
                   " after the header");
  }
  header.data_num_bytes = data_num_bytes;
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    header.index_by_name.emplace(header.tensors[i].name, i);
  }
  return header;
}

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_bytes,
                                                   std::string_view file_label) {
  if (file_bytes.size() < 8) {
    return Corrupt(FileContext(file_label) + ": file is " + std::to_string(file_bytes.size()) +
                   " bytes, shorter than the 8-byte header length field");
  }
  uint64_t header_num_bytes;
  std::memcpy(&header_num_bytes, file_bytes.data(), 8);
  TF_RETURN_IF_ERROR(CheckSafetensorsHeaderLength(header_num_bytes, file_bytes.size(), file_label));
  return ParseSafetensorsHeaderJson(file_bytes.substr(8, header_num_bytes),
                                    file_bytes.size() - 8 - header_num_bytes, file_label);
}

}  // namespace tierflow
