// The flags of train and bench that say how programs compute, parsed in one place.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tower/runtime/program.h"

namespace tower::cli {

struct ProgramFlags {
  std::string precision = "fp32";
  std::string contention;  // auto | on | off; empty: TOWER_CONTENTION, else auto
  bool deterministic = true, no_fusion = false, plain_layouts = false;
};

// --precision, --deterministic, --contention, --no_fusion, --plain_layouts.
void add_program_flags(CLI::App& app, ProgramFlags& flags);

// The ProgramOptions the flags ask for (device and threads left at their defaults). The
// environment variables TOWER_CONTENTION=on|off|auto, TOWER_FUSION=off and TOWER_LAYOUTS=plain
// stand for the flags where a flag is not given (the library itself reads none).
ProgramOptions program_options(const ProgramFlags& flags);

}  // namespace tower::cli
