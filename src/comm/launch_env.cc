#include "comm/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <string>

namespace tierflow::comm {
namespace {

// A variable's value as an integer in [lo, hi]; an error naming it otherwise.
StatusOr<int> ReadInt(const EnvLookup& env, std::string_view name, int lo, int hi) {
  const std::optional<std::string> text = env(name);
  if (!text) {
    return InvalidArgumentError(
        std::string(name) + " is not set, but the launcher sets it for every rank: " +
        "start tierflow through mpirun or srun, or unset the launcher's other variables");
  }
  int value = 0;
  const char* first = text->data();
  const char* last = first + text->size();
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last || value < lo || value > hi) {
    return InvalidArgumentError(std::string(name) + "='" + *text + "' is not an integer in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

Status CheckConsistent(const LaunchEnv& e) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError(e.launcher + " environment is inconsistent: " + what);
  };
  if (e.rank >= e.world_size) {
    return bad("rank " + std::to_string(e.rank) + " >= world size " + std::to_string(e.world_size));
  }
  if (e.local_size > e.world_size) {
    return bad("local size " + std::to_string(e.local_size) + " > world size " +
               std::to_string(e.world_size));
  }
  if (e.local_rank >= e.local_size) {
    return bad("local rank " + std::to_string(e.local_rank) + " >= local size " +
               std::to_string(e.local_size));
  }
  return Status();
}

StatusOr<LaunchEnv> ReadOpenMpi(const EnvLookup& env) {
  LaunchEnv e;
  e.launcher = "mpirun";
  TF_ASSIGN_OR_RETURN(e.world_size, ReadInt(env, "OMPI_COMM_WORLD_SIZE", 1, kMaxWorldSize));
  TF_ASSIGN_OR_RETURN(e.rank, ReadInt(env, "OMPI_COMM_WORLD_RANK", 0, kMaxWorldSize - 1));
  TF_ASSIGN_OR_RETURN(e.local_size, ReadInt(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxWorldSize));
  TF_ASSIGN_OR_RETURN(e.local_rank,
                      ReadInt(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxWorldSize - 1));
  TF_RETURN_IF_ERROR(CheckConsistent(e));
  return e;
}

// Ranks on this node: SLURM_NTASKS_PER_NODE when the job fixed it, else this
// node's entry (SLURM_NODEID) of the step's layout SLURM_STEP_TASKS_PER_NODE,
// "N" or "N(xK)" items separated by commas, e.g. "2(x3),1".
StatusOr<int> SlurmLocalSize(const EnvLookup& env, int world_size) {
  if (env("SLURM_NTASKS_PER_NODE")) {
    return ReadInt(env, "SLURM_NTASKS_PER_NODE", 1, world_size);
  }
  // "N" or "N(xK),M,...": this node is SLURM_NODEID's entry, expanded.
  const std::optional<std::string> layout = env("SLURM_STEP_TASKS_PER_NODE");
  if (!layout) {
    return InvalidArgumentError(
        "srun environment has neither SLURM_NTASKS_PER_NODE nor SLURM_STEP_TASKS_PER_NODE: "
        "cannot tell how many ranks share this node");
  }
  TF_ASSIGN_OR_RETURN(const int node_id, ReadInt(env, "SLURM_NODEID", 0, kMaxWorldSize - 1));
  int node = 0;
  std::string_view rest = *layout;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    int count = 0, repeat = 1;
    const size_t paren = item.find("(x");
    std::string_view count_text = item.substr(0, paren);
    auto [e1, ec1] =
        std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    bool ok = ec1 == std::errc() && e1 == count_text.data() + count_text.size() && count >= 1 &&
              count <= world_size;
    if (ok && paren != std::string_view::npos) {
      std::string_view rep = item.substr(paren + 2);
      ok = !rep.empty() && rep.back() == ')';
      if (ok) {
        rep.remove_suffix(1);
        auto [e2, ec2] = std::from_chars(rep.data(), rep.data() + rep.size(), repeat);
        ok = ec2 == std::errc() && e2 == rep.data() + rep.size() && repeat >= 1 &&
             repeat <= kMaxWorldSize;
      }
    }
    if (!ok) {
      return InvalidArgumentError("SLURM_STEP_TASKS_PER_NODE='" + *layout +
                                  "' is not a task layout such as '2(x3),1'");
    }
    if (node_id < node + repeat) return count;
    node += repeat;
  }
  return InvalidArgumentError("SLURM_NODEID=" + std::to_string(node_id) +
                              " is past SLURM_STEP_TASKS_PER_NODE='" + *layout + "'");
}

StatusOr<LaunchEnv> ReadSlurm(const EnvLookup& env) {
  LaunchEnv e;
  e.launcher = "srun";
  const char* ntasks = env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  TF_ASSIGN_OR_RETURN(e.world_size, ReadInt(env, ntasks, 1, kMaxWorldSize));
  TF_ASSIGN_OR_RETURN(e.rank, ReadInt(env, "SLURM_PROCID", 0, kMaxWorldSize - 1));
  TF_ASSIGN_OR_RETURN(e.local_rank, ReadInt(env, "SLURM_LOCALID", 0, kMaxWorldSize - 1));
  TF_ASSIGN_OR_RETURN(e.local_size, SlurmLocalSize(env, e.world_size));
  TF_RETURN_IF_ERROR(CheckConsistent(e));
  // The process manager's own rank must agree with Slurm's.
  const char* pm = env("PMIX_RANK") ? "PMIX_RANK" : "PMI_RANK";
  TF_ASSIGN_OR_RETURN(const int pm_rank, ReadInt(env, pm, 0, kMaxWorldSize - 1));
  if (pm_rank != e.rank) {
    return InvalidArgumentError(std::string("srun environment is inconsistent: ") + pm + "=" +
                                std::to_string(pm_rank) +
                                " but SLURM_PROCID=" + std::to_string(e.rank));
  }
  return e;
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());  // NOLINT(concurrency-mt-unsafe)
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

StatusOr<std::optional<LaunchEnv>> DetectLaunch(const EnvLookup& env) {
  if (env("OMPI_COMM_WORLD_SIZE") || env("OMPI_COMM_WORLD_RANK")) {
    TF_ASSIGN_OR_RETURN(LaunchEnv e, ReadOpenMpi(env));
    return std::optional<LaunchEnv>(e);
  }
  if (env("SLURM_PROCID") && (env("PMIX_RANK") || env("PMI_RANK"))) {
    TF_ASSIGN_OR_RETURN(LaunchEnv e, ReadSlurm(env));
    return std::optional<LaunchEnv>(e);
  }
  return std::optional<LaunchEnv>();
}

}  // namespace tierflow::comm
