#include "program_flags.h"

#include <cstdlib>

#include "tower/core/error.h"

namespace tower::cli {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

void add_program_flags(CLI::App& app, ProgramFlags& flags) {
  app.add_option("--precision", flags.precision,
                 "fp32 | bf16 (convolutions and matmuls multiply bf16 copies; weights, "
                 "optimizer, loss and checkpoints stay f32)")
      ->capture_default_str();
  app.add_flag("--deterministic,!--no-deterministic", flags.deterministic,
               "Only bitwise-repeatable kernels (on by default; off lets cuDNN pick faster ones)")
      ->capture_default_str();
  app.add_option("--contention", flags.contention,
                 "auto | on | off: contended mode, where a team's threads take tasks instead of "
                 "waiting for each other (auto: while another process takes cores); the same bits "
                 "either way");
  app.add_flag("--no_fusion", flags.no_fusion,
               "One kernel per node (no Conv2D+BiasAdd+Relu and the like), for comparison");
  app.add_flag("--plain_layouts", flags.plain_layouts,
               "Plain layouts between every two kernels (no blocked-layout propagation), for "
               "comparison");
}

ProgramOptions program_options(const ProgramFlags& flags) {
  ProgramOptions options;
  options.precision = parse_precision(flags.precision);
  options.deterministic = flags.deterministic;
  const std::string from_env = env("TOWER_CONTENTION");
  const std::string mode = !flags.contention.empty() ? flags.contention
                           : !from_env.empty()       ? from_env
                                                     : "auto";
  const std::string source =
      !flags.contention.empty() ? "--contention " + mode : "TOWER_CONTENTION=" + mode;
  if (mode == "on")
    options.contention = ProgramOptions::Contention::on;
  else if (mode == "off")
    options.contention = ProgramOptions::Contention::off;
  else if (mode != "auto")
    fail("{}: expected on, off or auto", source);
  options.fuse = !flags.no_fusion && env("TOWER_FUSION") != "off";
  options.propagate_layouts = !flags.plain_layouts && env("TOWER_LAYOUTS") != "plain";
  return options;
}

}  // namespace tower::cli
