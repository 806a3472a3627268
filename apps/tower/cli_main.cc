// The `tower` command line (tower/cli.h): dispatches to the registered sub-commands. Only this
// function catches: a tower::Error becomes one line on stderr and exit code 1; bad usage exits
// with code 2. Under mpirun, a rank that fails ends the whole job (MPI_Abort), so no other rank
// waits for it.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "command.h"
#include "tower/cli.h"
#include "tower/core/error.h"
#include "tower/parallel/communicator.h"

namespace tower::cli {
std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}
}  // namespace tower::cli

namespace {
int fail_job(const std::string& message, int code) {
  tower::Communicator* comm = nullptr;
  try {
    comm = &tower::world();
  } catch (const std::exception&) {  // MPI itself failed to start: this process is alone
  }
  const bool many = comm != nullptr && comm->size() > 1;
  std::fprintf(stderr, "%s%s\n", many ? tower::log_prefix().c_str() : "tower: ", message.c_str());
  std::fflush(stderr);
  if (many) comm->abort(code);
  return code;
}
}  // namespace

int tower::cli_main(int argc, char** argv) {
  // OpenMP threads that wait by spinning hold on to cores that a busy machine needs elsewhere:
  // with one core taken by another process, cifar10 trains 25-34% faster when the team waits
  // passively, and about as fast on a quiet machine. libgomp reads the policy when it is loaded,
  // before main, so tower sets it (unless the user did) and starts again.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    char self[4096];  // the binary's own path, so that ps and top still say "tower"
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = '\0';
      execv(self, argv);  // on failure, go on with the default policy
    }
  }
  CLI::App app{"tower: synchronous data-parallel training of neural networks on every device"};
  app.set_version_flag("--version", std::string("tower ") + TOWER_VERSION);
  app.require_subcommand(1);
  app.failure_message(CLI::FailureMessage::simple);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last flag wins
  for (auto& command : tower::cli::commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.help);
    command.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const tower::Error& e) {
    return fail_job(fmt::format("error: {}", e.what()), 1);
  } catch (const std::filesystem::filesystem_error& e) {  // names the path: the user's to fix
    return fail_job(fmt::format("error: {}", e.what()), 1);
  } catch (const std::exception& e) {
    return fail_job(fmt::format("unexpected error: {}", e.what()), 3);
  }
  tower::shutdown_world();
  return 0;
}
