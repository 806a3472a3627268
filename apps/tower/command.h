// Sub-commands of the `tower` CLI register themselves: one file per sub-command (cmd_<name>.cc)
// defines a static CommandRegistrar whose setup function adds options and a callback.
#pragma once

#include <CLI/CLI.hpp>

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

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { commands().push_back(std::move(command)); }
};

}  // namespace tower::cli
