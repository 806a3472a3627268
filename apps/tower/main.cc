// The `tower` command line: dispatches to the registered sub-commands. Only main catches:
// a tower::Error becomes one line on stderr and exit code 1; bad usage exits with code 2.
#include <cstdio>
#include <exception>

#include "command.h"
#include "tower/core/error.h"

namespace tower::cli {
std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}
}  // namespace tower::cli

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
    std::fprintf(stderr, "tower: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tower: unexpected error: %s\n", e.what());
    return 3;
  }
  return 0;
}
