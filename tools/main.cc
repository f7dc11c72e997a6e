// The `tierflow` command: train, plan, bench, tier and tokenize subcommands.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "common/cpu_isa.h"
#include "common/printable.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

#ifndef TIERFLOW_VERSION
#define TIERFLOW_VERSION "0.0.0"
#endif

namespace {
// Exit status of a command line that is refused before anything runs: a
// flag's value, a config file, TIERFLOW_ISA.
constexpr int kExitUsage = 2;
// Thrown from the parse-complete callback to end the command with kExitUsage.
struct UsageError {
  std::string message;
};
}  // namespace

namespace tierflow::cli {
namespace {
std::vector<std::string>& Args() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace
void SetCommandLine(int argc, char** argv) { Args().assign(argv + 1, argv + argc); }
const std::vector<std::string>& CommandLineArgs() { return Args(); }
}  // namespace tierflow::cli

int main(int argc, char** argv) {
  tierflow::cli::SetCommandLine(argc, argv);
  CLI::App app{
      "tierflow: fine-tune transformer models larger than one GPU, with optimizer state "
      "offloaded to host RAM and NVMe"};
  app.set_version_flag("--version", std::string("tierflow ") + TIERFLOW_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;

  tierflow::cli::AddTrain(app, &exit_code);
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Measure this machine: copy/PCIe bandwidth, CPU Adam, NVMe throughput, device kernels, "
      "tokenizers");
  bench->require_subcommand(1);
  tierflow::cli::AddBenchCopy(*bench, &exit_code);
  tierflow::cli::AddBenchAdam(*bench, &exit_code);
  tierflow::cli::AddBenchNvme(*bench, &exit_code);
  tierflow::cli::AddBenchEngine(*bench, &exit_code);
  tierflow::cli::AddBenchAll(*bench, &exit_code);
  tierflow::cli::AddBenchKernels(*bench, &exit_code);
  tierflow::cli::AddBenchTokenizer(*bench, &exit_code);
  tierflow::cli::AddBenchComm(*bench, &exit_code);
  tierflow::cli::AddPlan(app, &exit_code);
  tierflow::cli::AddTier(app, &exit_code);
  tierflow::cli::AddTokenize(app, &exit_code);

  // Every numeric flag says which values it takes (tools/flag_checks.h); one
  // that does not is a bug caught by any run of the binary, not a flag that
  // silently takes NaN or -4.
  if (const auto unchecked = tierflow::cli::UncheckedNumericFlags(app); !unchecked.empty()) {
    std::string names;
    for (const std::string& n : unchecked) names += "\n  " + n;
    std::fprintf(stderr,
                 "tierflow: internal error: numeric flags without a range check "
                 "(tools/flag_checks.h):%s\n",
                 names.c_str());
    return 70;
  }
  // The instruction-set level of the host loops (common/cpu_isa.h), chosen
  // once: an unknown TIERFLOW_ISA, or a level this CPU cannot run, stops a
  // command with the reason before it runs (never an illegal instruction
  // later). Checked once the command line is parsed, so --help and
  // --version answer whatever the variable says.
  app.parse_complete_callback([] {
    if (const auto isa = tierflow::SelectedIsa(); !isa.ok())
      throw UsageError{isa.status().message()};
  });

  // The one top-level handler: library code reports failures as Status, so an
  // exception here is a bug or an allocation that failed; either way the user
  // gets one clear line and an exit status, never an abort and a core dump.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version (exit code 0) print as CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    // A usage error: exit status 2, as a config that is refused (the
    // arguments echoed in the message are the user's: made printable).
    std::fprintf(stderr, "tierflow: %s\nRun with --help for more information.\n",
                 tierflow::PrintableText(e.what()).c_str());
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tierflow: %s\n", e.message.c_str());
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "tierflow: out of host memory (an allocation failed); lower the sizes asked "
                 "for or free memory, and check the inputs for absurd dimensions\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "tierflow: internal error: %s\n(this is a bug in tierflow; please report it "
                 "with the command line)\n",
                 e.what());
    return 70;  // EX_SOFTWARE
  } catch (...) {
    std::fprintf(stderr, "tierflow: internal error: an unknown exception escaped\n");
    return 70;
  }
  return exit_code;
}
