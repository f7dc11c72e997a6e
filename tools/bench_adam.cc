// `tierflow bench adam`: the CPU AdamW step against this machine's memory
// bandwidth and against a peer-shaped AdamW, measured in the same run on the
// same buffers (src/bench/adam_bench.h says how).
//
// The limit is the faster shape of StreamProbe (src/optim/stream_probe.h):
// the same streams, dtypes and in-place updates as the step, with one add
// per stream instead of Adam's arithmetic. The peer is AdamPeerStep
// (src/bench/adam_peer.h), the step as DeepSpeed's cpu_adam shapes it. The
// step is memory-bound, so ratio_to_limit near 1 means the kernel leaves
// nothing on the table, and ratio_to_peer >= 1 that no straightforward
// unrolled-intrinsics loop beats it.
#include <tbb/info.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/adam_bench.h"
#include "common/cpu_isa.h"
#include "common/units.h"
#include "io/json_util.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

struct AdamBenchFlags {
  std::string params = "64Mi";
  std::string threads = "0";
  std::string grad_dtype = "f32";
  std::string out_dtype = "none";
  std::string isa;  // empty: SelectedIsa() (TIERFLOW_ISA or the best)
  int iterations = 10;
  int rounds = 3;
  bool sweep = false;
  bool json = false;
};

std::string SupportedList() {
  std::string s;
  for (Isa i : SupportedIsas()) s += (s.empty() ? "" : ", ") + std::string(IsaName(i));
  return s;
}

// The step's levels: --isa, else (with --sweep) every level the CPU has
// unless TIERFLOW_ISA forces one, else SelectedIsa().
StatusOr<std::vector<Isa>> StepLevels(const AdamBenchFlags& f) {
  if (!f.isa.empty()) {
    StatusOr<Isa> isa = ParseIsa(f.isa);
    if (!isa.ok()) return isa.status().WithContext("--isa");
    if (!CpuSupportsIsa(*isa)) {
      return InvalidArgumentError("--isa " + f.isa + ": this CPU lacks it; it runs " +
                                  SupportedList());
    }
    return std::vector<Isa>{*isa};
  }
  if (f.sweep && std::getenv("TIERFLOW_ISA") == nullptr) return SupportedIsas();
  TF_ASSIGN_OR_RETURN(Isa isa, SelectedIsa());
  return std::vector<Isa>{isa};
}

StatusOr<std::vector<AdamBenchCase>> Cases(const AdamBenchFlags& f) {
  TF_ASSIGN_OR_RETURN(ThreadRange threads,
                      ParseThreadRange(f.threads, tbb::info::default_concurrency()));
  TF_ASSIGN_OR_RETURN(std::vector<Isa> levels, StepLevels(f));
  std::vector<DType> grads;
  std::vector<std::optional<DType>> outs;
  if (f.sweep) {
    grads = {DType::kF32, DType::kBF16, DType::kF16};
    outs = {std::nullopt, DType::kF32, DType::kBF16, DType::kF16};
  } else {
    StatusOr<DType> grad = ParseDType(f.grad_dtype);
    if (!grad.ok()) return grad.status().WithContext("--grad-dtype");
    grads = {*grad};
    if (f.out_dtype == "none") {
      outs = {std::nullopt};
    } else {
      StatusOr<DType> out = ParseDType(f.out_dtype);
      if (!out.ok()) {
        return InvalidArgumentError("--out-dtype '" + f.out_dtype +
                                    "': use none, f32, bf16 or f16");
      }
      outs = {*out};
    }
  }
  std::vector<AdamBenchCase> cases;
  for (int t = threads.first; t <= threads.last; ++t) {
    for (Isa isa : levels) {
      for (DType g : grads) {
        for (const auto& o : outs) cases.push_back({t, isa, g, o});
      }
    }
  }
  return cases;
}

std::string OutName(const AdamBenchCase& c) {
  return c.out_dtype ? std::string(DTypeName(*c.out_dtype)) : "none";
}

