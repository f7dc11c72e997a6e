// The checks every path tierflow writes goes through: a write never follows
// a link, never changes the file behind another name, and never lands inside
// what the command reads (issue 40).
//
//  - No link is followed for writing. Whole files are replaced by rename(2)
//    from a temporary created O_EXCL | O_NOFOLLOW (io/file_system.h); a
//    symbolic link where tierflow would write a file, or as a directory it
//    makes under its output directory (OUT/checkpoints, OUT/model), is
//    refused, naming it, rather than followed or silently replaced.
//  - A file written in place (metrics.jsonl, appended; the lock file's holder
//    line) must be a regular file with one name: through a hard link the
//    other name's contents would change too.
//  - An output is never its input nor inside it. Paths are compared
//    canonically (std::filesystem::weakly_canonical: links in the part that
//    exists are resolved, a part not made yet is compared as written).
//
// The start-up checks (CheckOutputFile, CheckNoLinksUnder, CheckNotInside)
// are the ones the later write makes, run before any work, so a bad path is
// an error before training or exporting begins. Every refusal is
// FailedPrecondition (a link, a hard link, not a regular file) or
// InvalidArgument (an output inside an input), naming the path, what is
// wrong and what to do; a failed system call is an ErrnoStatus naming it.
// Stateless and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

// How a file is written, which decides what an existing one may be.
enum class OutputWrite {
  kReplace,  // written beside it and renamed over it (WriteFileAtomically)
  kInPlace,  // opened and written in its own inode (metrics.jsonl, the lock file)
};

// `path` as it is now, for a write of kind `how`: absent is fine; present, it
// must be a regular file and not a symbolic link, and for kInPlace have one
// hard link. `what` names the path's role in errors ("--trace", "metrics
// file"); "" for none.
Status CheckExistingOutputFile(const std::string& path, OutputWrite how, std::string_view what);

// The same checks on a file just opened (O_NOFOLLOW) to be written in place:
// a regular file with one hard link.
Status CheckInPlaceFile(int fd, const std::string& path, std::string_view what);

// Everything the later write of `path` needs, checked now:
// CheckExistingOutputFile, and `path`'s directory exists, is a directory and
// takes a new file (probed by creating, with O_EXCL, and removing a hidden
// temporary there: the same system calls the write makes, so a read-only
// file system or a missing permission shows now).
Status CheckOutputFile(const std::string& path, OutputWrite how, std::string_view what);

// For directories tierflow makes or replaces under a directory it owns
// (`root`, a run's OUT): every component of `path` below `root` that exists
// is a directory and not a symbolic link (a link is refused even when it
// leads back inside `root`: what tierflow writes under OUT stays where OUT's
// listing shows it). Components not made yet are fine. `root` itself is the
// user's to name and may be a link. REQUIRES: `path` is `root` or below it,
// lexically.
Status CheckNoLinksUnder(const std::string& root, const std::string& path);

// InvalidArgument when `output` is `input` or inside it, canonically, naming
// both with their roles ("tier export --out", "the checkpoint"). Inputs that
// do not exist never contain anything.
Status CheckNotInside(const std::string& output, std::string_view output_what,
                      const std::string& input, std::string_view input_what);

// Whether `path` is `dir` or inside it, canonically (as CheckNotInside).
bool IsPathInside(const std::string& path, const std::string& dir);

}  // namespace tierflow
