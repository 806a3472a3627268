// `tower devices`: what tower can run on.
#include <fmt/format.h>

#include "command.h"
#include "tower/core/device.h"

namespace tower::cli {
namespace {

void run_devices(int num_devices) {
  CpuInfo cpu = cpu_info();
  fmt::print("CPU: {} ({} cores)\n", cpu.model_name.empty() ? "unknown" : cpu.model_name,
             cpu.num_cores);
  // Each level sums in its own order: the same bits need the same level (README).
  fmt::print(
      "kernels: {} (the CPU's own: {}; cap with TOWER_MAX_CPU_ISA=avx2|avx512|"
      "avx512_bf16|amx)\n",
      cpu_isa_name(cpu_isa()), cpu_isa_name(cpu_native_isa()));
  int n = num_devices > 0 ? num_devices : cpu.num_cores;
  std::vector<int> threads = split_cores(cpu.num_cores, n);
  for (int i = 0; i < n; ++i)
    fmt::print("  cpu:{}  {} thread{}\n", i, threads[i], threads[i] == 1 ? "" : "s");
  auto gpus = cuda_devices();
  if (gpus.empty()) fmt::print("no CUDA device\n");
  for (auto& g : gpus)
    fmt::print("  cuda:{}  {} ({:.1f} GiB)\n", g.index, g.name,
               static_cast<double>(g.total_memory) / (1024.0 * 1024.0 * 1024.0));
}

CommandRegistrar registrar{
    {"devices", "List the devices tower can train on", [](CLI::App& app) {
       static int num_devices = 0;
       app.add_option("--num_devices", num_devices,
                      "Split the CPU cores into this many logical devices (default: one per core)")
           ->check(positive);
       app.callback([] { run_devices(num_devices); });
     }}};

}  // namespace
}  // namespace tower::cli
