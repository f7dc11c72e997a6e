// The file-writing interface checkpoints go through, and crash-safe whole-file writes.
//
// Checkpoint writers never open files themselves: they ask a FileSystem, so a
// test can swap in one that fails a write part-way (disk full, EIO) and check
// that the previous checkpoint survives (the LevelDB Env / ErrorEnv idea).
// WriteFileAtomically is the one way tierflow replaces a file on disk: write a
// temporary file beside it, fsync it, rename it over the target, fsync the
// directory. A crash or an error at any point leaves either the old file or the
// new one, never a torn mix. Files appended in place (metrics.jsonl) are opened
// by OpenFileToAppendInPlace. Neither follows a link (io/output_path.h).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

// A file open for sequential writing. Not thread-safe: one writer at a time.
class WritableFile {
 public:
  virtual ~WritableFile() = default;  // closes the file if Close was not called, ignoring errors

  // Appends `num_bytes` bytes; short writes and EINTR are retried, any other
  // failure is an ErrnoStatus naming the path and the offset.
  virtual Status Append(const void* data, size_t num_bytes) = 0;
  // Makes the written bytes durable (fsync).
  virtual Status Sync() = 0;
  // Closes the file; calling it again is a no-op returning OK.
  virtual Status Close() = 0;
};

// The file operations checkpoint writing needs. Implementations are
// thread-safe: distinct files may be written from different threads.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Creates `path`, which must not exist (O_EXCL | O_NOFOLLOW in the POSIX
  // implementation: a file or link already there is an error, never written
  // through). WriteFileAtomically's temporaries are its only callers.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // rename(2): atomically replaces `to` with `from`.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // unlink(2). NotFound if `path` does not exist.
  virtual Status RemoveFile(const std::string& path) = 0;
  // fsync(2) on the directory itself, so a rename or unlink in it is durable.
  virtual Status SyncDirectory(const std::string& dir) = 0;
};

// The POSIX implementation. Never null, never deleted, stateless.
FileSystem* DefaultFileSystem();

// Replaces `path` with the bytes `write_body` appends, crash-safely: the body
// writes to "<path>.tmp-<pid>-<n>", which is fsync'd, closed, renamed over
// `path`, and the directory is fsync'd. On any failure (including one returned
// by `write_body`) the temporary file is removed, `path` is left as it was,
// and the first error is returned, prefixed with the path being written.
// A symbolic link or a non-regular file at `path` is refused before anything
// is written (CheckExistingOutputFile): the rename would replace the link,
// losing what the user linked. A hard-linked `path` is fine: the rename
// replaces this name only, the other names keep the old contents.
// `fs` may be null (DefaultFileSystem).
Status WriteFileAtomically(FileSystem* fs, const std::string& path,
                           const std::function<Status(WritableFile&)>& write_body);

// WriteFileAtomically for a file whose contents are already in memory.
Status WriteStringToFileAtomically(FileSystem* fs, const std::string& path,
                                   std::string_view contents);

// Opens `path` to append to it in place (a log such as metrics.jsonl, one
// write(2) per Append), creating it (0644) when absent and emptying it first
// when `truncate`. Never follows a link (O_NOFOLLOW), and refuses, before
// writing anything, what CheckInPlaceFile refuses (io/output_path.h): a
// symbolic link, anything but a regular file, a file with other hard links.
// `what` names the file's role in errors ("metrics file").
StatusOr<std::unique_ptr<WritableFile>> OpenFileToAppendInPlace(const std::string& path,
                                                                bool truncate,
                                                                std::string_view what);

// The directory part of `path` ("." when it has none), for SyncDirectory.
std::string DirectoryOf(const std::string& path);

// The one way tierflow replaces a directory (a checkpoint, the final model):
// puts `tmp_dir`, fully written, in place as `final_dir`, crash-safely.
// Making tmp_dir's contents durable (fsync of its files and of tmp_dir
// itself) is the caller's business; both must be in the same parent
// directory, since rename(2) does not cross file systems.
//  1. an existing `final_dir` is renamed aside to PARENT/.NAME.old-PID
//     (ReplacedDirectoryAsidePrefix(NAME) + PID);
//  2. `tmp_dir` is renamed to `final_dir`; on failure the old one is put back
//     and the error returned (tmp_dir is left to the caller);
//  3. PARENT is fsync'd, so the renames survive a power cut; on failure the
//     error says the new directory is in place but not yet durable, and the
//     old one is kept aside;
//  4. the old one is removed (best effort: a leftover of this or of a crash
//     between 1 and 4 has the aside name, for the caller's next run to
//     remove; whoever replaces `final_dir` must hold the lock over PARENT).
// A crash at any point leaves `final_dir` either old or new, or, between 1
// and 2, only the aside copy. `fs` may be null (DefaultFileSystem); renames
// and the fsync go through it, the removal in step 4 does not.
Status ReplaceDirectory(FileSystem* fs, const std::string& tmp_dir, const std::string& final_dir);

// ".NAME.old-": how ReplaceDirectory names the copy it moves aside.
std::string ReplacedDirectoryAsidePrefix(const std::string& name);

}  // namespace tierflow
