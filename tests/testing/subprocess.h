// Runs the real `tower` binary from tests (header-only test helper).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

namespace tower::testing {

inline std::string tower_binary() { return std::string(TOWER_BINARY_DIR) + "/bin/tower"; }

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line to completion.
inline CommandResult run_command(const std::string& command_line) {
  CommandResult result;
  std::string command = command_line + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The mpirun command line that starts `ranks` processes (the rest of the line follows), or ""
// in a build without MPI. Open MPI leaks its own buffers at MPI_Finalize (in components it has
// unloaded by then, so no suppression can name them): leak checks of sanitizer builds stay off
// in the ranks.
inline std::string mpirun(int ranks) {
#ifdef TOWER_MPIEXEC
  return std::string(TOWER_MPIEXEC) +
         " --allow-run-as-root --oversubscribe -x ASAN_OPTIONS=detect_leaks=0 -np " +
         std::to_string(ranks) + " ";
#else
  return "";
#endif
}

// Runs `args` (a shell command line after the binary) to completion.
inline CommandResult run_tower(const std::string& args) {
  return run_command(tower_binary() + " " + args);
}

// Starts a shell command line in the background (output to `log_path`); returns the child's pid.
inline pid_t spawn_command(const std::string& command_line, const std::string& log_path) {
  pid_t pid = fork();
  if (pid == 0) {
    std::string command = "exec " + command_line + " > " + log_path + " 2>&1";
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

inline pid_t spawn_tower(const std::string& args, const std::string& log_path) {
  return spawn_command(tower_binary() + " " + args, log_path);
}

inline int wait_exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tower::testing
