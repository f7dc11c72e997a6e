// PLACEHOLDER until the owner of this subcommand lands it; refuses to run.
#include "tools/commands.h"

namespace tierflow::cli {

void AddBenchAdam(CLI::App& bench, int* exit_code) {
  bench.add_subcommand("adam", "(not built yet)")->callback([exit_code] {
    std::fprintf(stderr, "tierflow: 'adam' is not built yet\n");
    *exit_code = 2;
  });
}

}  // namespace tierflow::cli
