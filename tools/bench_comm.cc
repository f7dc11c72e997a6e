// `tierflow bench comm`: tierflow's host collectives against MPI's own, run
// under a launcher (mpirun -np N tierflow bench comm); bench/comm_bench.h.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/comm_bench.h"
#include "comm/launch_env.h"
#include "common/units.h"
#include "io/json_util.h"
#include "plan/hardware_profile.h"
#ifdef TIERFLOW_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "comm/nccl_communicator.h"
#endif
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

struct CommFlags {
  std::vector<std::string> sizes;
  int iterations = 20;
  bool json = false;
  std::string profile;  // write the bus bandwidth into this hardware profile
  std::string backend = "mpi";
};

#ifdef TIERFLOW_HAVE_NCCL
// NCCL on device buffers: this rank's GPU is its local rank's; MPI
// bootstraps NCCL and times the ranks.
StatusOr<CommBenchResult> RunNccl(comm::MpiCommunicator& mpi, int local_rank,
                                  const CommBenchOptions& options) {
  TF_ASSIGN_OR_RETURN(std::unique_ptr<comm::NcclCommunicator> nccl,
                      comm::NcclCommunicator::Create(&mpi, local_rank));
  auto raw = [&](comm::RawOp op, const float* send, float* recv, size_t count) {
    return nccl->RawCollective(op, send, recv, count);
  };
  auto allocate = [](size_t count, const std::vector<float>& fill) -> StatusOr<CommBenchBuffers> {
    CommBenchBuffers b;
    for (std::shared_ptr<float>* p : {&b.send, &b.recv}) {
      void* d = nullptr;
      if (cudaError_t e = cudaMalloc(&d, count * sizeof(float)); e != cudaSuccess) {
        return OutOfMemoryError("bench comm: cudaMalloc of " + FormatBytes(count * 4) + ": " +
                                cudaGetErrorString(e));
      }
      p->reset(static_cast<float*>(d), [](float* q) { (void)cudaFree(q); });
    }
    if (cudaError_t e =
            cudaMemcpy(b.send.get(), fill.data(), count * sizeof(float), cudaMemcpyHostToDevice);
        e != cudaSuccess) {
      return InternalError(std::string("bench comm: filling the send buffer: ") +
                           cudaGetErrorString(e));
    }
    return b;
  };
  return RunCommBench(*nccl, mpi, raw, allocate, options);
}
#endif

