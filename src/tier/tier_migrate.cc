// `tierflow tier migrate`.
#include "tier/tier_migrate.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_verify.h"
#include "checkpoint/optimizer_state.h"
#include "checkpoint/swap_set_owner.h"
#include "checkpoint/trainer_state.h"
#include "common/cancel.h"
#include "common/path_component.h"
#include "io/dir_lock.h"
#include "io/file_system.h"
#include "io/output_path.h"
#include "io/safetensors_reader.h"
#include "io/safetensors_writer.h"
#include "offload/aligned_buffer.h"
#include "offload/state_store.h"
#include "offload/swap_reader.h"
#include "offload/swap_set.h"
#include "tier/tier_scan.h"

namespace tierflow::tier {
namespace fs = std::filesystem;
namespace {

constexpr const char* kArrays[3] = {"master", "exp_avg", "exp_avg_sq"};

struct UnitArrays {
  std::vector<float> a[3];
};

Status Step(const MigrateOptions& o, std::string_view step) {
  return o.before_step ? o.before_step(step) : Status::Ok();
}

Status ReadUnit(const CheckpointOptimizerState& s, size_t u, UnitArrays* out) {
  const size_t n = s.units()[u].num_params;
  for (auto& v : out->a) v.resize(n);
  return s.ReadUnit(u, out->a[0].data(), out->a[1].data(), out->a[2].data());
}

std::vector<std::string> StoreDirsOf(const CheckpointSwapSet& set) { return set.directories; }

std::string Absolute(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

Status CheckCancelMigrating(const std::string& ckpt) { return CheckCancel("migrating " + ckpt); }

// fsync of one file, opened without following a symlink.
Status SyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus(errno, "open " + path + " to fsync it");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, "fsync " + path);
  return Status::Ok();
}

// Makes a newly written swap set durable before trainer_state.json points at
// it: its files, its run directory, DIR/tierflow-swap, the store directory and
// the two directories above it (NVME/tierflow-checkpoints and NVME, which
// create_directories may have just made). Otherwise a power loss after the
// switch could leave a checkpoint naming a set whose directory entries never
// reached the disk.
Status SyncNewSwapSet(const std::vector<std::string>& store_dirs, const std::string& run_id) {
  FileSystem* file_system = DefaultFileSystem();
  for (uint32_t d = 0; d < store_dirs.size(); ++d) {
    TF_RETURN_IF_ERROR(SyncFile(offload::SwapFilePath(store_dirs[d], run_id, d)));
    const fs::path store = store_dirs[d];
    for (const fs::path& dir :
         {fs::path(offload::RunDirectory(store_dirs[d], run_id)), store / offload::kSwapRootName,
          store, store.parent_path(), store.parent_path().parent_path()}) {
      TF_RETURN_IF_ERROR(file_system->SyncDirectory(dir.string()));
    }
  }
  return Status::Ok();
}

// The checkpoint's optimizer/ directory, refused when it is a symlink: writes
// through it would land outside the checkpoint.
Status CheckOptimizerDirNotLink(const fs::path& opt_dir) {
  struct stat st {};
  if (::lstat(opt_dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return ErrnoStatus(errno, "stat " + opt_dir.string());
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
    return FailedPreconditionError(
        opt_dir.string() +
        " is a symbolic link or not a directory; tierflow does not write through links out of a "
        "checkpoint. Remove it (the checkpoint's state is in its swap set) and migrate again");
  }
  return Status::Ok();
}

// Notes for the entries of NVME/tierflow-checkpoints that CheckpointStoreDirectories
// passes over because they are symlinks: the leftover sweep never follows them.
void NoteSkippedStoreLinks(const std::string& nvme_dir, std::vector<std::string>* notes) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(nvme_dir) / kCheckpointStoreSubdir, ec)) {
    if (fs::is_symlink(e.symlink_status(ec))) {
      notes->push_back("skipped " + e.path().string() +
                       ": a symbolic link, not a store directory tierflow made");
    }
  }
}