nlohmann::json OrNull(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// One case's figures, as JSON keys. params_per_second and
// bandwidth_limit_gb_per_second are what `bench all`'s profile reads.
void AddResultKeys(const AdamBenchResult& r, nlohmann::json* j) {
  const double bytes = static_cast<double>(r.bytes_per_param);
  (*j)["threads"] = r.what.threads;
  (*j)["isa"] = IsaName(r.what.isa);
  (*j)["grad_dtype"] = DTypeName(r.what.grad_dtype);
  (*j)["out_dtype"] = OutName(r.what);
  (*j)["bytes_per_param"] = r.bytes_per_param;
  (*j)["params_per_second"] = r.step_params_per_second;
  (*j)["gb_per_second"] = r.step_params_per_second * bytes / 1e9;
  (*j)["limit_params_per_second"] = r.limit_params_per_second;
  (*j)["bandwidth_limit_gb_per_second"] = r.limit_params_per_second * bytes / 1e9;
  (*j)["limit_probe"] = ProbeShapeName(r.limit_shape);
  nlohmann::json probes = nlohmann::json::object();
  for (ProbeShape shape : kProbeShapes) {
    const double rate = r.probe_params_per_second[static_cast<int>(shape)];
    probes[std::string(ProbeShapeName(shape))] = {{"params_per_second", rate},
                                                  {"gb_per_second", rate * bytes / 1e9}};
  }
  (*j)["probes"] = probes;
  (*j)["peer_params_per_second"] = OrNull(r.peer_params_per_second);
  (*j)["ratio_to_limit"] = r.ratio_to_limit;
  (*j)["ratio_to_peer"] = OrNull(r.ratio_to_peer);
  (*j)["peer_ratio_to_limit"] = OrNull(r.peer_ratio_to_limit);
}

std::string PeerName(const AdamBenchReport& report) {
  return report.peer_isa ? std::string(IsaName(*report.peer_isa)) : "none (no AVX2/AVX-512)";
}

void PrintTable(const AdamBenchFlags& f, uint64_t n, const AdamBenchReport& report) {
  std::printf(
      "CPU AdamW step, %llu params, median of %d rounds (each the best of %d runs); probe %s, "
      "peer %s\n\n",
      static_cast<unsigned long long>(n), f.rounds, f.iterations,
      std::string(IsaName(report.probe_isa)).c_str(), PeerName(report).c_str());
  std::printf("%7s %-8s %-5s %-4s %10s %10s %10s %9s %9s %11s %10s %8s %8s\n", "threads", "isa",
              "grads", "out", "step Mp/s", "peer Mp/s", "limit Mp/s", "blocked", "static",
              "interleaved", "limit GB/s", "to limit", "to peer");
  for (const AdamBenchResult& r : report.results) {
    const auto mp = [](double rate) { return rate / 1e6; };
    char peer[32] = "-", to_peer[32] = "-";
    if (r.peer_params_per_second) {
      std::snprintf(peer, sizeof(peer), "%.1f", mp(*r.peer_params_per_second));
      std::snprintf(to_peer, sizeof(to_peer), "%.3f", *r.ratio_to_peer);
    }
    std::printf("%7d %-8s %-5s %-4s %10.1f %10s %10.1f %9.1f %9.1f %11.1f %10.2f %8.3f %8s\n",
                r.what.threads, std::string(IsaName(r.what.isa)).c_str(),
                std::string(DTypeName(r.what.grad_dtype)).c_str(), OutName(r.what).c_str(),
                mp(r.step_params_per_second), peer, mp(r.limit_params_per_second),
                mp(r.probe_params_per_second[0]), mp(r.probe_params_per_second[1]),
                mp(r.probe_params_per_second[2]),
                r.limit_params_per_second * static_cast<double>(r.bytes_per_param) / 1e9,
                r.ratio_to_limit, to_peer);
  }
}

void PrintOne(const AdamBenchFlags& f, uint64_t n, const AdamBenchReport& report) {
  const AdamBenchResult& r = report.results.front();
  const double bytes = static_cast<double>(r.bytes_per_param);
  std::printf(
      "CPU AdamW step: %llu params, grads %s, out %s, %d threads, step isa %s\n"
      "traffic %zu bytes/param (fp32 params, exp_avg, exp_avg_sq read+written; grads read%s); "
      "median of %d rounds, each the best of %d runs\n\n",
      static_cast<unsigned long long>(n), std::string(DTypeName(r.what.grad_dtype)).c_str(),
      OutName(r.what).c_str(), r.what.threads, std::string(IsaName(r.what.isa)).c_str(),
      r.bytes_per_param, r.what.out_dtype ? "; out written" : "", f.rounds, f.iterations);
  std::printf("%-40s %12s %9s %9s\n", "kernel", "Mparams/s", "GB/s", "of limit");
  for (ProbeShape shape : kProbeShapes) {
    const double rate = r.probe_params_per_second[static_cast<int>(shape)];
    const std::string name = "probe, " + std::string(ProbeShapeName(shape)) + " (" +
                             std::string(IsaName(report.probe_isa)) + ")";
    std::printf("%-40s %12.1f %9.2f %9.3f\n", name.c_str(), rate / 1e6, rate * bytes / 1e9,
                rate / r.limit_params_per_second);
  }
  std::printf("%-40s %12.1f %9.2f %9s\n", "bandwidth limit (faster probe per round)",
              r.limit_params_per_second / 1e6, r.limit_params_per_second * bytes / 1e9, "1.000");
  if (r.peer_params_per_second) {
    const std::string name = "peer AdamW (DeepSpeed-shaped, " + PeerName(report) + ")";
    std::printf("%-40s %12.1f %9.2f %9.3f\n", name.c_str(), *r.peer_params_per_second / 1e6,
                *r.peer_params_per_second * bytes / 1e9, *r.peer_ratio_to_limit);
  }
  const std::string step = "AdamStep (" + std::string(IsaName(r.what.isa)) + ")";
  std::printf("%-40s %12.1f %9.2f %9.3f\n", step.c_str(), r.step_params_per_second / 1e6,
              r.step_params_per_second * bytes / 1e9, r.ratio_to_limit);
  if (r.ratio_to_peer) std::printf("\nstep / peer: %.3f\n", *r.ratio_to_peer);
}

Status Run(const AdamBenchFlags& f) {
  StatusOr<uint64_t> params = ParseCount(f.params);
  if (!params.ok()) return params.status().WithContext("--params");
  TF_ASSIGN_OR_RETURN(std::vector<AdamBenchCase> cases, Cases(f));
  AdamBenchOptions options;
  options.params = *params;
  options.iterations = f.iterations;
  options.rounds = f.rounds;
  TF_ASSIGN_OR_RETURN(AdamBenchReport report, RunAdamBench(options, cases));
  // A sweep or a --threads range prints rows, even when only one case results.
  const bool one = !f.sweep && f.threads.find("..") == std::string::npos;
  if (f.json) {
    nlohmann::json j;
    j["optimizer"] = "adamw";
    j["params"] = options.params;
    j["iterations"] = options.iterations;
    j["rounds"] = options.rounds;
    j["probe_isa"] = IsaName(report.probe_isa);
    j["peer_isa"] =
        report.peer_isa ? nlohmann::json(IsaName(*report.peer_isa)) : nlohmann::json(nullptr);
    if (one) {
      AddResultKeys(report.results.front(), &j);
    } else {
      j["results"] = nlohmann::json::array();
      for (const AdamBenchResult& r : report.results) {
        nlohmann::json row;
        AddResultKeys(r, &row);
        j["results"].push_back(row);
      }
    }
    std::printf("%s\n", JsonOutput(j).c_str());
  } else if (one) {
    PrintOne(f, options.params, report);
  } else {
    PrintTable(f, options.params, report);
  }
  return Status::Ok();
}

}  // namespace

