// `tierflow train` as one of several data-parallel ranks: starting the
// ranks (--nproc-per-node, through mpirun), and each rank's own setup (its
// communicator, its share of the node's cores).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include "comm/launch_env.h"
#include "comm/liveness.h"
#include "comm/mpi_communicator.h"
#include "tierflow/status.h"

namespace tierflow::cli {

// Runs `mpirun -np N --bind-to none --stdin none [--oversubscribe] <this
// binary> <args>` and waits for it; returns its exit status. The ranks share
// the node's cores as SetUpRank below gives them. As root, OpenMPI's two
// consent variables are set (it refuses root otherwise). `args` are the
// command line after the program name, without --nproc-per-node.
//
// Signals: mpirun kills its ranks on SIGINT/SIGTERM, so mpirun runs in a
// process group of its own (Ctrl-C reaches only this process) and the
// first SIGINT/SIGTERM here becomes SIGUSR1 to mpirun, which OpenMPI
// forwards to every rank: they agree on a step, save one checkpoint and
// exit. A second becomes SIGTERM (mpirun ends the job), a third SIGKILLs
// mpirun's group. Errors: mpirun could not be started.
StatusOr<int> RunRanksUnderMpirun(int nproc, const std::vector<std::string>& args);

// The command line after the program name, less --nproc-per-node and its value.
std::vector<std::string> WithoutNprocPerNode(const std::vector<std::string>& args);

struct RankSetup {
  comm::LaunchEnv launch;
  std::unique_ptr<comm::MpiCommunicator> comm;
  int threads = 1;       // optimizer (oneTBB) threads of this rank
  std::string cpus;      // the CPUs it runs on, e.g. "0-7"
  bool rebound = false;  // the launcher's binding was replaced by the share
  std::shared_ptr<tbb::global_control> thread_limit;  // keeps oneTBB at `threads`
  std::unique_ptr<comm::Liveness> liveness;           // StartLiveness
};

// Started by mpirun/srun as one of several ranks: MPI up, and this rank on
// its share of the node's online CPUs (local rank r of n takes CPUs
// [r*k, (r+1)*k), k = max(1, cpus / n)) unless the launcher bound it to a
// set of its own of at least that many (a user's own --map-by or
// --cpus-per-task is kept; one core, or no binding at all, is replaced).
// nullopt: a plain process (no launcher, or a world of 1).
StatusOr<std::optional<RankSetup>> SetUpRank();

// Every rank beats into OUT_DIR/.ranks (comm/liveness.h); the ranks check
// that they all see each other's beat there (the output directory must be
// shared), and from then on a rank waiting in a collective ends the job,
// naming the peer, when that peer has not beaten for `timeout`. A
// collective: every rank calls it.
Status StartLiveness(RankSetup& setup, const std::string& out_dir,
                     std::chrono::milliseconds timeout);

}  // namespace tierflow::cli
