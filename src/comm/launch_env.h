// Who started this process, and as which rank: read from the launcher's
// environment (mpirun/mpiexec of OpenMPI, or Slurm's srun), never guessed.
//
// A plain `tierflow train` has none of these variables and runs as today, as
// one process that never initialises MPI. Only a process that a launcher
// started as a rank gets a LaunchEnv, and with it a communicator.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tierflow/status.h"

namespace tierflow::comm {

// The largest world the checks accept: far above any machine this engine
// targets, low enough that rank arithmetic never overflows.
inline constexpr int kMaxWorldSize = 1 << 16;

struct LaunchEnv {
  std::string launcher;  // "mpirun" or "srun"
  int rank = 0;          // 0 .. world_size - 1
  int world_size = 1;
  int local_rank = 0;  // rank among this node's ranks: picks the device
  int local_size = 1;  // ranks on this node: they share its cores, RAM and NVMe
};

// Reads one environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

// The process environment (getenv).
EnvLookup ProcessEnv();

// The launch this environment describes, or nullopt for a process no
// launcher started (a plain command). OpenMPI's mpirun sets OMPI_COMM_WORLD_*;
// srun sets SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID and, since a batch
// script's own shell has SLURM_PROCID too, counts only with the process
// manager's PMIX_RANK or PMI_RANK beside them. A variable that is present but
// not a number in range, or ranks that contradict each other, are an error
// naming the variable: a rank that guessed would deadlock its peers.
StatusOr<std::optional<LaunchEnv>> DetectLaunch(const EnvLookup& env);

}  // namespace tierflow::comm
