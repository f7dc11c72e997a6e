#include "tools/train_ranks.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "comm/agree.h"
#include "io/output_path.h"

namespace tierflow::cli {
namespace {

std::string CpuRange(int first, int count) {
  return count == 1 ? std::to_string(first)
                    : std::to_string(first) + "-" + std::to_string(first + count - 1);
}

}  // namespace

std::vector<std::string> WithoutNprocPerNode(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc-per-node") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--nproc-per-node=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

namespace {
std::atomic<pid_t> g_mpirun{-1};
std::atomic<int> g_forwarded{0};

// Async-signal-safe: atomics and kill only.
void ForwardToMpirun(int) {
  const pid_t child = g_mpirun.load();
  if (child <= 0) return;
  const int n = g_forwarded.fetch_add(1) + 1;
  if (n == 1) {
    ::kill(child, SIGUSR1);
  } else if (n == 2) {
    ::kill(child, SIGTERM);
  } else {
    ::kill(-child, SIGKILL);
  }
}
}  // namespace

StatusOr<int> RunRanksUnderMpirun(int nproc, const std::vector<std::string>& args) {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return ErrnoStatus(errno, "find this program (/proc/self/exe) to start its ranks");
  self[n] = '\0';
  std::vector<std::string> argv = {"mpirun",  "-np", std::to_string(nproc), "--bind-to", "none",
                                   "--stdin", "none"};
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0 && nproc > cpus) argv.push_back("--oversubscribe");  // more ranks than CPUs
  argv.push_back(self);
  argv.insert(argv.end(), args.begin(), args.end());
  if (::geteuid() == 0) {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  std::vector<char*> raw;
  raw.reserve(argv.size() + 1);
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  // Forwarding is in place before the child exists: no window for a signal.
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = ForwardToMpirun;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const pid_t child = ::fork();
  if (child < 0) return ErrnoStatus(errno, "start mpirun (fork)");
  if (child == 0) {
    ::setpgid(0, 0);  // Ctrl-C at the terminal reaches the parent only
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    ::execvp("mpirun", raw.data());
    std::fprintf(stderr,
                 "tierflow train: start mpirun for --nproc-per-node %d: %s (install "
                 "openmpi-bin: scripts/install-deps.sh)\n",
                 nproc, std::strerror(errno));
    ::_exit(127);
  }
  g_mpirun.store(child);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoStatus(errno, "wait for mpirun");
  }
  g_mpirun.store(-1);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

StatusOr<std::optional<RankSetup>> SetUpRank() {
  TF_ASSIGN_OR_RETURN(std::optional<comm::LaunchEnv> launch,
                      comm::DetectLaunch(comm::ProcessEnv()));
  if (!launch || launch->world_size <= 1) return std::optional<RankSetup>();
  RankSetup setup;
  setup.launch = *launch;
  // The share first: oneTBB sizes its pool from the mask when it starts.
  const int online = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  const int local = std::max(1, launch->local_size);
  const int share = std::max(1, online / local);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  int have = 0;
  if (::sched_getaffinity(0, sizeof mask, &mask) == 0) have = CPU_COUNT(&mask);
  // Rebound unless the launcher gave this rank its own set of at least its
  // share: mpirun's default binds a rank to one core (oneTBB would get one
  // thread), and --bind-to none leaves every rank on every core.
  if (have < share || have >= online) {
    const int first = (launch->local_rank * share) % online;
    const int count = std::min(share, online - first);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    for (int c = first; c < first + count; ++c) CPU_SET(c, &mine);
    if (::sched_setaffinity(0, sizeof mine, &mine) != 0) {
      return ErrnoStatus(errno, "bind rank " + std::to_string(launch->rank) + " to CPUs " +
                                    CpuRange(first, count));
    }
    setup.rebound = true;
    setup.threads = count;
    setup.cpus = CpuRange(first, count);
  } else {
    setup.threads = have;
    int lo = -1, hi = -1;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &mask)) continue;
      if (lo < 0) lo = c;
      hi = c;
    }
    setup.cpus = hi - lo + 1 == have ? CpuRange(lo, have) : std::to_string(have) + " CPUs";
  }
  setup.thread_limit = std::make_shared<tbb::global_control>(
      tbb::global_control::max_allowed_parallelism, static_cast<size_t>(setup.threads));
  TF_ASSIGN_OR_RETURN(setup.comm, comm::MpiCommunicator::Create(*launch));
  return std::optional<RankSetup>(std::move(setup));
}

Status StartLiveness(RankSetup& setup, const std::string& out_dir,
                     std::chrono::milliseconds timeout) {
  const auto period = std::max(std::chrono::milliseconds(100), timeout / 10);
  // OUT/.ranks is made and written by tierflow: never through a link.
  TF_RETURN_IF_ERROR(
      comm::AgreeOnStatus(*setup.comm, CheckNoLinksUnder(out_dir, out_dir + "/.ranks")
                                           .WithContext("the ranks' heartbeat directory")));
  auto started = comm::Liveness::Start(out_dir + "/.ranks", setup.launch.rank,
                                       setup.launch.world_size, period, timeout);
  Status s = started.status();
  if (started.ok()) setup.liveness = std::move(started).value();
  TF_RETURN_IF_ERROR(comm::AgreeOnStatus(*setup.comm, s));
  TF_RETURN_IF_ERROR(setup.comm->Barrier());
  TF_RETURN_IF_ERROR(comm::AgreeOnStatus(*setup.comm, setup.liveness->CheckShared()));
  comm::Liveness* liveness = setup.liveness.get();
  setup.comm->set_peer_check([liveness] { return liveness->StalePeer(); }, period);
  return Status::Ok();
}

}  // namespace tierflow::cli
