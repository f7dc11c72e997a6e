// Runs the `tierflow` binary as a child process for tests that need a real
// process: to kill it, to signal it, or to check its exit status and output.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace tierflow::testing_common {

// Starts `binary` with `args`, stdout and stderr into `log` (appended to, or
// truncated first). Returns the pid, or -1 when it could not start.
inline pid_t SpawnLogged(const char* binary, const std::vector<std::string>& args,
                         const std::string& log, bool append = false) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, binary, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Waits for `pid`: its exit status, or 128 + the signal that ended it.
inline int WaitExitCode(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tierflow::testing_common