void AddBenchAdam(CLI::App& bench, int* exit_code) {
  auto f = std::make_shared<AdamBenchFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "adam",
      "CPU AdamW step throughput against this machine's memory bandwidth and a peer-shaped loop");
  cmd->add_option("--params", f->params,
                  std::string("Parameters per step, e.g. 64M or 1e8 (") + kCountSuffixHelp + ")")
      ->check(CountAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--threads", f->threads,
                  "oneTBB threads for probe, peer and step: N, 0 = all cores, or a range A..B "
                  "(one row per count: the scaling table)")
      ->capture_default_str();
  CLI::Option* grad =
      cmd->add_option("--grad-dtype", f->grad_dtype, "Gradient dtype: f32, bf16, f16")
          ->capture_default_str();
  CLI::Option* out =
      cmd->add_option("--out-dtype", f->out_dtype,
                      "Dtype of the updated-weights copy for the device: none, f32, bf16, f16")
          ->capture_default_str();
  cmd->add_option("--isa", f->isa,
                  "Instruction-set level of the step: baseline, avx2, avx512 (default: "
                  "TIERFLOW_ISA, else the best this CPU runs; with --sweep: every level unless "
                  "TIERFLOW_ISA is set)");
  cmd->add_option("--iterations", f->iterations,
                  "Timed runs of each kernel per round; a round keeps the best")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--rounds", f->rounds, "Rounds; the figures are medians over rounds")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_flag("--sweep", f->sweep,
                "Every grad dtype (f32, bf16, f16) x out dtype (none, f32, bf16, f16) on every "
                "level the CPU runs, as one table")
      ->excludes(grad)
      ->excludes(out);
  cmd->add_flag("--json", f->json, "Print one JSON object instead of a table");
  cmd->callback([f, exit_code] {
    Status s = Run(*f);
    if (!s.ok()) {
      std::fprintf(stderr, "tierflow bench adam: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli
