// Crash-safe training checkpoints.
#include "train/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/path_component.h"
#include "engine/master_weights.h"
#include "io/file_reader.h"
#include "io/file_system.h"
#include "io/json_util.h"
#include "io/safetensors_reader.h"
#include "io/safetensors_writer.h"
#include "model/hf_model.h"
#include "offload/crc32c.h"
#include "offload/swap_reader.h"
#include "offload/swap_set.h"

namespace tierflow {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "tierflow.checkpoint";
constexpr int kVersion = 1;

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

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

std::string UnitFileName(const PathComponent& unit) { return OptimizerUnitFileName(unit); }

// trainer_state.json is small (counters, unit and file lists); anything
// larger is not one, and is not read whole into memory.
constexpr size_t kMaxStateFileBytes = 64u << 20;

// `rel` ("model/config.json") as validated components. Errors: InvalidArgument
// from PathComponent naming `what`.
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

// The size of the regular file `rel` under `dir`, found without following a
// symlink at any component: a checkpoint whose files are links would make
// tier commands read (and, for migrate, write) outside it. Errors: the errno
// status of lstat naming the path (NotFound when missing); DataLoss naming a
// component that is a symlink or not a directory / regular file.
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

Status SyncDir(const std::string& dir) { return DefaultFileSystem()->SyncDirectory(dir); }

// An nvme-layout checkpoint being retired takes its swap set with it: the
// set, its marker (tier/tier_scan.h: STORE_DIR/tierflow-swap/RUN_ID.checkpoint)
// and the then-empty store directory. Failures leave a set `tierflow tier
// clean` removes later (its checkpoint is gone), so they are not errors here.
void RemoveCheckpointSwapSet(const std::string& checkpoint_dir) {
  // A malformed state names no set to remove (typed reads: an old
  // checkpoint's wrong field must not abort the save that retires it).
  auto doc = ReadCheckpointState(checkpoint_dir);
  if (!doc.ok()) return;
  auto layout = ParseCheckpointLayout(*doc, checkpoint_dir + "/trainer_state.json");
  if (!layout.ok() || layout->layout != OffloadPlacement::kNvme) return;
  const std::string& run_id = layout->swap_set.run_id;
  for (const std::string& d : layout->swap_set.directories) {
    const fs::path dir = d;
    if (!offload::RemoveSwapSet(dir.string(), run_id).ok()) continue;
    std::error_code ec;
    fs::remove(dir / offload::kSwapRootName / (run_id + ".checkpoint"), ec);
    fs::remove(dir / offload::kSwapRootName, ec);  // only when empty
    fs::remove(dir, ec);
  }
}

}  // namespace

std::string OptimizerUnitFileName(const PathComponent& unit) {
  return "optimizer/" + unit.str() + ".safetensors";
}

