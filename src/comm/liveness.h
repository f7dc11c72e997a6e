// Whether every rank is still alive, seen through heartbeat files in a
// directory all ranks share (the output directory, which across nodes must
// be on a shared filesystem anyway). A rank that was killed, stopped
// (SIGSTOP) or hung in the kernel stops beating; its peers, waiting in a
// collective that will never complete, notice within `stale_after` and can
// end the job naming it, instead of waiting forever. A rank that is merely
// busy (rank 0 writing a checkpoint while the others wait) keeps beating:
// the beat comes from a thread of its own.
//
// Clock skew between nodes does not matter: a peer is stale when the beat
// count in its file has not changed for `stale_after` by this process's
// own steady clock.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tierflow/status.h"

namespace tierflow::comm {

class Liveness {
 public:
  // Creates `dir` if needed and starts beating into DIR/rank-<rank>.alive
  // every `period`. Errors: the directory or file cannot be written.
  static StatusOr<std::unique_ptr<Liveness>> Start(const std::string& dir, int rank, int world,
                                                   std::chrono::milliseconds period,
                                                   std::chrono::milliseconds stale_after);
  // Stops beating and removes this rank's file.
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // After every rank has started (a barrier between): Ok when every peer's
  // file is visible here; FailedPrecondition naming the first missing one
  // otherwise (the directory is not shared between the ranks' nodes).
  Status CheckShared() const;
  // "rank R (pid P on HOST) has not been heard from for S s" for the first
  // peer whose beat has not changed for stale_after; nullopt when all beat.
  // Thread-safe.
  std::optional<std::string> StalePeer();

  std::chrono::milliseconds stale_after() const { return stale_after_; }

 private:
  Liveness(std::string dir, int rank, int world, std::chrono::milliseconds period,
           std::chrono::milliseconds stale_after);
  std::string PathOf(int rank) const;
  Status Beat();
  void Run();

  const std::string dir_;
  const int rank_, world_;
  const std::chrono::milliseconds period_, stale_after_;
  uint64_t beats_ = 0;  // beating thread only
  std::atomic<bool> stop_{false};
  std::thread thread_;

  struct Seen {
    std::string content;  // last read: "beat pid host"
    std::chrono::steady_clock::time_point changed;
  };
  std::mutex mu_;
  std::vector<Seen> seen_;  // per rank
};

}  // namespace tierflow::comm
