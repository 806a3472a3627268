// `tower inspect CHECKPOINT`: what a checkpoint holds (tensors, shapes, dtypes, step, flags).
#include <fmt/format.h>

#include "command.h"
#include "tower/io/checkpoint.h"

namespace tower::cli {
namespace {

void run_inspect(const std::string& path) {
  std::string prefix = path;
  if (auto latest = checkpoint_latest(path)) prefix = *latest;  // a train dir: its latest one
  CheckpointData checkpoint = checkpoint_load(prefix);
  fmt::print("checkpoint {} (step {})\n", checkpoint.prefix, checkpoint.step);
  fmt::print("state: {}\n", checkpoint.state.dump());
  int64_t total = 0;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    fmt::print("  {:<50} {:<5} {}\n", name, dtype_name(tensor.dtype()), tensor.shape().to_string());
    total += tensor.numel();
  }
  fmt::print("{} tensors, {} values\n", checkpoint.tensors.size(), total);
}

CommandRegistrar registrar{
    {"inspect", "Show the tensors and state of a checkpoint", [](CLI::App& app) {
       static std::string path;
       app.add_option("checkpoint", path,
                      "A checkpoint prefix (train/model.ckpt-1200) or a train dir")
           ->required();
       app.callback([] { run_inspect(path); });
     }}};

}  // namespace
}  // namespace tower::cli