// Removes the swap set `run_id` from `dirs` for checkpoint `ckpt`, through
// the ownership rule (checkpoint/swap_set_owner.h): only a set whose marker
// names this checkpoint, and which no checkpoint uses. What the rule keeps is
// said in `notes`. Errors: the first removal error.
Status RemoveSet(const std::string& ckpt, const std::vector<std::string>& dirs,
                 const std::string& run_id, std::vector<std::string>* notes) {
  Status first;
  const SwapSetRemover me{SwapSetRemover::Kind::kCheckpoint, Absolute(ckpt)};
  for (const std::string& d : dirs) {
    auto verdict = RemoveSwapSetIfAllowed(d, run_id, me);
    if (!verdict.ok()) {
      if (verdict.status().code() != StatusCode::kNotFound && first.ok()) first = verdict.status();
      continue;
    }
    if (!verdict->remove && notes != nullptr)
      notes->push_back("kept swap set " + run_id + " in " + d + ": " + verdict->why);
  }
  return first;
}

// Sweeps what earlier migrations left in the NVMe paths' store directories.
void SweepLeftovers(const std::string& ckpt, const MigrateOptions& o,
                    std::vector<std::string>* notes) {
  std::vector<std::string> old_dirs;
  for (const std::string& p : o.nvme_paths) {
    for (const std::string& d : CheckpointStoreDirectories(Absolute(p))) old_dirs.push_back(d);
    NoteSkippedStoreLinks(Absolute(p), notes);
  }
  for (const std::string& r : RemoveMigrationLeftovers(ckpt, old_dirs)) {
    notes->push_back("removed leftover " + r);
  }
}

// The new set's store directories, one per NVMe path: what
// trainer_state.json will say, checked as verify and resume will check it,
// before anything is written.
StatusOr<std::vector<std::string>> NewStoreDirs(const MigrateOptions& o,
                                                const std::string& run_id) {
  std::vector<std::string> store_dirs;
  for (const std::string& p : o.nvme_paths) {
    store_dirs.push_back(CheckpointStoreDirectory(Absolute(p), run_id));
    Status usable = CheckAbsolutePath(store_dirs.back(), "--nvme-path " + p);
    if (!usable.ok()) return InvalidArgumentError(usable.message() + "; name another directory");
  }
  return store_dirs;
}

void RemoveMarkers(const std::vector<std::string>& store_dirs, const std::string& run_id) {
  for (const std::string& d : store_dirs) {
    RemoveMarker(d, run_id);
    RemoveEmptyStoreDirectory(d);
  }
}

// Every unit's three arrays into the open store; adds their bytes to
// `state_bytes`.
Status WriteUnits(const std::string& ckpt, const CheckpointOptimizerState& src,
                  offload::StateStore& store, uint64_t* state_bytes) {
  UnitArrays arrays;
  for (size_t u = 0; u < src.units().size(); ++u) {
    TF_RETURN_IF_ERROR(CheckCancelMigrating(ckpt));
    TF_RETURN_IF_ERROR(ReadUnit(src, u, &arrays));
    const uint64_t n = src.units()[u].num_params * 4;
    TF_ASSIGN_OR_RETURN(
        offload::AlignedBuffer buf,
        offload::AlignedBuffer::Allocate(offload::RoundUp(n, offload::kDirectIoAlignment)));
    for (int a = 0; a < 3; ++a) {
      std::memcpy(buf.data(), arrays.a[a].data(), n);
      TF_ASSIGN_OR_RETURN(offload::TensorId id,
                          store.Find(OptimizerSwapTensorName(src.units()[u].name, kArrays[a])));
      TF_RETURN_IF_ERROR(store.Write(id, buf.data()));
      *state_bytes += n;
    }
  }
  return store.CloseKeepingFiles();  // Sync()s the block map
}

// Writes the new swap set. The markers go first: an interrupted write leaves
// a set `clean` can attribute (its checkpoint does not use it, so it may go).
// A failed write removes the markers again.
Status WriteSwapSet(const std::string& ckpt, const CheckpointOptimizerState& src,
                    const MigrateOptions& o, const std::vector<std::string>& store_dirs,
                    const std::string& run_id, uint64_t* state_bytes) {
  for (const std::string& d : store_dirs) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) return IoError("create " + d + ": " + ec.message());
    TF_RETURN_IF_ERROR(WriteMarker(d, run_id, Absolute(ckpt)));
  }
  offload::StateStoreOptions so;
  so.directories = store_dirs;
  so.run_id = run_id;
  so.block_size_bytes = o.block_size_bytes;
  so.io_mode = o.nvme_buffered ? offload::IoMode::kBuffered : offload::IoMode::kDirect;
  so.spare_bytes_per_directory = o.block_size_bytes;  // written once; no rewrites
  std::vector<offload::TensorSpec> specs;
  for (const auto& unit : src.units()) {
    for (const char* a : kArrays)
      specs.push_back({OptimizerSwapTensorName(unit.name, a), DType::kF32, unit.num_params * 4});
  }
  auto store = offload::StateStore::Create(so, specs);
  if (!store.ok()) {
    RemoveMarkers(store_dirs, run_id);
    return store.status();
  }
  Status written = WriteUnits(ckpt, src, **store, state_bytes);
  if (!written.ok()) {
    (void)(*store)->Close();  // the write's error is the one to report
    RemoveMarkers(store_dirs, run_id);
  }
  return written;
}

