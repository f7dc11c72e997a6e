// PLACEHOLDER until the owner of this subcommand lands it; refuses to run.
#include "tools/commands.h"

namespace tierflow::cli {

void AddPlan(CLI::App& app, int* exit_code) {
  app.add_subcommand("plan", "(not built yet)")->callback([exit_code] {
    std::fprintf(stderr, "tierflow: 'plan' is not built yet\n");
    *exit_code = 2;
  });
}

}  // namespace tierflow::cli
