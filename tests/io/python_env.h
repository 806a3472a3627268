// Runs Python checks from io tests in a venv under the build dir (header-only test helper).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <optional>
#include <string>

namespace tower::testing {

struct ShellResult {
  int exit_code = -1;
  std::string output;  // stdout (and stderr when the command redirects it)
};

inline ShellResult run_shell(const std::string& command) {
  ShellResult result;
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

// The python of build/pyenv with `packages` installed, or nothing (with the reason in `why`) when
// they cannot be installed, e.g. without network.
inline std::optional<std::string> python_with(const std::string& packages, std::string* why) {
  const std::string venv = std::string(TOWER_BINARY_DIR) + "/pyenv";
  ShellResult r = run_shell(std::string(TOWER_SOURCE_DIR) + "/scripts/pyenv " + venv + " " +
                            packages + " 2>&1");
  std::string out = r.output;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (r.exit_code != 0) {
    *why = "cannot install " + packages + " into " + venv +
           " (no network?): " + out.substr(out.size() > 800 ? out.size() - 800 : 0);
    return std::nullopt;
  }
  size_t last_line = out.rfind('\n');
  return last_line == std::string::npos ? out : out.substr(last_line + 1);
}

// Runs `python tests/io/<script_and_args>`; stdout goes to `output`, and on failure stderr (kept
// apart so that library warnings cannot break the JSON on stdout) is appended to it.
inline ShellResult run_python(const std::string& python, const std::string& script_and_args,
                              const std::string& scratch_dir) {
  const std::string err = scratch_dir + "/python_stderr.txt";
  ShellResult r =
      run_shell(python + " " + TOWER_SOURCE_DIR + "/tests/io/" + script_and_args + " 2>" + err);
  if (r.exit_code != 0) r.output += run_shell("cat " + err).output;
  return r;
}

}  // namespace tower::testing
