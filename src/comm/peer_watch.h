// Waiting on a collective without waiting forever on a dead peer. Neither
// OpenMPI nor NCCL times out: a collective whose peer was killed or
// stopped (SIGSTOP) never completes. A rank that waits polls instead, and
// every so often asks the liveness check (comm/liveness.h) whether a peer
// has stopped beating; when one has, it prints which and ends the whole
// job (MPI_Abort), since no rank can finish a collective with it.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "tierflow/status.h"

namespace tierflow::comm {

// A message naming a peer that stopped beating, or nothing.
using PeerCheck = std::function<std::optional<std::string>()>;

struct PeerWatch {
  PeerCheck check;
  std::chrono::milliseconds every{1000};
  // Ends the job with the message (MPI_Abort: does not return). Tests may
  // return; the wait then fails with the message.
  std::function<void(const std::string&)> end_job;

  bool active() const { return static_cast<bool>(check); }
};

// Polls `done` (true: the wait is over; an error ends it too) until it
// is: spinning briefly, since small collectives complete in microseconds,
// then sleeping 200 us between polls so that a long wait costs no core.
// Every `watch.every` it asks `watch.check`; a message is printed and goes
// to `watch.end_job`, and if that returns, to an Unavailable error.
Status PollWithPeerWatch(const std::function<StatusOr<bool>()>& done, const PeerWatch& watch);

}  // namespace tierflow::comm
