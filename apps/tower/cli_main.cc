// The `tower` command line (tower/cli.h): dispatches to the registered sub-commands. Only this
// function catches: a tower::Error becomes one line on stderr and exit code 1; bad usage exits
// with code 2. Under mpirun, a rank that fails ends the whole job (MPI_Abort), so no other rank
// waits for it.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "command.h"
#include "tower/cli.h"
#include "tower/core/error.h"
#include "tower/parallel/communicator.h"

namespace tower::cli {
int& exit_code() {
  static int code = 0;
  return code;
}

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
// Levenshtein distance, for "did you mean".
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The nearest of `names` to `word`, when it is near enough to be a typo of it.
std::string nearest(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& name : names)
    if (const size_t d = distance(word, name); d < best_distance) best = name, best_distance = d;
  return best;
}

// A hint for a command line CLI11 refused: the sub-command or flag the user probably meant.
std::string did_you_mean(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> commands;
  for (const auto& command : tower::cli::commands()) commands.push_back(command.name);
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string given = argv[1];
  if (std::find(commands.begin(), commands.end(), given) == commands.end()) {
    const std::string best = nearest(given, commands);
    return best.empty() ? fmt::format("unknown sub-command '{}' (see tower --help)", given)
                        : fmt::format("unknown sub-command '{}': did you mean '{}'?", given, best);
  }
  const CLI::App* sub = app.get_subcommand(given);
  std::vector<std::string> flags;
  for (const CLI::Option* option : sub->get_options())
    for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
  for (int i = 2; i < argc; ++i) {
    std::string word = argv[i];
    if (word.rfind("--", 0) != 0) continue;
    word = word.substr(0, word.find('='));
    if (std::find(flags.begin(), flags.end(), word) != flags.end()) continue;
    const std::string best = nearest(word, flags);
    if (!best.empty()) return fmt::format("unknown flag {}: did you mean {}?", word, best);
  }
  return "";
}

}  // namespace

// libgomp's default is 300,000 (a team then held its cores for milliseconds after each kernel).
constexpr const char* kSpinCount = "5000";

int tower::cli_main(int argc, char** argv) {
  // OpenMP threads that wait by spinning hold on to cores that a busy machine needs elsewhere,
  // but a team that sleeps at once is woken for every kernel. A short spin (libgomp's count of
  // pauses, then sleep) catches the next kernel of a step and gives the core up soon after.
  // libgomp reads it when it is loaded, before main, so tower sets it (unless the user set a
  // policy or a count) and starts again.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("GOMP_SPINCOUNT", kSpinCount, 1);
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
  // An unknown sub-command is an error even with --help, which CLI11 would otherwise answer with
  // the main help and exit code 0.
  const auto& commands = tower::cli::commands();
  if (argc >= 2 && argv[1][0] != '-' &&
      std::none_of(commands.begin(), commands.end(),
                   [&](const auto& command) { return command.name == argv[1]; })) {
    std::fprintf(stderr, "tower: %s\n", did_you_mean(app, argc, argv).c_str());
    return 2;
  }
  try {
    // The kernels of a smaller CPU (README: same bits); the library itself reads no TOWER_*.
    if (const char* isa = std::getenv("TOWER_MAX_CPU_ISA"); isa != nullptr && *isa != '\0')
      tower::set_max_cpu_isa(tower::parse_cpu_isa(isa, "TOWER_MAX_CPU_ISA"));
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    if (code != 0)
      if (const std::string hint = did_you_mean(app, argc, argv); !hint.empty())
        std::fprintf(stderr, "tower: %s\n", hint.c_str());
    return code == 0 ? 0 : 2;
  } catch (const tower::Error& e) {
    return fail_job(fmt::format("error: {}", e.what()), 1);
  } catch (const std::filesystem::filesystem_error& e) {  // names the path: the user's to fix
    return fail_job(fmt::format("error: {}", e.what()), 1);
  } catch (const std::exception& e) {
    return fail_job(fmt::format("unexpected error: {}", e.what()), 3);
  }
  tower::shutdown_world();
  return tower::cli::exit_code();
}
