// OUT/model: the final model's save (train/final_model.h).
#include "train/final_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "engine/master_weights.h"
#include "io/hf_checkpoint.h"
#include "io/hf_side_files.h"
#include "io/output_path.h"
#include "model/hf_model.h"

namespace tierflow {
namespace fs = std::filesystem;
namespace {

// ".model.tmp-PID": the model being written.
constexpr char kFinalModelTmpPrefix[] = ".model.tmp-";

// Entries of `dir`, sorted (the order a listing in a message shows).
StatusOr<std::vector<fs::path>> ListDirectory(const fs::path& dir) {
  std::vector<fs::path> entries;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
  if (ec) return IoError("list " + dir.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  return entries;
}

// `from` as `to`, without copying a byte: a hard link for anything but a
// directory (a symbolic link is linked as the link itself, never followed:
// linkat without AT_SYMLINK_FOLLOW), a new directory with the same mode for
// a directory, its entries linked in turn and the directory fsync'd.
Status LinkTree(const fs::path& from, const fs::path& to, FileSystem* file_system) {
  struct stat st {};
  if (::lstat(from.c_str(), &st) != 0) return ErrnoStatus(errno, "stat " + from.string());
  if (!S_ISDIR(st.st_mode)) {
    if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), 0) != 0) {
      return ErrnoStatus(errno, "hard-link " + from.string() + " as " + to.string());
    }
    return Status::Ok();
  }
  if (::mkdir(to.c_str(), 0700) != 0) return ErrnoStatus(errno, "create " + to.string());
  TF_ASSIGN_OR_RETURN(std::vector<fs::path> entries, ListDirectory(from));
  for (const fs::path& e : entries) {
    TF_RETURN_IF_ERROR(LinkTree(e, to / e.filename(), file_system));
  }
  if (::chmod(to.c_str(), st.st_mode & 07777) != 0)
    return ErrnoStatus(errno, "chmod " + to.string());
  return file_system->SyncDirectory(to.string());
}

// Carries the user's entries of `old_dir` into `new_dir` (written, not yet
// in place) and notes what happens to tierflow's.
Status KeepUserEntries(const fs::path& old_dir, const fs::path& new_dir, FileSystem* file_system,
                       FinalModelReport* report) {
  TF_ASSIGN_OR_RETURN(std::vector<fs::path> entries, ListDirectory(old_dir));
  bool linked = false;
  for (const fs::path& e : entries) {
    const std::string name = e.filename().string();
    if (IsFinalModelFileName(name)) {
      std::error_code ec;
      if (!IsHfWeightFileName(name) && !fs::exists(fs::symlink_status(new_dir / name, ec))) {
        report->dropped.push_back(name);
      }
      continue;
    }
    Status s = LinkTree(e, new_dir / name, file_system);
    if (!s.ok()) {
      return FailedPreconditionError(
          "keeping " + e.string() + ", which tierflow did not write, in the new model: " +
          s.ToString() + ". Move it out of " + old_dir.string() +
          " and save again (the previous model is unchanged; the run's last checkpoint holds "
          "the trained state)");
    }
    report->kept.push_back(name);
    linked = true;
  }
  if (linked) TF_RETURN_IF_ERROR(file_system->SyncDirectory(new_dir.string()));
  return Status::Ok();
}

// Removes the temporaries of interrupted saves; an aside copy (the previous
// model, moved aside by ReplaceDirectory) is put back first when a crash left
// OUT/model missing, since it is then the only copy of that model.
Status CleanLeftovers(const fs::path& out_dir, FileSystem* file_system, FinalModelReport* report) {
  const std::string old_prefix = ReplacedDirectoryAsidePrefix("model");
  const fs::path final_dir = out_dir / "model";
  TF_ASSIGN_OR_RETURN(std::vector<fs::path> entries, ListDirectory(out_dir));
  std::error_code ec;
  const bool model_missing = !fs::exists(fs::symlink_status(final_dir, ec));
  std::vector<fs::path> leftovers;
  for (const fs::path& e : entries) {
    const std::string name = e.filename().string();
    if (name.rfind(old_prefix, 0) == 0 && model_missing && report->restored_from.empty() &&
        fs::is_directory(fs::symlink_status(e, ec))) {
      TF_RETURN_IF_ERROR(file_system->RenameFile(e.string(), final_dir.string())
                             .WithContext("putting back the previous model"));
      TF_RETURN_IF_ERROR(file_system->SyncDirectory(out_dir.string()));
      report->restored_from = e.string();
      continue;
    }
    if (name.rfind(kFinalModelTmpPrefix, 0) == 0 || name.rfind(old_prefix, 0) == 0) {
      leftovers.push_back(e);
    }
  }
  for (const fs::path& e : leftovers) {
    std::error_code rm;
    fs::remove_all(e, rm);  // a symbolic link is removed itself, never followed
    if (rm) {
      return IoError("remove " + e.string() + " (left by an interrupted save): " + rm.message());
    }
  }
  return Status::Ok();
}

}  // namespace

bool IsFinalModelFileName(const std::string& name) {
  if (IsHfWeightFileName(name) || name == kHfConfigFileName) return true;
  const std::vector<std::string>& side = HfSideFileNames();
  return std::find(side.begin(), side.end(), name) != side.end();
}

Status CheckFinalModelDir(const std::string& out_dir) {
  return CheckNoLinksUnder(out_dir, (fs::path(out_dir) / "model").string())
      .WithContext("the final model's directory");
}

Status SaveFinalModel(const DirLock& out_lock, OffloadEngine& engine, const ParamLayout& layout,
                      DType dtype, const SourceModelFiles& source, FileSystem* file_system,
                      FinalModelReport* report) {
  if (file_system == nullptr) file_system = DefaultFileSystem();
  FinalModelReport ignored;
  if (report == nullptr) report = &ignored;
  const fs::path out_dir = out_lock.dir();
  TF_RETURN_IF_ERROR(CleanLeftovers(out_dir, file_system, report));
  TF_RETURN_IF_ERROR(CheckFinalModelDir(out_dir.string()));
  TF_RETURN_IF_ERROR(engine.Finish().status());
  // Streamed from the engine's sub-groups: never the whole model in RAM.
  StateRangeReader reader(engine);
  const UnitWeightsReader weights = [&](int unit, uint64_t offset, uint64_t count, float* out) {
    return reader.Read(unit, StateRangeReader::Array::kMaster, offset, count, out);
  };
  const fs::path final_dir = out_dir / "model";
  const fs::path tmp = out_dir / (kFinalModelTmpPrefix + std::to_string(::getpid()));
  const HfModelSaveOptions options = SavedModelOptions(&source, dtype);
  TF_RETURN_IF_ERROR(SaveHfModel(tmp.string(), layout, weights, options));
  TF_RETURN_IF_ERROR(WriteHfSideFiles(source.side, tmp.string(), file_system));
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(final_dir, ec))) {
    TF_RETURN_IF_ERROR(KeepUserEntries(final_dir, tmp, file_system, report));
  }
  return ReplaceDirectory(file_system, tmp.string(), final_dir.string())
      .WithContext("saving the final model");
}

}  // namespace tierflow