Status Run(const CommFlags& f) {
  TF_ASSIGN_OR_RETURN(std::optional<comm::LaunchEnv> launch,
                      comm::DetectLaunch(comm::ProcessEnv()));
  if (!launch) {
    return FailedPreconditionError(
        "bench comm measures collectives between ranks, and this process was not started as "
        "one: run `mpirun -np 2 tierflow bench comm` (as root, with OMPI_ALLOW_RUN_AS_ROOT=1 "
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1), or srun under Slurm");
  }
  CommBenchOptions options;
  options.iterations = f.iterations;
  if (!f.sizes.empty()) {
    options.sizes.clear();
    for (const std::string& s : f.sizes) {
      TF_ASSIGN_OR_RETURN(uint64_t bytes, ParseByteSize(s));
      options.sizes.push_back(bytes);
    }
  }
  if (f.backend == "nccl" && !f.profile.empty()) {
    return InvalidArgumentError(
        "--profile records the host collectives the planner models (the engine's path); NCCL's "
        "figures are not used by it yet: drop --profile, or measure --backend mpi");
  }
#ifndef TIERFLOW_HAVE_NCCL
  if (f.backend == "nccl") {
    return FailedPreconditionError(
        "this tierflow was built without NCCL (it needs CUDA and NCCL at build time; the build "
        "says where it looked): use --backend mpi");
  }
#endif
  TF_ASSIGN_OR_RETURN(std::unique_ptr<comm::MpiCommunicator> c,
                      comm::MpiCommunicator::Create(*launch));
  StatusOr<CommBenchResult> measured = [&]() -> StatusOr<CommBenchResult> {
#ifdef TIERFLOW_HAVE_NCCL
    if (f.backend == "nccl") return RunNccl(*c, launch->local_rank, options);
#endif
    return RunCommBench(*c, options);
  }();
  TF_ASSIGN_OR_RETURN(CommBenchResult r, std::move(measured));
  if (c->rank() != 0) return Status::Ok();
  // Nodes: ranks over the ranks per node (the launcher's local size).
  const int nodes = (launch->world_size + launch->local_size - 1) / std::max(launch->local_size, 1);
  if (f.json || !f.profile.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const CommBenchRow& row : r.rows) {
      rows.push_back({{"op", row.op},
                      {"bytes", row.bytes},
                      {"seconds", row.seconds},
                      {"algbw_gb_per_second", row.algbw_gb_per_second},
                      {"busbw_gb_per_second", row.busbw_gb_per_second},
                      {"raw_seconds", row.raw_seconds},
                      {"raw_algbw_gb_per_second", row.raw_algbw_gb_per_second},
                      {"raw_busbw_gb_per_second", row.raw_busbw_gb_per_second},
                      {"ratio_to_raw", row.ratio_to_raw}});
    }
    nlohmann::json j = {{"backend", f.backend},
                        {"world_size", r.world_size},
                        {"nodes", nodes},
                        {"iterations", options.iterations},
                        {"rows", rows}};
    if (!f.profile.empty()) {
      TF_RETURN_IF_ERROR(WriteCommToProfileFile(f.profile, j));
      std::fprintf(stderr, "bench comm: wrote the %s bus bandwidth into %s\n",
                   nodes > 1 ? "between-node" : "within-node", f.profile.c_str());
    }
    if (f.json) {
      std::printf("%s\n", JsonOutput(j).c_str());
      return Status::Ok();
    }
  }
  const bool nccl = f.backend == "nccl";
  std::printf(
      "%s, %d ranks, fp32 sum, slowest rank's mean of %d calls\n"
      "(raw = %s own collective; ratio = raw time / tierflow time)\n\n",
      nccl ? "device collectives over NCCL" : "host collectives over MPI", r.world_size,
      options.iterations, nccl ? "NCCL's" : "MPI's");
  std::printf("%-15s %10s %11s %11s %11s %11s %7s\n", "op", "bytes", "algbw GB/s", "busbw GB/s",
              "raw algbw", "raw busbw", "ratio");
  for (const CommBenchRow& row : r.rows) {
    std::printf("%-15s %10s %11.2f %11.2f %11.2f %11.2f %7.2f\n", row.op.c_str(),
                FormatBytes(row.bytes).c_str(), row.algbw_gb_per_second, row.busbw_gb_per_second,
                row.raw_algbw_gb_per_second, row.raw_busbw_gb_per_second, row.ratio_to_raw);
  }
  return Status::Ok();
}

}  // namespace

void AddBenchComm(CLI::App& bench, int* exit_code) {
  auto f = std::make_shared<CommFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "comm", "Bus bandwidth of the host collectives (MPI) against MPI's own; run under mpirun");
  cmd->add_option("--size", f->sizes,
                  "Buffer size, repeatable (default 4KiB 64KiB 1MiB 16MiB 64MiB)")
      ->check(ByteSizeAtLeast(1));
  cmd->add_option("--iterations", f->iterations, "Timed calls per collective and size")
      ->capture_default_str()
      ->check(AtLeast(1));
  cmd->add_flag("--json", f->json, "Print one JSON object (rank 0)");
  cmd->add_option("--backend", f->backend,
                  "mpi: host buffers, against MPI's own collectives; nccl: device buffers (one GPU "
                  "per rank, by local rank), against NCCL's own (builds with NCCL only)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--profile", f->profile,
                  "Write the collectives' bus bandwidth (within one node, or between nodes when "
                  "the ranks span several) into this hardware profile, which `tierflow plan "
                  "--gpus-per-node/--nodes` reads; created when missing, other keys kept");
  cmd->callback([f, exit_code] {
    if (Status s = Run(*f); !s.ok()) {
      std::fprintf(stderr, "tierflow bench comm: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli
