// Describing and checking a checkpoint's files (checkpoint_files.h).
#include "checkpoint/checkpoint_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "io/file_reader.h"
#include "io/json_util.h"
#include "io/safetensors_reader.h"
#include "offload/crc32c.h"

namespace tierflow {
namespace {

// Size and CRC32C of a file, read in pieces of kFileChecksumBufferBytes (at
// most the file: the planner counts min(file, buffer)).
StatusOr<std::pair<uint64_t, uint32_t>> FileChecksum(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoStatus(errno, "open " + path);
  struct stat st {};
  const uint64_t size = ::fstat(::fileno(f), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  std::vector<char> buf(std::clamp<uint64_t>(size, 1, kFileChecksumBufferBytes));
  uint64_t total = 0;
  uint32_t crc = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = offload::Crc32c(crc, buf.data(), n);
    total += n;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return IoError("read " + path + " failed");
  return std::make_pair(total, crc);
}

// CRC32C of bytes [begin, end) of a file.
StatusOr<uint32_t> RangeChecksum(const std::string& path, uint64_t begin, uint64_t end) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return ErrnoStatus(errno, "open " + path);
  std::vector<char> buf(std::clamp<uint64_t>(end - begin, 1, kFileChecksumBufferBytes));
  uint32_t crc = 0;
  bool failed = std::fseek(f, static_cast<long>(begin), SEEK_SET) != 0;
  uint64_t left = end - begin;
  while (!failed && left > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    const size_t n = std::fread(buf.data(), 1, want, f);
    if (n != want) failed = true;
    crc = offload::Crc32c(crc, buf.data(), n);
    left -= n;
  }
  std::fclose(f);
  if (failed)
    return IoError("read " + path + " bytes [" + std::to_string(begin) + ", " +
                   std::to_string(end) + ") failed");
  return crc;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

StatusOr<std::vector<PathComponent>> SplitInsidePath(const std::string& rel,
                                                     std::string_view what) {
  std::vector<PathComponent> out;
  size_t begin = 0;
  while (true) {
    const size_t end = rel.find('/', begin);
    const std::string_view part = std::string_view(rel).substr(
        begin, end == std::string::npos ? std::string::npos : end - begin);
    TF_ASSIGN_OR_RETURN(PathComponent c, PathComponent::Parse(part, what));
    out.push_back(std::move(c));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

StatusOr<uint64_t> RegularFileSizeInside(const std::string& dir,
                                         const std::vector<PathComponent>& rel) {
  std::string path = dir;
  for (size_t i = 0; i < rel.size(); ++i) {
    path += "/" + rel[i].str();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat " + path);
    if (S_ISLNK(st.st_mode)) {
      return DataLossError(path +
                           " is a symbolic link; tierflow does not follow links out of a "
                           "checkpoint (replace it with the file it points to)");
    }
    const bool last = i + 1 == rel.size();
    if (last && !S_ISREG(st.st_mode)) return DataLossError(path + " is not a regular file");
    if (!last && !S_ISDIR(st.st_mode)) return DataLossError(path + " is not a directory");
    if (last) return static_cast<uint64_t>(st.st_size);
  }
  return InvalidArgumentError("empty path under " + dir);
}

StatusOr<nlohmann::json> DescribeCheckpointFile(const std::string& dir, const std::string& rel) {
  const std::string path = dir + "/" + rel;
  TF_ASSIGN_OR_RETURN(auto sum, FileChecksum(path));
  nlohmann::json entry = {{"path", rel}, {"bytes", sum.first}, {"crc32c", sum.second}};
  if (EndsWith(rel, ".safetensors")) {
    TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(path));
    const SafetensorsHeader& h = reader->header();
    nlohmann::json ranges = nlohmann::json::array();
    TF_ASSIGN_OR_RETURN(uint32_t header_crc, RangeChecksum(path, 0, h.data_offset_bytes()));
    ranges.push_back({{"name", "(header)"},
                      {"begin", 0},
                      {"end", h.data_offset_bytes()},
                      {"crc32c", header_crc}});
    for (const SafetensorsTensorInfo& t : h.tensors) {
      const uint64_t begin = h.data_offset_bytes() + t.begin_bytes,
                     end = h.data_offset_bytes() + t.end_bytes;
      TF_ASSIGN_OR_RETURN(uint32_t crc, RangeChecksum(path, begin, end));
      ranges.push_back({{"name", t.name}, {"begin", begin}, {"end", end}, {"crc32c", crc}});
    }
    entry["tensors"] = std::move(ranges);
  }
  return entry;
}

std::string CheckCheckpointFile(const std::string& dir, const nlohmann::json& f, StatusCode* code) {
  // Unless an errno below says otherwise, a problem is the checkpoint's own.
  if (code != nullptr) *code = StatusCode::kDataLoss;
  const std::string where = dir + "/trainer_state.json: files entry";
  std::string rel;
  uint64_t want_bytes = 0, want_crc = 0;
  Status typed = GetJsonString(f, "path", where, &rel);
  if (typed.ok()) typed = GetJsonUint64(f, "bytes", where, &want_bytes);
  if (typed.ok()) typed = GetJsonUint64(f, "crc32c", where, &want_crc);
  if (!typed.ok()) return typed.message();
  // Listed files live inside the checkpoint: a path that climbs out (or is
  // absolute, or passes through a symlink) would make verification read, and
  // trust, files elsewhere.
  auto parts = SplitInsidePath(rel, "path component");
  if (!parts.ok()) {
    return where + " " + QuotedExcerpt(rel) + " is not a path inside the checkpoint (" +
           parts.status().message() + ")";
  }
  auto size = RegularFileSizeInside(dir, *parts);
  if (!size.ok()) {
    if (code != nullptr) *code = size.status().code();
    return size.status().message();
  }
  const std::string path = dir + "/" + rel;
  auto sum = FileChecksum(path);
  if (!sum.ok()) {
    if (code != nullptr) *code = sum.status().code();
    return sum.status().message();
  }
  if (sum->first != want_bytes) {
    return path + ": " + std::to_string(sum->first) + " bytes, expected " +
           std::to_string(want_bytes) + " (truncated or replaced)";
  }
  if (sum->second == want_crc) return "";
  std::string changed;
  const nlohmann::json* tensors = nullptr;
  (void)GetJsonArray(f, "tensors", where, &tensors, JsonField::kOptional);
  if (tensors != nullptr) {
    for (const auto& t : *tensors) {
      uint64_t begin = 0, end = 0, crc = 0;
      std::string name;
      if (!GetJsonUint64(t, "begin", where, &begin).ok() ||
          !GetJsonUint64(t, "end", where, &end).ok() ||
          !GetJsonUint64(t, "crc32c", where, &crc).ok() ||
          !GetJsonString(t, "name", where, &name, JsonField::kOptional).ok()) {
        continue;  // the file's own CRC32C already failed; this only says where
      }
      if (end < begin || end > sum->first) continue;
      auto range_crc = RangeChecksum(path, begin, end);
      if (!range_crc.ok() || *range_crc != crc) {
        if (!changed.empty()) changed += ", ";
        std::string shown = QuotedExcerpt(name);  // escaped; shown in single quotes
        if (shown.back() == '"') shown = shown.substr(1, shown.size() - 2);
        changed += "tensor '" + shown + "' bytes [" + std::to_string(begin) + ", " +
                   std::to_string(end) + ")";
      }
    }
  }
  return path + ": CRC32C mismatch (the file is corrupt" +
         (changed.empty() ? "" : "; changed: " + changed) + ")";
}

}  // namespace tierflow
