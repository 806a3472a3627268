// Sub-commands of the `tower` CLI register themselves: one file per sub-command (cmd_<name>.cc)
// defines a static CommandRegistrar whose setup function adds options and a callback.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace tower::cli {

struct Command {
  std::string name;
  std::string help;
  std::function<void(CLI::App&)> setup;  // add options to the sub-app and set its callback
};

std::vector<Command>& commands();

// The exit code a sub-command asks for when it returns normally: 0, or 130 for a run that a signal
// stopped after writing its checkpoint (README: exit codes).
int& exit_code();

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { commands().push_back(std::move(command)); }
};

// Checks for numeric flags with a short message ("must be a number > 0, got 'abc'"), where
// CLI11's own range validators print a 300-digit upper bound.
inline CLI::Validator number_above(double bound, bool inclusive) {
  const std::string what = std::string(inclusive ? ">= " : "> ") + CLI::detail::to_string(bound);
  return CLI::Validator(
      [bound, inclusive, what](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) ||
            (inclusive ? value < bound : value <= bound))
          return "must be a number " + what + ", got '" + text + "'";
        return {};
      },
      "NUMBER " + what);
}
inline const CLI::Validator positive = number_above(0, false);
inline const CLI::Validator non_negative = number_above(0, true);

// --train_dir and --checkpoint of the sub-commands that read a trained model (eval, export,
// predict; train/inference.h resolves them).
inline void add_checkpoint_flags(CLI::App& app, std::string& train_dir, std::string& checkpoint) {
  app.add_option("--train_dir", train_dir, "Where the checkpoints are")->capture_default_str();
  app.add_option("--checkpoint", checkpoint,
                 "A checkpoint: its prefix, or its name or step in --train_dir (default: the "
                 "latest)");
}

}  // namespace tower::cli
