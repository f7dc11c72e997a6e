// The `tierflow` command: train, plan, bench and tier subcommands.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "tools/commands.h"

#ifndef TIERFLOW_VERSION
#define TIERFLOW_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  CLI::App app{
      "tierflow: fine-tune transformer models larger than one GPU, with optimizer state "
      "offloaded to host RAM and NVMe"};
  app.set_version_flag("--version", std::string("tierflow ") + TIERFLOW_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;

  tierflow::cli::AddTrain(app, &exit_code);
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure this machine: copy/PCIe bandwidth, CPU Adam, NVMe throughput");
  bench->require_subcommand(1);
  tierflow::cli::AddBenchCopy(*bench, &exit_code);
  tierflow::cli::AddBenchAdam(*bench, &exit_code);
  tierflow::cli::AddBenchNvme(*bench, &exit_code);
  tierflow::cli::AddBenchEngine(*bench, &exit_code);
  tierflow::cli::AddBenchAll(*bench, &exit_code);
  tierflow::cli::AddPlan(app, &exit_code);
  tierflow::cli::AddTier(app, &exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
