// PLACEHOLDER until the owner of this subcommand lands it; refuses to run.
#include "tools/commands.h"

namespace tierflow::cli {

void AddBenchNvme(CLI::App& bench, int* exit_code) {
  bench.add_subcommand("nvme", "(not built yet)")->callback([exit_code] {
    std::fprintf(stderr, "tierflow: 'nvme' is not built yet\n");
    *exit_code = 2;
  });
}

}  // namespace tierflow::cli
