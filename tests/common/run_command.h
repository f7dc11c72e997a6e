// Runs a shell command line (tests that drive the `tierflow` binary) and
// captures what it prints.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tierflow::testing_common {

struct CommandOutput {
  int exit_code = -1;  // the exit status; -1 when it did not start or ended by a signal
  std::string output;  // stdout (stderr too where the command line redirects it)
};

inline CommandOutput RunCommand(const std::string& command_line) {
  CommandOutput r;
  FILE* p = ::popen(command_line.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, got);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tierflow::testing_common
