#include "comm/liveness.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tierflow::comm {
namespace fs = std::filesystem;

Liveness::Liveness(std::string dir, int rank, int world, std::chrono::milliseconds period,
                   std::chrono::milliseconds stale_after)
    : dir_(std::move(dir)), rank_(rank), world_(world), period_(period), stale_after_(stale_after) {
  seen_.assign(static_cast<size_t>(world), Seen{"", std::chrono::steady_clock::now()});
}

StatusOr<std::unique_ptr<Liveness>> Liveness::Start(const std::string& dir, int rank, int world,
                                                    std::chrono::milliseconds period,
                                                    std::chrono::milliseconds stale_after) {
  if (world < 1 || rank < 0 || rank >= world || period.count() <= 0 || stale_after <= period) {
    return InvalidArgumentError("liveness: rank " + std::to_string(rank) + " of " +
                                std::to_string(world) + ", beat every " +
                                std::to_string(period.count()) + " ms, stale after " +
                                std::to_string(stale_after.count()) +
                                " ms: need a rank in the world and stale_after > period > 0");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("create the ranks' heartbeat directory " + dir + ": " + ec.message());
  std::unique_ptr<Liveness> l(new Liveness(dir, rank, world, period, stale_after));
  TF_RETURN_IF_ERROR(l->Beat());
  l->thread_ = std::thread([p = l.get()] { p->Run(); });
  return l;
}

Liveness::~Liveness() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  std::error_code ec;
  fs::remove(PathOf(rank_), ec);
}

std::string Liveness::PathOf(int rank) const {
  return dir_ + "/rank-" + std::to_string(rank) + ".alive";
}

Status Liveness::Beat() {
  char host[256] = "?";
  (void)::gethostname(host, sizeof host - 1);
  const std::string text =
      std::to_string(++beats_) + " " + std::to_string(::getpid()) + " " + host + "\n";
  // Written beside and renamed over, so a reader never sees half a beat.
  // The temporary is made anew (O_EXCL | O_NOFOLLOW): a link or a hard-linked
  // file left in its place is unlinked, never written through.
  const std::string path = PathOf(rank_), tmp = path + ".tmp";
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, "remove an old heartbeat " + tmp);
  }
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "write heartbeat " + tmp);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int saved = errno;
  ::close(fd);
  if (!written) return ErrnoStatus(saved, "write heartbeat " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus(errno, "rename to " + path);
  return Status::Ok();
}

void Liveness::Run() {
  auto next = std::chrono::steady_clock::now() + period_;
  while (!stop_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (std::chrono::steady_clock::now() < next) continue;
    next += period_;
    // A failed beat (a full disk) is retried at the next period; peers only
    // conclude after stale_after without any.
    (void)Beat();
  }
}

Status Liveness::CheckShared() const {
  for (int r = 0; r < world_; ++r) {
    std::error_code ec;
    if (!fs::exists(PathOf(r), ec)) {
      return FailedPreconditionError(
          "rank " + std::to_string(rank_) + " does not see rank " + std::to_string(r) +
          "'s heartbeat " + PathOf(r) +
          ": the output directory is not shared by the ranks; across nodes put --out on a "
          "filesystem every node mounts");
    }
  }
  return Status::Ok();
}

std::optional<std::string> Liveness::StalePeer() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    std::ifstream in(PathOf(r));
    std::string content;
    std::getline(in, content);
    Seen& s = seen_[static_cast<size_t>(r)];
    if (!content.empty() && content != s.content) {
      s.content = content;
      s.changed = now;
      continue;
    }
    if (now - s.changed < stale_after_) continue;
    std::istringstream fields(s.content);
    std::string beat, pid, host;
    fields >> beat >> pid >> host;
    const double seconds = std::chrono::duration<double>(now - s.changed).count();
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f", seconds);
    return "rank " + std::to_string(r) +
           (pid.empty() ? std::string() : " (pid " + pid + " on " + host + ")") +
           " has not been heard from for " + secs + " s: killed, stopped or hung";
  }
  return std::nullopt;
}

}  // namespace tierflow::comm
