#include "comm/peer_watch.h"

#include <cstdio>
#include <thread>

namespace tierflow::comm {

Status PollWithPeerWatch(const std::function<StatusOr<bool>()>& done, const PeerWatch& watch) {
  auto next_check = std::chrono::steady_clock::now() + watch.every;
  for (int polls = 0;; ++polls) {
    TF_ASSIGN_OR_RETURN(const bool over, done());
    if (over) return Status::Ok();
    if (polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (!watch.active() || std::chrono::steady_clock::now() < next_check) continue;
    next_check = std::chrono::steady_clock::now() + watch.every;
    if (std::optional<std::string> dead = watch.check()) {
      std::fprintf(stderr, "tierflow: %s; ending all ranks (MPI_Abort)\n", dead->c_str());
      std::fflush(stderr);
      if (watch.end_job) watch.end_job(*dead);
      return UnavailableError(*dead + ": the collective cannot complete");
    }
  }
}

}  // namespace tierflow::comm
