// Where the fp32 master weights and Adam moments of each sub-group live
// between steps: host RAM (HostStateTier) or NVMe swap files (NvmeStateTier).
//
// The optimizer brings a sub-group into host memory (Acquire), updates it in
// place, and hands it back (Release). NVMe tiers read ahead (Prefetch) and
// write behind (Release with modified=true).
//
// Speculation (updates made before the step's clip/overflow decision): a tier
// that can keep two copies (SpeculatesOutOfPlace) stores the speculative
// result beside the current state (ReleaseSpeculative) and later makes it
// current (Commit) or forgets it (Abort), so rollback costs no I/O. On a tier
// that cannot (host RAM), the engine keeps a backup copy instead.
//
// Thread safety: a tier is driven by one thread (the optimizer worker);
// checkpoint reads and writes happen while the engine is idle.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow {

struct StateView {
  float* master = nullptr;      // (n,) fp32 master weights
  float* exp_avg = nullptr;     // (n,) first moment
  float* exp_avg_sq = nullptr;  // (n,) second moment
};

struct TierStats {
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t host_bytes = 0;  // host memory the tier holds (states or I/O buffers)
};

class StateTier {
 public:
  virtual ~StateTier() = default;
  virtual std::string_view name() const = 0;

  // Sets sub-group g's state: master from `master` (n floats), moments from
  // `exp_avg`/`exp_avg_sq`, or zero when those are null.
  virtual Status Write(int g, const float* master, const float* exp_avg,
                       const float* exp_avg_sq) = 0;
  // Copies g's state out (checkpoints, tests). Any pointer may be null to skip it.
  virtual Status Read(int g, float* master, float* exp_avg, float* exp_avg_sq) = 0;

  // Starts bringing g into host memory; a no-op where it already is. Never
  // blocks: where no buffer is free, it does nothing (Acquire will read g).
  virtual Status Prefetch(int g) = 0;
  // Like Prefetch, but waits for write-behind to free a buffer rather than
  // skipping; for moments when the caller would otherwise idle.
  virtual Status PrefetchWaitingForWrites(int g) = 0;
  // Host pointers to g's state, valid until Release or ReleaseSpeculative of g.
  virtual StatusOr<StateView> Acquire(int g) = 0;
  // Done with g; when modified, the new values become the stored state.
  virtual Status Release(int g, bool modified) = 0;
  // Whether ReleaseSpeculative/Commit/Abort are supported.
  virtual bool SpeculatesOutOfPlace() const = 0;
  // Stores g's (acquired, updated) state beside the current one, which stays current.
  virtual Status ReleaseSpeculative(int g) = 0;
  // Makes the speculative copy of g current / forgets it.
  virtual Status Commit(int g) = 0;
  virtual Status Abort(int g) = 0;
  // Waits for all write-behind I/O; returns its first error.
  virtual Status Flush() = 0;

  virtual TierStats Stats() const = 0;
};

}  // namespace tierflow
