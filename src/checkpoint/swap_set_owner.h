// Who owns a swap set on NVMe, and the one rule that decides who may remove
// it. Training's start-up cleanup, checkpoint retention, `tier migrate` and
// `tier clean` all remove sets through RemoveSwapSetIfAllowed, and nowhere
// else.
//
// Two kinds of sets have an owner on record, written when the set is made:
//  - a training run's set (its optimizer state, RUN_ID, or its streamed
//    weights, RUN_ID-params): RUN_DIR/owner names the output directory of the
//    run that made it (OwnerRecordForOutputDir: its path, host, and the
//    directory's device and inode, so a copy of OUT, which has another inode,
//    does not own what the original made);
//  - a checkpoint's kept set (`tier migrate --to nvme`): its marker
//    STORE/tierflow-swap/RUN_ID.checkpoint names the checkpoint directory,
//    by path and by device and inode.
//
// The rule: a set is removed only when
//  1. no process holds its lock (it is stale) and it is not a symbolic link;
//  2. the remover is its owner on record: the output directory that made it
//     (a run cleaning up after its own interrupted runs), or the checkpoint
//     its marker names (retiring the checkpoint, or moving its state back to
//     the host) — or a person running `tier clean`, who acts for any owner;
//  3. no checkpoint its marker names still uses it (that checkpoint's
//     trainer_state.json names the set).
// A set without an owner record (made before records existed, or whose
// creation was interrupted) is never removed by a run: `tier clean` does it.
// Lists such as OUT/swap_runs.json or a checkpoint's swap_set only say where
// to look: they are hints, never an authority.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "offload/swap_set.h"
#include "tierflow/status.h"

namespace tierflow {

// A directory's identity on its file system (stat's st_dev and st_ino).
struct DirIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  bool operator==(const DirIdentity&) const = default;
};
// Errors: errno errors of stat naming `path`.
StatusOr<DirIdentity> IdentityOf(const std::string& path);

// The owner record of the sets a training run in `out_dir` makes (opaque
// text for offload::StateStoreOptions::owner): its absolute path, this host,
// and its identity when it can be stat'ed here.
std::string OwnerRecordForOutputDir(const std::string& out_dir);

// STORE_DIR/tierflow-swap/RUN_ID.checkpoint.
std::string MarkerPath(const std::string& store_dir, const std::string& run_id);
// Writes the marker naming `checkpoint_dir` (an absolute path; its identity
// is recorded too), crash-safely. Errors: I/O errors naming the path.
Status WriteMarker(const std::string& store_dir, const std::string& run_id,
                   const std::string& checkpoint_dir);
struct CheckpointMarker {
  std::string checkpoint;               // the checkpoint directory it names
  std::optional<DirIdentity> identity;  // absent in markers from before identities
};
// The marker of `run_id` under `store_dir`, or nullopt when there is none or
// it cannot be read (a marker is read bounded, without following a link).
std::optional<CheckpointMarker> ReadMarker(const std::string& store_dir, const std::string& run_id);
// Removes the marker; a missing one is not an error.
void RemoveMarker(const std::string& store_dir, const std::string& run_id);
// Removes STORE_DIR/tierflow-swap and STORE_DIR when they are empty (after a
// set and its marker were removed); anything else left there stays.
void RemoveEmptyStoreDirectory(const std::string& store_dir);

// True when `checkpoint_dir` exists and its trainer_state.json uses the swap
// set `run_id` (so the set must be kept).
bool CheckpointUsesSwapSet(const std::string& checkpoint_dir, const std::string& run_id);

// Who asks to remove a set.
struct SwapSetRemover {
  enum class Kind {
    kOutputDir,   // a training run in `path` cleaning up its earlier runs' sets
    kCheckpoint,  // the checkpoint directory `path` letting go of its kept set
    kUser,        // `tierflow tier clean`: a person, for any owner
  };
  Kind kind = Kind::kUser;
  std::string path;
};

struct SwapSetVerdict {
  bool remove = false;  // the rule allows it (and, unless a dry run, it was removed)
  std::string why;      // why it goes or stays (a phrase without the set's path)
};

// The rule above for the set `set` listed under `dir` (offload::ListSwapSets).
// Never removes anything.
SwapSetVerdict JudgeSwapSetRemoval(const std::string& dir, const offload::SwapSetInfo& set,
                                   const SwapSetRemover& remover);

// Judges and, when allowed and not `dry_run`, removes the set, its marker and
// a store directory left empty. A set that turned live (or into a link)
// meanwhile is kept (remove false, why says so). Errors: I/O errors of the
// removal, naming the path.
StatusOr<SwapSetVerdict> RemoveSwapSetIfAllowed(const std::string& dir,
                                                const offload::SwapSetInfo& set,
                                                const SwapSetRemover& remover,
                                                bool dry_run = false);

// The same for the set `run_id` under `dir`, listed first; NotFound when
// there is no such set.
StatusOr<SwapSetVerdict> RemoveSwapSetIfAllowed(const std::string& dir, const std::string& run_id,
                                                const SwapSetRemover& remover);

}  // namespace tierflow