// Reads the set back through the read-only reader (checks every block's
// CRC32C) and compares it with the checkpoint's arrays.
Status VerifySwapSet(const std::string& ckpt, const CheckpointOptimizerState& src,
                     const MigrateOptions& o, const std::vector<std::string>& store_dirs,
                     const std::string& run_id) {
  TF_RETURN_IF_ERROR(Step(o, "verify"));
  TF_ASSIGN_OR_RETURN(auto reader, offload::SwapSetReader::Open(store_dirs, run_id));
  UnitArrays want;
  std::vector<float> got;
  for (size_t u = 0; u < src.units().size(); ++u) {
    TF_RETURN_IF_ERROR(CheckCancelMigrating(ckpt));
    TF_RETURN_IF_ERROR(ReadUnit(src, u, &want));
    const uint64_t n = src.units()[u].num_params;
    got.resize(n);
    for (int a = 0; a < 3; ++a) {
      const std::string name = OptimizerSwapTensorName(src.units()[u].name, kArrays[a]);
      TF_RETURN_IF_ERROR(reader->Read(name, got.data(), n * 4));
      if (std::memcmp(got.data(), want.a[a].data(), n * 4) != 0) {
        return DataLossError(
            "migrated tensor '" + name + "' in swap set " + run_id +
            " differs from the checkpoint's; the checkpoint was left in the host layout");
      }
    }
  }
  return Status::Ok();
}

// Points trainer_state.json at the swap set in place of the optimizer/ files.
Status SwitchToSwapSet(const std::string& ckpt, nlohmann::json doc,
                       const std::vector<std::string>& store_dirs, const std::string& run_id) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : doc["files"]) {
    // Verified before the migration: every entry is an object with a string path.
    const std::string rel = f.is_object() && f.contains("path") && f["path"].is_string()
                                ? f["path"].get<std::string>()
                                : std::string();
    if (rel.rfind("optimizer/", 0) != 0) files.push_back(f);
  }
  doc["files"] = files;
  doc["optimizer_layout"] = std::string(OffloadPlacementName(OffloadPlacement::kNvme));
  doc["swap_set"] = {{"run_id", run_id}, {"directories", store_dirs}};
  return WriteStringToFileAtomically(nullptr, ckpt + "/trainer_state.json",
                                     SealTrainerState(std::move(doc)));
}

StatusOr<MigrateResult> HostToNvme(const std::string& ckpt, const CheckpointOptimizerState& src,
                                   nlohmann::json doc, const MigrateOptions& o) {
  MigrateResult result{OffloadPlacement::kHost, OffloadPlacement::kNvme, 0, "", {}};
  SweepLeftovers(ckpt, o, &result.notes);
  const std::string run_id = std::string(kCheckpointRunIdPrefix) + "step-" +
                             std::to_string(src.step()) + "-" + offload::MakeRunId();
  result.run_id = run_id;
  TF_ASSIGN_OR_RETURN(const std::vector<std::string> store_dirs, NewStoreDirs(o, run_id));
  TF_RETURN_IF_ERROR(Step(o, "write"));
  TF_RETURN_IF_ERROR(WriteSwapSet(ckpt, src, o, store_dirs, run_id, &result.state_bytes));
  Status verified = VerifySwapSet(ckpt, src, o, store_dirs, run_id);
  if (!verified.ok()) {
    if (verified.code() == StatusCode::kDataLoss)
      (void)RemoveSet(ckpt, store_dirs, run_id, nullptr);  // the mismatch is what to report
    return verified;  // an injected stop leaves the set, as a crash would
  }
  TF_RETURN_IF_ERROR(SyncNewSwapSet(store_dirs, run_id));
  TF_RETURN_IF_ERROR(Step(o, "switch"));
  TF_RETURN_IF_ERROR(SwitchToSwapSet(ckpt, std::move(doc), store_dirs, run_id));
  TF_RETURN_IF_ERROR(Step(o, "remove_source"));
  std::error_code ec;
  fs::remove_all(fs::path(ckpt) / "optimizer", ec);
  if (ec) result.notes.push_back("could not remove " + ckpt + "/optimizer: " + ec.message());
  TF_RETURN_IF_ERROR(DefaultFileSystem()->SyncDirectory(ckpt));
  return result;
}

