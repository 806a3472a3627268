// The `tower` command line: dispatches to the registered sub-commands. Only main catches:
// a tower::Error becomes one line on stderr and exit code 1; bad usage exits with code 2. Under
// mpirun, a rank that fails ends the whole job (MPI_Abort), so no other rank waits for it.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "command.h"
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

int main(int argc, char** argv) {
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
