// `tierflow bench copy`: H2D, D2H and D2D bandwidth on the selected device,
// with pinned and pageable host memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/units.h"
#include "io/json_util.h"
#include "tools/commands.h"
#include "tools/device_flags.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

struct CopyBenchOptions {
  DeviceFlags device;
  std::string size = "256MiB";
  int iterations = 5;
  bool json = false;
};

struct CopyResult {
  std::string direction;    // h2d, d2h, d2d
  std::string host_memory;  // pinned, pageable, - (d2d)
  double best_gb_per_second = 0;
  double median_gb_per_second = 0;
};

using Clock = std::chrono::steady_clock;

// Times `iterations` runs of `enqueue` (each followed by a stream sync) and
// returns best and median GB/s for `num_bytes` moved per run.
StatusOr<CopyResult> TimeCopies(Stream& stream, size_t num_bytes, int iterations,
                                const std::function<Status()>& enqueue) {
  TF_RETURN_IF_ERROR(enqueue());  // warm-up: first touch, driver setup
  TF_RETURN_IF_ERROR(stream.Synchronize());
  std::vector<double> rates;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    TF_RETURN_IF_ERROR(enqueue());
    TF_RETURN_IF_ERROR(stream.Synchronize());
    double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(num_bytes) / seconds / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  CopyResult r;
  r.best_gb_per_second = rates.back();
  r.median_gb_per_second = rates[rates.size() / 2];
  return r;
}

Status RunCopyBench(const CopyBenchOptions& opt, Device& device) {
  TF_ASSIGN_OR_RETURN(uint64_t num_bytes, ParseByteSize(opt.size));
  if (num_bytes == 0) return InvalidArgumentError("--size must be positive");
  if (opt.iterations < 1) return InvalidArgumentError("--iterations must be at least 1");
  TF_ASSIGN_OR_RETURN(auto stream, device.CreateStream("bench-copy"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dev_a, device.Allocate(num_bytes, "bench copy source"));
  TF_ASSIGN_OR_RETURN(DeviceBuffer dev_b, device.Allocate(num_bytes, "bench copy destination"));
  TF_ASSIGN_OR_RETURN(PinnedBuffer pinned, device.AllocatePinned(num_bytes, "bench copy pinned"));
  std::unique_ptr<char[]> pageable(new char[num_bytes]);
  std::memset(pageable.get(), 1, num_bytes);
  std::memset(pinned.data(), 1, num_bytes);
  TF_RETURN_IF_ERROR(stream->Memset(dev_a.data(), 0, num_bytes));
  TF_RETURN_IF_ERROR(stream->Memset(dev_b.data(), 0, num_bytes));

  struct Case {
    const char* direction;
    const char* host_memory;
    std::function<Status()> enqueue;
  };
  Stream& s = *stream;
  std::vector<Case> cases = {
      {"h2d", "pinned", [&] { return s.CopyHostToDevice(dev_a.data(), pinned.data(), num_bytes); }},
      {"h2d", "pageable",
       [&] { return s.CopyHostToDevice(dev_a.data(), pageable.get(), num_bytes); }},
      {"d2h", "pinned", [&] { return s.CopyDeviceToHost(pinned.data(), dev_a.data(), num_bytes); }},
      {"d2h", "pageable",
       [&] { return s.CopyDeviceToHost(pageable.get(), dev_a.data(), num_bytes); }},
      {"d2d", "-", [&] { return s.CopyDeviceToDevice(dev_b.data(), dev_a.data(), num_bytes); }},
  };
  std::vector<CopyResult> results;
  for (const Case& c : cases) {
    TF_ASSIGN_OR_RETURN(CopyResult r, TimeCopies(s, num_bytes, opt.iterations, c.enqueue));
    r.direction = c.direction;
    r.host_memory = c.host_memory;
    results.push_back(r);
  }

  if (opt.json) {
    nlohmann::json j;
    j["device"] = device.description();
    j["size_bytes"] = num_bytes;
    j["iterations"] = opt.iterations;
    for (const CopyResult& r : results) {
      j["results"].push_back({{"direction", r.direction},
                              {"host_memory", r.host_memory},
                              {"best_gb_per_second", r.best_gb_per_second},
                              {"median_gb_per_second", r.median_gb_per_second}});
    }
    std::printf("%s\n", JsonOutput(j).c_str());
  } else {
    std::printf("device: %s\ncopy size: %s, %d timed iterations each\n\n",
                device.description().c_str(), FormatBytes(num_bytes).c_str(), opt.iterations);
    std::printf("%-6s %-10s %12s %14s\n", "copy", "host mem", "best GB/s", "median GB/s");
    for (const CopyResult& r : results) {
      std::printf("%-6s %-10s %12.2f %14.2f\n", r.direction.c_str(), r.host_memory.c_str(),
                  r.best_gb_per_second, r.median_gb_per_second);
    }
  }
  return Status::Ok();
}

}  // namespace

void AddBenchCopy(CLI::App& bench, int* exit_code) {
  auto opt = std::make_shared<CopyBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "copy", "Host<->device and device<->device copy bandwidth, pinned and pageable");
  opt->device.Add(*cmd);
  cmd->add_option("--size", opt->size, "Bytes per copy, e.g. 256MiB")
      ->check(ByteSizeAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--iterations", opt->iterations, "Timed copies per case")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of a table");
  cmd->callback([opt, exit_code] {
    std::unique_ptr<Device> device = opt->device.CreateOrReport();
    if (!device) {
      *exit_code = 1;
      return;
    }
    Status s = RunCopyBench(*opt, *device);
    if (!s.ok()) {
      std::fprintf(stderr, "tierflow bench copy: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace tierflow::cli