std::string OptimizerSwapTensorName(const std::string& unit, const std::string& array) {
  return unit + "/" + array;
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

StatusOr<nlohmann::json> ReadCheckpointState(const std::string& checkpoint_dir) {
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  struct stat st {};
  if (::lstat(state_path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return NotFoundError(state_path + " is missing (an interrupted checkpoint)");
    return ErrnoStatus(errno, "stat " + state_path);
  }
  if (S_ISLNK(st.st_mode)) {
    return DataLossError(state_path +
                         " is a symbolic link; tierflow does not follow links out of "
                         "a checkpoint");
  }
  // O_NOFOLLOW too: a link swapped in after the lstat is refused, not read.
  ReadFileOptions no_follow;
  no_follow.no_follow = true;
  auto text = ReadFileToString(state_path, kMaxStateFileBytes, no_follow);
  if (!text.ok()) {
    // Too large is the file's own damage; an errno (EIO, EACCES) is not.
    if (text.status().code() == StatusCode::kInvalidArgument) {
      return DataLossError(text.status().message());
    }
    return text.status();
  }
  nlohmann::json doc;
  TF_RETURN_IF_ERROR(ParseJsonStrict(*text, state_path, &doc));
  std::string format;
  if (!doc.is_object() || !GetJsonString(doc, "format", state_path, &format).ok() ||
      format != kFormat) {
    return DataLossError(state_path + " is not a tierflow checkpoint state");
  }
  int64_t version = -1;
  if (!GetJsonInt64(doc, "version", state_path, &version).ok() || version != kVersion) {
    const auto v = doc.find("version");
    return DataLossError(state_path + ": unsupported version " +
                         (v == doc.end() ? std::string("(none)") : JsonExcerpt(*v)));
  }
  return doc;
}

StatusOr<CheckpointLayout> ParseCheckpointLayout(const nlohmann::json& doc,
                                                 const std::string& state_path) {
  CheckpointLayout out;
  std::string name = "host";  // checkpoints from before the NVMe layout have no key
  TF_RETURN_IF_ERROR(
      GetJsonString(doc, "optimizer_layout", state_path, &name, JsonField::kOptional));
  // tierflow writes only a resolved placement by its own name: "auto" or
  // DeepSpeed's "cpu" here is a file tierflow did not write.
  StatusOr<OffloadPlacement> placement = ParseOffloadPlacement("optimizer_layout", name);
  if (!placement.ok() || *placement == OffloadPlacement::kAuto ||
      OffloadPlacementName(*placement) != name) {
    return DataLossError(state_path + ": unknown optimizer_layout " + QuotedExcerpt(name));
  }
  out.layout = *placement;
  if (out.layout == OffloadPlacement::kHost) return out;
  const std::string where = state_path + ": swap_set";
  const nlohmann::json* set = nullptr;
  const nlohmann::json* dirs = nullptr;
  TF_RETURN_IF_ERROR(GetJsonObject(doc, "swap_set", state_path, &set));
  TF_RETURN_IF_ERROR(GetJsonString(*set, "run_id", where, &out.swap_set.run_id));
  auto run_id = PathComponent::Parse(out.swap_set.run_id, where + ".run_id");
  if (!run_id.ok()) return DataLossError(run_id.status().message());
  TF_RETURN_IF_ERROR(GetJsonArray(*set, "directories", where, &dirs));
  if (dirs->empty()) return DataLossError(where + ".directories is empty");
  for (size_t i = 0; i < dirs->size(); ++i) {
    const nlohmann::json& d = (*dirs)[i];
    const std::string what = where + ".directories[" + std::to_string(i) + "]";
    if (!d.is_string()) return DataLossError(what + " must be a string, not " + JsonExcerpt(d));
    const std::string& dir = d.get_ref<const std::string&>();
    // Swap directories are elsewhere by design (an NVMe drive), so they are
    // whole paths, not components; but always absolute and plain, as
    // `tier migrate` writes them, so no relative or ".." path can point a
    // tier command somewhere the checkpoint's author did not name outright.
    bool plain = !dir.empty() && dir.front() == '/';
    for (size_t b = 1; plain && b < dir.size();) {
      const size_t e = std::min(dir.find('/', b), dir.size());
      if (e > b) plain = PathComponent::Parse(std::string_view(dir).substr(b, e - b), what).ok();
      b = e + 1;
    }
    if (!plain) {
      return DataLossError(what + " " + QuotedExcerpt(dir) +
                           " is not an absolute path of plain names (no '.', '..' or control "
                           "characters)");
    }
    out.swap_set.directories.push_back(dir);
  }
  return out;
}

namespace {

Status CheckUnitRange(const CheckpointOptimizerState::Unit& unit, uint64_t offset, uint64_t count) {
  if (offset > unit.num_params || count > unit.num_params - offset) {
    return InvalidArgumentError("optimizer state of unit '" + unit.name.str() + "': parameters [" +
                                std::to_string(offset) + ", +" + std::to_string(count) +
                                ") are outside its " + std::to_string(unit.num_params));
  }
  return Status::Ok();
}

class HostOptimizerState : public CheckpointOptimizerState {
 public:
  Status ReadUnitRange(size_t u, uint64_t offset, uint64_t count, float* master, float* exp_avg,
                       float* exp_avg_sq) const override {
    const Unit& unit = units_.at(u);
    TF_RETURN_IF_ERROR(CheckUnitRange(unit, offset, count));
    // The unit's file stays open across its ranges (a resume reads it sub-group by sub-group).
    if (open_unit_ != u || reader_ == nullptr) {
      reader_.reset();
      TF_ASSIGN_OR_RETURN(reader_, SafetensorsReader::Open(dir_ + "/" + UnitFileName(unit.name)));
      open_unit_ = u;
    }
    const std::pair<const char*, float*> arrays[] = {
        {"master", master}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}};
    for (const auto& [name, out] : arrays) {
      const SafetensorsTensorInfo* t = reader_->Find(name);
      if (t == nullptr || t->dtype != DType::kF32 || t->num_elements != unit.num_params) {
        return DataLossError(reader_->path() + ": no fp32 tensor '" + name + "' of " +
                             std::to_string(unit.num_params) + " elements");
      }
      TF_RETURN_IF_ERROR(reader_->ReadRawRange(*t, offset * 4, out, count * 4));
    }
    return Status::Ok();
  }

 private:
  mutable size_t open_unit_ = SIZE_MAX;
  mutable std::unique_ptr<SafetensorsReader> reader_;
};

class NvmeOptimizerState : public CheckpointOptimizerState {
 public:
  Status ReadUnitRange(size_t u, uint64_t offset, uint64_t count, float* master, float* exp_avg,
                       float* exp_avg_sq) const override {
    const Unit& unit = units_.at(u);
    TF_RETURN_IF_ERROR(CheckUnitRange(unit, offset, count));
    const std::pair<const char*, float*> arrays[] = {
        {"master", master}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}};
    for (const auto& [name, out] : arrays) {
      TF_RETURN_IF_ERROR(
          reader_->ReadRange(OptimizerSwapTensorName(unit.name, name), offset * 4, out, count * 4));
    }
    return Status::Ok();
  }
  std::unique_ptr<offload::SwapSetReader> reader_;
};

}  // namespace