StatusOr<MigrateResult> NvmeToHostImpl(const std::string& ckpt, const CheckpointOptimizerState& src,
                                       nlohmann::json doc, const MigrateOptions& o) {
  MigrateResult result{
      OffloadPlacement::kNvme, OffloadPlacement::kHost, 0, src.swap_set().run_id, {}};
  const fs::path opt_dir = fs::path(ckpt) / "optimizer";
  std::error_code ec;
  TF_RETURN_IF_ERROR(Step(o, "write"));
  TF_RETURN_IF_ERROR(CheckOptimizerDirNotLink(opt_dir));
  fs::create_directories(opt_dir, ec);
  if (ec) return IoError("create " + opt_dir.string() + ": " + ec.message());
  UnitArrays arrays;
  std::vector<nlohmann::json> new_entries;
  for (size_t u = 0; u < src.units().size(); ++u) {
    TF_RETURN_IF_ERROR(CheckCancelMigrating(ckpt));
    const auto& unit = src.units()[u];
    TF_RETURN_IF_ERROR(ReadUnit(src, u, &arrays));
    const int64_t n = static_cast<int64_t>(unit.num_params);
    std::vector<SafetensorsEntry> entries = {
        {"master", DType::kF32, {n}, arrays.a[0].data()},
        {"exp_avg", DType::kF32, {n}, arrays.a[1].data()},
        {"exp_avg_sq", DType::kF32, {n}, arrays.a[2].data()},
    };
    const std::string rel = OptimizerUnitFileName(unit.name);
    TF_RETURN_IF_ERROR(WriteSafetensors(
        ckpt + "/" + rel, entries, {{"format", "tierflow.optimizer_state"}, {"unit", unit.name}}));
    result.state_bytes += 3 * unit.num_params * 4;
  }
  TF_RETURN_IF_ERROR(DefaultFileSystem()->SyncDirectory(opt_dir.string()));
  TF_RETURN_IF_ERROR(Step(o, "verify"));
  std::vector<float> got;
  for (size_t u = 0; u < src.units().size(); ++u) {
    TF_RETURN_IF_ERROR(CheckCancelMigrating(ckpt));
    const auto& unit = src.units()[u];
    TF_RETURN_IF_ERROR(ReadUnit(src, u, &arrays));
    const std::string rel = OptimizerUnitFileName(unit.name);
    TF_ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(ckpt + "/" + rel));
    got.resize(unit.num_params);
    for (int a = 0; a < 3; ++a) {
      TF_RETURN_IF_ERROR(reader->Read(kArrays[a], DType::kF32, got.data(), unit.num_params * 4));
      if (std::memcmp(got.data(), arrays.a[a].data(), unit.num_params * 4) != 0) {
        return DataLossError(
            ckpt + "/" + rel + ": tensor '" + kArrays[a] +
            "' differs from the swap set's after writing; the checkpoint was left in "
            "the nvme layout");
      }
    }
    TF_ASSIGN_OR_RETURN(nlohmann::json entry, DescribeCheckpointFile(ckpt, rel));
    new_entries.push_back(std::move(entry));
  }
  TF_RETURN_IF_ERROR(Step(o, "switch"));
  nlohmann::json files = nlohmann::json::array();
  for (auto& e : new_entries) files.push_back(std::move(e));
  for (const auto& f : doc["files"]) files.push_back(f);
  doc["files"] = files;
  doc.erase("optimizer_layout");
  doc.erase("swap_set");
  TF_RETURN_IF_ERROR(WriteStringToFileAtomically(nullptr, ckpt + "/trainer_state.json",
                                                 SealTrainerState(std::move(doc))));
  TF_RETURN_IF_ERROR(Step(o, "remove_source"));
  Status removed =
      RemoveSet(ckpt, StoreDirsOf(src.swap_set()), src.swap_set().run_id, &result.notes);
  if (!removed.ok())
    result.notes.push_back("could not remove swap set " + src.swap_set().run_id + ": " +
                           removed.ToString());
  return result;
}

}  // namespace

