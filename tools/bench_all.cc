// `tierflow bench all --out PROFILE.json`: the copy/PCIe, CPU optimizer and
// NVMe figures of this machine in one hardware profile, which `tierflow
// plan --profile` reads. Each bench runs as its own `tierflow bench X
// --json` process (this binary), so their memory is returned between them
// and each keeps its own flags and limits; the profile also keeps their raw
// outputs, and the NVMe store settings `bench nvme --tune` chose
// ("nvme_store", which `tierflow train --profile` uses). Sizes default to a
// run of about a minute; flags change them.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/units.h"
#include "io/file_system.h"
#include "io/json_util.h"
#include "plan/hardware_profile.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace tierflow::cli {
namespace {

struct BenchAllOptions {
  std::string out;
  std::string device = "auto";
  std::string copy_size = "64MiB";
  std::string adam_params = "16Mi";
  std::vector<std::string> nvme_paths;
  std::string nvme_size = "512MiB";
  std::string nvme_sweep_size = "128MiB";
  bool nvme_buffered = false;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs this binary with `args` and parses its stdout as JSON.
StatusOr<nlohmann::json> RunSelf(const std::vector<std::string>& args) {
  std::string cmd = "/proc/self/exe";
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) cmd = std::string(exe, static_cast<size_t>(n));
  cmd = Quote(cmd);
  for (const auto& a : args) cmd += " " + Quote(a);
  std::fprintf(stderr, "running: %s\n", cmd.c_str());
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return ErrnoStatus(errno, "run " + cmd);
  std::string text;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, got);
  const int status = ::pclose(p);
  if (status != 0) {
    return InternalError("`" + cmd + "` failed (exit status " +
                         std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                         "); run it alone to see why");
  }
  // Our own child's output, but parsed like any outside text: depth-limited.
  nlohmann::json j;
  if (Status parsed = ParseJsonStrict(text, "`" + cmd + "` output", &j); !parsed.ok()) {
    return InternalError(parsed.message() + "; run it alone to see why");
  }
  return j;
}

Status RunBenchAll(const BenchAllOptions& o) {
  TF_ASSIGN_OR_RETURN(nlohmann::json copy, RunSelf({"bench", "copy", "--json", "--device", o.device,
                                                    "--size", o.copy_size}));
  TF_ASSIGN_OR_RETURN(nlohmann::json adam,
                      RunSelf({"bench", "adam", "--json", "--params", o.adam_params}));
  nlohmann::json nvme;
  if (o.nvme_paths.empty()) {
    std::fprintf(stderr,
                 "no --nvme-path given: NVMe not measured (the planner keeps its NVMe defaults)\n");
  } else {
    // --tune: the profile also gets the store settings the drive suits
    // (nvme_store), which `tierflow train --profile` builds its NVMe tier with.
    std::vector<std::string> args = {"bench",     "nvme",   "--json",       "--size",
                                     o.nvme_size, "--tune", "--sweep-size", o.nvme_sweep_size};
    for (const auto& p : o.nvme_paths) {
      args.push_back("--path");
      args.push_back(p);
    }
    if (o.nvme_buffered) args.push_back("--nvme-buffered");
    TF_ASSIGN_OR_RETURN(nvme, RunSelf(args));
  }
  TF_ASSIGN_OR_RETURN(nlohmann::json profile, MakeHardwareProfile(copy, adam, nvme));
  // The CPU optimizer's instruction-set level behind adam_params_per_second
  // (the planner ignores it; people comparing profiles should not).
  if (!adam.contains("isa") || !adam["isa"].is_string()) {
    return InternalError("bench adam output has no 'isa'; run `tierflow bench adam --json`");
  }
  profile["cpu_isa"] = adam["isa"];
  // When, so that plan and train can say how old the rates they use are.
  profile["measured_unix"] = static_cast<int64_t>(std::time(nullptr));
  std::string out = o.out;
  if (out.empty()) {
    // The default place, where plan and train look when not given --profile.
    TF_ASSIGN_OR_RETURN(out, DefaultProfilePath());
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(out).parent_path(), ec);
    if (ec) {
      return IoError("create the directory of the default profile " + out + ": " + ec.message() +
                     "; pass --out FILE");
    }
  }
  TF_RETURN_IF_ERROR(WriteStringToFileAtomically(nullptr, out, JsonOutput(profile) + "\n"));
  std::printf("wrote %s\n", out.c_str());
  for (const char* key :
       {"h2d_gb_per_second", "d2h_gb_per_second", "host_memory_gb_per_second",
        "adam_params_per_second", "nvme_read_gb_per_second", "nvme_write_gb_per_second"}) {
    if (profile.contains(key)) std::printf("  %-28s %.4g\n", key, profile[key].get<double>());
  }
  if (profile.contains("nvme_store")) {
    const nlohmann::json& n = profile["nvme_store"];
    std::printf("  %-28s %s blocks, queue depth %u, %u ring(s), %u in flight\n", "nvme_store",
                FormatBytes(n["block_size_bytes"].get<uint64_t>()).c_str(),
                n["queue_depth"].get<unsigned>(), n["num_rings"].get<unsigned>(),
                n["in_flight"].get<unsigned>());
  }
  std::printf("  %-28s %s\n", "cpu_isa", profile["cpu_isa"].get<std::string>().c_str());
  return Status::Ok();
}

}  // namespace

void AddBenchAll(CLI::App& bench, int* exit_code) {
  auto opt = std::make_shared<BenchAllOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "all",
      "Copy, CPU Adam and NVMe benches in one hardware profile, which `tierflow plan` and "
      "`tierflow train` use");
  cmd->add_option("--out", opt->out,
                  "Profile to write (JSON; default $XDG_CACHE_HOME/tierflow/profile.json, else "
                  "~/.cache/tierflow/profile.json, where plan and train look for it)");
  cmd->add_option("--device", opt->device, "Device for the copy bench: auto, cpu, cuda")
      ->capture_default_str();
  cmd->add_option("--copy-size", opt->copy_size, "Bytes per copy")
      ->check(ByteSizeAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--adam-params", opt->adam_params,
                  std::string("Parameters per Adam step (") + kCountSuffixHelp + ")")
      ->check(CountAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--nvme-path", opt->nvme_paths,
                  "Directory on an NVMe drive (repeat per drive); without it NVMe is skipped");
  cmd->add_option("--nvme-size", opt->nvme_size, "Bytes written and read by the NVMe bench")
      ->check(ByteSizeAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--nvme-sweep-size", opt->nvme_sweep_size,
                  "Bytes written and read at each point of the NVMe tune sweep")
      ->check(ByteSizeAtLeast(1))
      ->capture_default_str();
  cmd->add_flag("--nvme-buffered", opt->nvme_buffered,
                "Page-cache I/O (file systems without O_DIRECT)");
  cmd->callback([opt, exit_code] {
    Status s = RunBenchAll(*opt);
    if (!s.ok()) std::fprintf(stderr, "tierflow bench all: %s\n", s.ToString().c_str());
    *exit_code = s.ok() ? 0 : 1;
  });
}

}  // namespace tierflow::cli