StatusOr<std::unique_ptr<CheckpointOptimizerState>> CheckpointOptimizerState::Open(
    const std::string& checkpoint_dir) {
  TF_ASSIGN_OR_RETURN(nlohmann::json doc, ReadCheckpointState(checkpoint_dir));
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  TF_ASSIGN_OR_RETURN(CheckpointLayout layout, ParseCheckpointLayout(doc, state_path));
  std::unique_ptr<CheckpointOptimizerState> out;
  NvmeOptimizerState* nvme = nullptr;
  if (layout.layout == OffloadPlacement::kNvme) {
    auto n = std::make_unique<NvmeOptimizerState>();
    TF_ASSIGN_OR_RETURN(n->reader_, offload::SwapSetReader::Open(layout.swap_set.directories,
                                                                 layout.swap_set.run_id));
    nvme = n.get();
    out = std::move(n);
  } else {
    out = std::make_unique<HostOptimizerState>();
  }
  out->dir_ = checkpoint_dir;
  out->layout_ = layout.layout;
  out->swap_set_ = std::move(layout.swap_set);
  TF_RETURN_IF_ERROR(GetJsonInt64(doc, "step", state_path, &out->step_, JsonField::kOptional));
  const nlohmann::json* units = nullptr;
  TF_RETURN_IF_ERROR(GetJsonArray(doc, "units", state_path, &units));
  std::set<std::string> seen;
  // Callers allocate num_params floats per array on the strength of this
  // entry, so it is bounded here by what the checkpoint's own files hold:
  // 12 bytes per parameter (three fp32 arrays) within the unit's file, or
  // exactly 4 per array tensor of the swap set, all within its files' sizes.
  uint64_t total_state_bytes = 0;
  for (size_t i = 0; i < units->size(); ++i) {
    const std::string where = state_path + ": units[" + std::to_string(i) + "]";
    const nlohmann::json& u = (*units)[i];
    std::string name;
    uint64_t num_params = 0;
    TF_RETURN_IF_ERROR(GetJsonString(u, "name", where, &name));
    TF_RETURN_IF_ERROR(GetJsonUint64(u, "num_params", where, &num_params));
    auto checked = PathComponent::Parse(name, where + ".name");
    if (!checked.ok()) return DataLossError(checked.status().message());
    if (!seen.insert(name).second) {
      return DataLossError(where + ".name " + QuotedExcerpt(name) + " appears twice");
    }
    if (num_params > UINT64_MAX / 12) {
      return DataLossError(where + ".num_params " + std::to_string(num_params) +
                           " is more than any file can hold");
    }
    const uint64_t unit_bytes = num_params * 12;
    if (nvme == nullptr) {
      const std::string rel = OptimizerUnitFileName(*checked);
      auto parts = SplitInsidePath(rel, where + ".name");
      if (!parts.ok()) return DataLossError(parts.status().message());
      auto size = RegularFileSizeInside(checkpoint_dir, *parts);
      if (!size.ok()) return size.status();
      if (*size < unit_bytes) {
        return DataLossError(where + ".num_params " + std::to_string(num_params) + " needs " +
                             std::to_string(unit_bytes) + " bytes, but " + checkpoint_dir + "/" +
                             rel + " is only " + std::to_string(*size) + " bytes");
      }
      // The file's three arrays hold exactly num_params floats each (its
      // header only; the data is read, and checksummed, by who needs it).
      TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(checkpoint_dir + "/" + rel));
      for (const char* array : {"master", "exp_avg", "exp_avg_sq"}) {
        const SafetensorsTensorInfo* t = reader->Find(array);
        if (t == nullptr || t->dtype != DType::kF32 || t->num_elements != num_params) {
          return DataLossError(checkpoint_dir + "/" + rel + ": tensor '" + array +
                               (t == nullptr ? "' is missing"
                                             : "' is not F32 of " + std::to_string(num_params) +
                                                   " elements, as " + where + ".num_params says"));
        }
      }
    } else {
      const CheckpointSwapSet& set = out->swap_set_;
      for (const char* array : {"master", "exp_avg", "exp_avg_sq"}) {
        const std::string tensor = OptimizerSwapTensorName(name, array);
        const offload::SwapTensorEntry* t = nvme->reader_->Find(tensor);
        if (t == nullptr || t->num_bytes != num_params * 4) {
          return DataLossError(
              "swap set " + set.run_id + " (" + set.directories[0] + "): tensor " +
              QuotedExcerpt(tensor) +
              (t == nullptr ? " is missing"
                            : " has the wrong size (" + std::to_string(t->num_bytes) + " bytes; " +
                                  where + ".num_params " + std::to_string(num_params) + " needs " +
                                  std::to_string(num_params * 4) + ")"));
        }
      }
      if (unit_bytes > UINT64_MAX - total_state_bytes) {
        return DataLossError(where +
                             ".num_params: the units' state is more than any file can hold");
      }
      total_state_bytes += unit_bytes;
    }
    out->units_.push_back({std::move(checked).value(), num_params});
  }
  if (nvme != nullptr) {
    uint64_t file_bytes = 0;
    for (const auto& f : nvme->reader_->files()) file_bytes += f->file_bytes();
    if (total_state_bytes > file_bytes) {
      return DataLossError(state_path + ": its units need " + std::to_string(total_state_bytes) +
                           " bytes of optimizer state, but the files of swap set " +
                           out->swap_set_.run_id + " hold only " + std::to_string(file_bytes));
    }
  }
  out->state_ = std::move(doc);
  return out;
}