std::vector<std::string> RemoveMigrationLeftovers(const std::string& ckpt,
                                                  const std::vector<std::string>& store_dirs) {
  std::vector<std::string> removed;
  auto doc = ReadCheckpointState(ckpt);
  if (!doc.ok()) return removed;
  auto layout = ParseCheckpointLayout(*doc, ckpt + "/trainer_state.json");
  if (!layout.ok()) return removed;
  std::error_code ec;
  const fs::path opt_dir = fs::path(ckpt) / "optimizer";
  // remove_all removes a symlink itself, never what it points to.
  if (layout->layout == OffloadPlacement::kNvme && fs::exists(fs::symlink_status(opt_dir, ec))) {
    fs::remove_all(opt_dir, ec);
    if (!ec) removed.push_back(opt_dir.string());
  }
  // Stale sets an interrupted migration of this checkpoint left: its marker
  // names this checkpoint, which does not use them (the ownership rule).
  const SwapSetRemover me{SwapSetRemover::Kind::kCheckpoint, Absolute(ckpt)};
  for (const std::string& d : store_dirs) {
    auto sets = offload::ListSwapSets(d);
    if (!sets.ok()) continue;
    for (const auto& set : *sets) {
      if (set.state != offload::SwapSetState::kStale || !ReadMarker(d, set.run_id)) continue;
      auto verdict = RemoveSwapSetIfAllowed(d, set, me);
      if (verdict.ok() && verdict->remove) removed.push_back(set.path);
    }
  }
  return removed;
}

StatusOr<MigrateResult> MigrateCheckpoint(const std::string& ckpt, const MigrateOptions& o) {
  if (o.to != OffloadPlacement::kHost && o.to != OffloadPlacement::kNvme) {
    return InvalidArgumentError("--to must be host or nvme, not " +
                                std::string(OffloadPlacementName(o.to)));
  }
  // The new swap set never goes inside the checkpoint it is made from: the
  // switch removes CKPT/optimizer, which could then hold the set itself.
  for (const std::string& p : o.nvme_paths) {
    TF_RETURN_IF_ERROR(CheckNotInside(p, "tier migrate --nvme-path", ckpt, "the checkpoint"));
  }
  TF_RETURN_IF_ERROR(CheckCancelMigrating(ckpt));
  // Migration rewrites the checkpoint's trainer_state.json and its optimizer
  // files: never while a run in its output directory may be saving, resuming
  // or applying retention there.
  DirLock out_lock;
  if (const std::string out = CheckpointOutputDir(ckpt); !out.empty()) {
    TF_ASSIGN_OR_RETURN(out_lock, DirLock::Acquire(out, "tierflow tier migrate"));
  }
  CheckpointInfo info = VerifyCheckpoint(ckpt);
  if (!info.verified) {
    return DataLossError("checkpoint " + ckpt +
                         " does not verify, so it is not migrated: " + info.problem);
  }
  TF_ASSIGN_OR_RETURN(auto src, CheckpointOptimizerState::Open(ckpt));
  if (src->layout() == o.to) {
    MigrateResult r{src->layout(), o.to, 0, src->swap_set().run_id, {}};
    std::vector<std::string> dirs = src->swap_set().directories;
    for (const std::string& p : o.nvme_paths) {
      for (const std::string& d : CheckpointStoreDirectories(Absolute(p))) dirs.push_back(d);
      NoteSkippedStoreLinks(Absolute(p), &r.notes);
    }
    for (const std::string& x : RemoveMigrationLeftovers(ckpt, dirs))
      r.notes.push_back("removed leftover " + x);
    r.notes.push_back("checkpoint " + ckpt + " is already in the " +
                      std::string(OffloadPlacementName(o.to)) + " layout");
    return r;
  }
  if (o.to == OffloadPlacement::kNvme) {
    if (o.nvme_paths.empty())
      return InvalidArgumentError("--to nvme needs at least one --nvme-path DIR");
    return HostToNvme(ckpt, *src, src->state(), o);
  }
  return NvmeToHostImpl(ckpt, *src, src->state(), o);
}

}  // namespace tierflow::tier
