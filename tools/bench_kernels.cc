// `tierflow bench kernels`: achieved TFLOP/s (and GB/s) of the step's
// heaviest kernels, each against the device's peak (bench/kernel_bench.h).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/kernel_bench.h"
#include "io/json_util.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

struct KernelsFlags {
  DeviceFlags device;
  KernelBenchOptions bench;
  bool json = false;
};

void Print(const KernelBenchResult& r, bool json) {
  if (json) {
    nlohmann::json j;
    j["device"] = r.device;
    j["peak_source"] = r.peak_source;
    j["peak_tflops"] = r.peak_tflops;
    j["peak_gb_per_s"] = r.peak_gb_per_s;
    for (const KernelFigure& f : r.figures) {
      j["kernels"].push_back({{"name", f.name},
                              {"shape", f.shape},
                              {"seconds", f.seconds},
                              {"tflops", f.tflops},
                              {"gb_per_s", f.gb_per_s},
                              {"bound", f.memory_bound ? "memory" : "compute"},
                              {"ratio_to_peak", f.ratio}});
    }
    std::printf("%s\n", JsonOutput(j).c_str());
    return;
  }
  std::printf("device: %s\npeak: %.1f TFLOP/s, %.0f GB/s (%s)\n\n", r.device.c_str(), r.peak_tflops,
              r.peak_gb_per_s, r.peak_source.c_str());
  std::printf("%-26s %12s %10s %10s %8s  %s\n", "kernel", "seconds", "TFLOP/s", "GB/s", "ratio",
              "shape");
  for (const KernelFigure& f : r.figures) {
    std::printf("%-26s %12.6f %10.2f %10.1f %8.3f  %s\n", f.name.c_str(), f.seconds, f.tflops,
                f.gb_per_s, f.ratio, f.shape.c_str());
  }
}

}  // namespace

void AddBenchKernels(CLI::App& bench, int* exit_code) {
  auto f = std::make_shared<KernelsFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "kernels",
      "Achieved TFLOP/s of a bf16 GEMM, causal attention (forward, backward), the LM head chunk, "
      "and GB/s of every other kernel of the Llama and GPT-2 blocks and the loss, each against "
      "the device's peak (compute: the fastest GEMM; bandwidth: a device copy in the same run)");
  f->device.Add(*cmd);
  cmd->add_flag("--small", f->bench.small, "Every dimension 1/16 (a quick look; tests)");
  cmd->add_option("--iterations", f->bench.iterations, "Timed runs per kernel (the best counts)")
      ->capture_default_str()
      ->check(AtLeast(1));
  cmd->add_flag("--json", f->json, "Print one JSON object");
  cmd->callback([f, exit_code] {
    // The full shapes hold up to about 2.3 GiB at once (the LM head's fp32
    // weight gradient and its inputs): more than the CPU device's default.
    if (f->device.memory.empty() && f->device.kind == "cpu" && !f->bench.small) {
      f->device.memory = "4GiB";
    }
    std::unique_ptr<Device> device = f->device.CreateOrReport();
    if (!device) {
      *exit_code = 1;
      return;
    }
    auto r = RunKernelBench(*device, f->bench);
    if (!r.ok()) {
      std::fprintf(stderr, "tierflow bench kernels: %s\n", r.status().ToString().c_str());
      *exit_code = 1;
      return;
    }
    Print(*r, f->json);
  });
}

}  // namespace tierflow::cli