Status SaveTrainingCheckpoint(const std::string& out_dir, OffloadEngine& engine,
                              const ParamLayout& layout, const CheckpointState& state, int keep,
                              RetentionReport* retention, const SourceModelFiles* source) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return IoError("create " + root.string() + ": " + ec.message());
  const std::string name = StepDirName(state.step);
  const fs::path tmp = root / ("." + name + ".tmp-" + std::to_string(::getpid()));
  const fs::path final_dir = root / name;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp / "optimizer", ec);
  if (ec) return IoError("create " + tmp.string() + ": " + ec.message());

  nlohmann::json files = nlohmann::json::array();
  auto record = [&](const std::string& rel) -> Status {
    TF_ASSIGN_OR_RETURN(nlohmann::json entry, DescribeCheckpointFile(tmp.string(), rel));
    files.push_back(std::move(entry));
    return Status::Ok();
  };

  // Optimizer state, one unit at a time, streamed from the sub-groups: the
  // host holds one sub-group's state and the writer's buffer, not a unit.
  TF_RETURN_IF_ERROR(engine.Finish().status());
  StateRangeReader reader(engine);
  nlohmann::json units = nlohmann::json::array();
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const UnitInfo& unit = layout.units[u];
    const int64_t n = static_cast<int64_t>(unit.num_params);
    auto stream = [&reader, u](StateRangeReader::Array array) -> SafetensorsFill {
      return [&reader, u, array](uint64_t byte_offset, uint64_t num_bytes, void* out) {
        return reader.Read(static_cast<int>(u), array, byte_offset / 4, num_bytes / 4,
                           static_cast<float*>(out));
      };
    };
    std::vector<SafetensorsEntry> entries = {
        {"master", DType::kF32, {n}, nullptr, stream(StateRangeReader::Array::kMaster)},
        {"exp_avg", DType::kF32, {n}, nullptr, stream(StateRangeReader::Array::kExpAvg)},
        {"exp_avg_sq", DType::kF32, {n}, nullptr, stream(StateRangeReader::Array::kExpAvgSq)},
    };
    TF_ASSIGN_OR_RETURN(PathComponent unit_name, PathComponent::Parse(unit.name, "unit name"));
    const std::string rel = UnitFileName(unit_name);
    TF_RETURN_IF_ERROR(
        WriteSafetensors((tmp / rel).string(), entries,
                         {{"format", "tierflow.optimizer_state"}, {"unit", unit.name}}));
    TF_RETURN_IF_ERROR(record(rel));
    units.push_back({{"name", unit.name}, {"num_params", unit.num_params}});
  }
  TF_RETURN_IF_ERROR(SyncDir((tmp / "optimizer").string()));

  // The model, in the Hugging Face layout.
  const UnitWeightsReader weights = [&](int unit, uint64_t offset, uint64_t count, float* out) {
    return reader.Read(unit, StateRangeReader::Array::kMaster, offset, count, out);
  };
  const HfModelSaveOptions model_options = SavedModelOptions(source, DType::kBF16);
  TF_RETURN_IF_ERROR(SaveHfModel((tmp / "model").string(), layout, weights, model_options));
  if (source != nullptr)
    TF_RETURN_IF_ERROR(WriteHfSideFiles(source->side, (tmp / "model").string()));
  for (const auto& entry : fs::directory_iterator(tmp / "model")) {
    TF_RETURN_IF_ERROR(record("model/" + entry.path().filename().string()));
  }

  nlohmann::json doc = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", state.step},
      {"optimizer_step", state.optimizer_step},
      {"loss_scaler",
       {{"scale", state.scaler.scale},
        {"good_steps", state.scaler.good_steps},
        {"hysteresis_left", state.scaler.hysteresis_left}}},
      {"data", state.data_state},
      {"loss", state.loss},
      {"model", state.model},
      {"world_size", state.world_size},
      {"sequences_per_step", state.sequences_per_step},
      {"units", units},
      {"files", files},
  };
  TF_RETURN_IF_ERROR(
      WriteStringToFileAtomically(nullptr, (tmp / "trainer_state.json").string(), doc.dump(2)));
  TF_RETURN_IF_ERROR(SyncDir(tmp.string()));
  // A checkpoint of the same step (a resumed run repeating it) is replaced.
  TF_RETURN_IF_ERROR(ReplaceDirectory(nullptr, tmp.string(), final_dir.string()));

  // Retention removes only what it has positively identified as superseded,
  // and only checkpoints older than the one just written:
  //  - a verified checkpoint beyond the newest `keep` verified ones;
  //  - a damaged one (its own format or checksums fail) older than the
  //    newest verified one.
  // One that could not be verified for an environmental reason (its NVMe
  // directory missing, EIO, EACCES) may verify once that is fixed, and may be
  // the newest state there is: it is kept and reported, never removed.
  int kept = 0;
  int64_t newest_verified = -1;
  for (const CheckpointInfo& info : ListCheckpoints(out_dir)) {  // newest first
    bool superseded = false;
    if (info.verified) {
      if (newest_verified < 0) newest_verified = info.step;
      superseded = ++kept > std::max(keep, 1);
    } else if (info.environmental()) {
      if (retention != nullptr) retention->kept_unverified.push_back(info);
    } else {
      superseded = newest_verified >= 0 && info.step < newest_verified;
    }
    if (!superseded || info.step >= state.step) continue;
    RemoveCheckpointSwapSet(info.path);
    fs::remove_all(info.path, ec);
    if (retention != nullptr) retention->removed.push_back(info.path);
  }
  // Temporaries of interrupted saves. The caller holds the output
  // directory's lock (io/dir_lock.h), so none belongs to a live save.
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string fname = entry.path().filename().string();
    std::error_code rm;
    if (fname.rfind(".step-", 0) == 0) fs::remove_all(entry.path(), rm);
  }
  return Status::Ok();
}

namespace {
CheckpointInfo VerifyCheckpointUnguarded(const std::string& checkpoint_dir);
}  // namespace

// trainer_state.json is outside input once on disk: a field of the wrong type
// makes nlohmann throw; that must mark the checkpoint unverified, not end the
// process (found by fuzz_checkpoint_state).
CheckpointInfo VerifyCheckpoint(const std::string& checkpoint_dir) {
  CheckpointInfo info;
  try {
    info = VerifyCheckpointUnguarded(checkpoint_dir);
  } catch (const nlohmann::json::exception& e) {
    info = CheckpointInfo();
    info.path = checkpoint_dir;
    info.problem =
        checkpoint_dir + "/trainer_state.json: malformed (" + std::string(e.what()) + ")";
  }
  // A problem found without an errno behind it (format, sizes, checksums)
  // is the checkpoint's own damage.
  if (!info.verified && info.problem_code == StatusCode::kOk) {
    info.problem_code = StatusCode::kDataLoss;
  }
  if (info.verified) info.problem_code = StatusCode::kOk;
  return info;
}

namespace {
CheckpointInfo VerifyCheckpointUnguarded(const std::string& checkpoint_dir) {
  CheckpointInfo info;
  info.path = checkpoint_dir;
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  auto parsed = ReadCheckpointState(checkpoint_dir);
  if (!parsed.ok()) {
    info.problem = parsed.status().message();
    info.problem_code = parsed.status().code();
    return info;
  }
  const nlohmann::json& doc = *parsed;
  int64_t step = -1;
  Status typed = GetJsonInt64(doc, "step", state_path, &step, JsonField::kOptional);
  if (!typed.ok()) {
    info.problem = typed.message();
    return info;
  }
  info.step = step;
  auto layout = ParseCheckpointLayout(doc, state_path);
  if (!layout.ok()) {
    info.problem = layout.status().message();
    return info;
  }
  info.layout = layout->layout;
  const nlohmann::json* files = nullptr;
  typed = GetJsonArray(doc, "files", state_path, &files);
  if (!typed.ok()) {
    info.problem = typed.message() + " (no file list)";
    return info;
  }
  std::set<std::string> listed;
  for (size_t i = 0; i < files->size(); ++i) {
    const nlohmann::json& f = (*files)[i];
    if (!f.is_object()) {
      info.problem = state_path + ": files[" + std::to_string(i) + "] must be an object, not " +
                     JsonExcerpt(f);
      return info;
    }
    info.problem = CheckCheckpointFile(checkpoint_dir, f, &info.problem_code);
    if (!info.problem.empty()) return info;
    listed.insert(f["path"].get<std::string>());  // CheckCheckpointFile checked it is a string
  }
  // Both layouts: Open validates every unit name (a PathComponent) and bounds
  // num_params by the unit's file or swap tensors; a unit whose file the
  // "files" list does not cover would otherwise be trusted unchecked.
  auto state = CheckpointOptimizerState::Open(checkpoint_dir);
  if (!state.ok()) {
    info.problem = state.status().message();
    info.problem_code = state.status().code();  // NotFound: e.g. its NVMe directory is missing
    return info;
  }
  if (info.layout == OffloadPlacement::kHost) {
    for (const auto& unit : (*state)->units()) {
      const std::string rel = OptimizerUnitFileName(unit.name);
      if (listed.count(rel) == 0) {
        info.problem = state_path + ": unit " + QuotedExcerpt(unit.name.str()) + " has no entry " +
                       QuotedExcerpt(rel) + " in files, so its state cannot be verified";
        return info;
      }
    }
  }
  if (info.layout == OffloadPlacement::kNvme) {
    const CheckpointSwapSet& set = (*state)->swap_set();
    auto reader = offload::SwapSetReader::Open(set.directories, set.run_id);
    if (!reader.ok()) {
      info.problem = reader.status().message();
      info.problem_code = reader.status().code();
      return info;
    }
    // Every unit's three arrays are there, whole, and every block verifies.
    for (const auto& unit : (*state)->units()) {
      for (const char* array : {"master", "exp_avg", "exp_avg_sq"}) {
        const std::string name = OptimizerSwapTensorName(unit.name, array);
        const offload::SwapTensorEntry* t = (*reader)->Find(name);
        if (t == nullptr || t->num_bytes != unit.num_params * 4) {
          info.problem = "swap set " + set.run_id + " (" + set.directories[0] + "): tensor '" +
                         name + (t == nullptr ? "' is missing" : "' has the wrong size");
          return info;
        }
      }
    }
    for (const auto& file : (*reader)->files()) {
      uint64_t checked = 0;
      auto problems = file->VerifyBlocks(&checked);
      if (!problems.empty()) {
        const offload::SwapBlockProblem& p = problems[0];
        info.problem = "swap file " + p.file + ": tensor '" + p.tensor + "' bytes [" +
                       std::to_string(p.tensor_begin_bytes) + ", " +
                       std::to_string(p.tensor_end_bytes) + ") at file offset " +
                       std::to_string(p.file_offset_bytes) + ": " + p.what;
        if (problems.size() > 1)
          info.problem += " (and " + std::to_string(problems.size() - 1) + " more blocks)";
        return info;
      }
      if (file->num_blocks_written() != file->header().num_logical_blocks) {
        info.problem =
            "swap file " + file->path() + ": " +
            std::to_string(file->header().num_logical_blocks - file->num_blocks_written()) +
            " blocks were never written (an incomplete set)";
        return info;
      }
    }
  }
  info.verified = true;
  return info;
}

}  // namespace

