// Registration of the `tierflow` subcommands. Each Add* function adds its
// subcommand (options and callback) to the parent CLI11 app; the callback
// sets *exit_code. One file per subcommand keeps each one small.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tierflow::cli {

// The command line after the program name, as main received it (a command
// that starts copies of itself, `train --nproc-per-node`, passes it on).
void SetCommandLine(int argc, char** argv);
const std::vector<std::string>& CommandLineArgs();

void AddBenchCopy(CLI::App& bench, int* exit_code);
void AddBenchAdam(CLI::App& bench, int* exit_code);
void AddBenchNvme(CLI::App& bench, int* exit_code);
void AddBenchEngine(CLI::App& bench, int* exit_code);
void AddBenchAll(CLI::App& bench, int* exit_code);
void AddBenchKernels(CLI::App& bench, int* exit_code);
void AddBenchTokenizer(CLI::App& bench, int* exit_code);
void AddBenchComm(CLI::App& bench, int* exit_code);
void AddPlan(CLI::App& app, int* exit_code);
void AddTrain(CLI::App& app, int* exit_code);
void AddTier(CLI::App& app, int* exit_code);
void AddTokenize(CLI::App& app, int* exit_code);

}  // namespace tierflow::cli