std::vector<CheckpointInfo> ListCheckpoints(const std::string& out_dir) {
  std::vector<CheckpointInfo> out;
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    // A symbolic link named step-N is not a checkpoint this run wrote:
    // resuming from it or applying retention through it would follow it out.
    if (name.rfind("step-", 0) != 0 || entry.is_symlink() || !entry.is_directory()) continue;
    CheckpointInfo info = VerifyCheckpoint(entry.path().string());
    if (info.step < 0) info.step = std::strtoll(name.c_str() + 5, nullptr, 10);
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step > b.step; });
  return out;
}

namespace {
StatusOr<CheckpointState> LoadTrainingCheckpointUnguarded(const std::string& checkpoint_dir,
                                                          OffloadEngine& engine,
                                                          const ParamLayout& layout, bool upload);
}  // namespace

StatusOr<CheckpointState> LoadTrainingCheckpoint(const std::string& checkpoint_dir,
                                                 OffloadEngine& engine, const ParamLayout& layout,
                                                 bool upload) {
  try {
    return LoadTrainingCheckpointUnguarded(checkpoint_dir, engine, layout, upload);
  } catch (const nlohmann::json::exception& e) {
    return DataLossError("checkpoint " + checkpoint_dir + "/trainer_state.json is malformed (" +
                         std::string(e.what()) + "); resume from an earlier checkpoint");
  }
}

namespace {
StatusOr<CheckpointState> LoadTrainingCheckpointUnguarded(const std::string& checkpoint_dir,
                                                          OffloadEngine& engine,
                                                          const ParamLayout& layout, bool upload) {
  CheckpointInfo info = VerifyCheckpoint(checkpoint_dir);
  if (!info.verified) return DataLossError("checkpoint " + checkpoint_dir + ": " + info.problem);
  TF_ASSIGN_OR_RETURN(auto optimizer_state, CheckpointOptimizerState::Open(checkpoint_dir));
  const nlohmann::json& doc = optimizer_state->state();
  const auto& units = optimizer_state->units();
  if (units.size() != layout.units.size()) {
    return FailedPreconditionError(
        "checkpoint " + checkpoint_dir + " was written for a different model: " +
        std::to_string(units.size()) + " units there, " + std::to_string(layout.units.size()) +
        " here; resume with the same --model, or start a new --out");
  }
  for (size_t u = 0; u < layout.units.size(); ++u) {
    if (units[u].name.str() != layout.units[u].name ||
        units[u].num_params != layout.units[u].num_params) {
      return FailedPreconditionError(
          "checkpoint " + checkpoint_dir + " was written for a different model: unit " +
          std::to_string(u) + " is '" + units[u].name.str() + "' of " +
          std::to_string(units[u].num_params) + " parameters there but '" + layout.units[u].name +
          "' of " + std::to_string(layout.units[u].num_params) +
          " parameters here; resume with the same --model, or start a new --out");
    }
  }
  // The counters, typed (a wrong type is a damaged checkpoint, reported).
  const std::string state_path = checkpoint_dir + "/trainer_state.json";
  CheckpointState state;
  state.step = optimizer_state->step();
  TF_RETURN_IF_ERROR(
      GetJsonInt64(doc, "optimizer_step", state_path, &state.optimizer_step, JsonField::kOptional));
  double scale = 1.0;
  int64_t good_steps = 0, hysteresis_left = 0;
  const nlohmann::json* ls = nullptr;
  TF_RETURN_IF_ERROR(GetJsonObject(doc, "loss_scaler", state_path, &ls, JsonField::kOptional));
  if (ls != nullptr) {
    const std::string where = state_path + ": loss_scaler";
    TF_RETURN_IF_ERROR(GetJsonDouble(*ls, "scale", where, &scale, JsonField::kOptional));
    TF_RETURN_IF_ERROR(GetJsonInt64(*ls, "good_steps", where, &good_steps, JsonField::kOptional));
    TF_RETURN_IF_ERROR(
        GetJsonInt64(*ls, "hysteresis_left", where, &hysteresis_left, JsonField::kOptional));
    if (!(scale > 0 && scale <= 3.0e38) || good_steps < 0 || good_steps > INT32_MAX ||
        hysteresis_left < 0 || hysteresis_left > INT32_MAX) {
      return DataLossError(where + ": scale, good_steps or hysteresis_left out of range");
    }
  }
  state.scaler = {static_cast<float>(scale), static_cast<int>(good_steps),
                  static_cast<int>(hysteresis_left)};
  if (auto d = doc.find("data"); d != doc.end()) state.data_state = *d;
  TF_RETURN_IF_ERROR(GetJsonDouble(doc, "loss", state_path, &state.loss, JsonField::kOptional));
  TF_RETURN_IF_ERROR(GetJsonString(doc, "model", state_path, &state.model, JsonField::kOptional));
  TF_RETURN_IF_ERROR(
      GetJsonInt64(doc, "world_size", state_path, &state.world_size, JsonField::kOptional));
  TF_RETURN_IF_ERROR(GetJsonInt64(doc, "sequences_per_step", state_path, &state.sequences_per_step,
                                  JsonField::kOptional));
  if (state.world_size < 1 || state.world_size > 65536 || state.sequences_per_step < 0 ||
      state.sequences_per_step > (int64_t{1} << 40)) {
    return DataLossError(state_path + ": world_size or sequences_per_step out of range");
  }
  // Sub-group by sub-group: the host holds one sub-group's state (the
  // planner's checkpoint buffers), never a unit's.
  const SubGroupLayout& sl = engine.layout();
  std::vector<float> master(sl.max_group_params), exp_avg(sl.max_group_params),
      exp_avg_sq(sl.max_group_params);
  for (size_t u = 0; u < layout.units.size(); ++u) {
    for (int g : sl.by_unit[u]) {
      const SubGroup& sg = sl.groups[g];
      TF_RETURN_IF_ERROR(optimizer_state->ReadUnitRange(
          u, sg.unit_offset, sg.num_params, master.data(), exp_avg.data(), exp_avg_sq.data()));
      TF_RETURN_IF_ERROR(engine.WriteState(g, master.data(), exp_avg.data(), exp_avg_sq.data()));
    }
  }
  if (upload) TF_RETURN_IF_ERROR(engine.UploadAllWeights());
  engine.RestoreCounters(state.optimizer_step, state.scaler);
  return state;
}

}  // namespace

HfModelSaveOptions SavedModelOptions(const SourceModelFiles* source, DType training_dtype) {
  HfModelSaveOptions options;
  options.dtype = training_dtype;
  if (source == nullptr) return options;
  options.base_config_json = source->config_json;
  if (source->weights) {
    options.dtype = source->weights->dtype.value_or(training_dtype);
    options.max_shard_bytes = source->weights->max_shard_bytes;
    options.tensor_name_prefix = source->weights->tensor_name_prefix;
  }
  return options;
}

}  // namespace tierflow
