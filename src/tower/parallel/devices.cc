#include "tower/parallel/devices.h"

#include <cstdio>

namespace tower {

std::vector<Device> rank_devices(const std::vector<Device>& requested, int local_rank) {
  int gpus = 0;
  for (const Device& d : requested) gpus += d.kind == DeviceKind::cuda ? 1 : 0;
  std::vector<Device> result = requested;
  for (Device& d : result)
    if (d.kind == DeviceKind::cuda) d.index += local_rank * gpus;
  return result;
}

DevicePlan select_devices(const DeviceRequest& request, const Communicator& comm) {
  DevicePlan plan;
  plan.cores = request.threads > 0 ? request.threads : cores_per_rank(comm);
  std::vector<Device> asked = request.devices;
  if (request.num_gpus > 0) {
    if (!asked.empty() || request.num_devices > 0)
      fail("--num_gpus cannot be combined with --devices or --num_devices");
    for (int i = 0; i < request.num_gpus; ++i) asked.push_back({DeviceKind::cuda, i});
  }
  if (!asked.empty()) {
    const int cpus = cpu_info().num_cores;
    for (const Device& d : asked)
      if (d.kind == DeviceKind::cpu && d.index >= cpus)
        fail(
            "--devices: {} does not exist; this machine has {} logical CPU device{} (cpu:0 to "
            "cpu:{}), one per core",
            d.to_string(), cpus, cpus == 1 ? "" : "s", cpus - 1);
    plan.devices = resolve_devices(asked, request.allow_soft_placement, comm.local_rank());
  } else {
    if (request.num_devices < 0 || request.num_devices > kMaxTowersPerRank)
      fail("--num_devices must be between 1 and {}, got {}", kMaxTowersPerRank,
           request.num_devices);
    const int n = request.num_devices > 0 ? request.num_devices : plan.cores;
    for (int i = 0; i < n; ++i) plan.devices.push_back(Device{DeviceKind::cpu, i});
  }
  plan.threads = split_cores(plan.cores, static_cast<int>(plan.devices.size()));
  // The hardware checks, here rather than when the programs are built: before anything is loaded.
  for (const Device& d : plan.devices) check_precision_supported(request.precision, d);
  return plan;
}

std::vector<Device> resolve_devices(const std::vector<Device>& asked, bool allow_soft_placement,
                                    int local_rank) {
  const std::vector<Device> requested = rank_devices(asked, local_rank);
  const int gpus = has_device_ops(DeviceKind::cuda) ? static_cast<int>(cuda_devices().size()) : 0;
  std::vector<std::string> missing;
  for (const Device& d : requested)
    if (d.kind == DeviceKind::cuda && d.index >= gpus) missing.push_back(d.to_string());
  if (missing.empty()) return requested;
  if (!allow_soft_placement)
    fail(
        "device {} was requested{}, but {}; pass --allow_soft_placement to run the towers on the "
        "CPU instead",
        missing[0],
        local_rank > 0
            ? fmt::format(" (rank {} of this machine: ranks count their GPUs from local rank x "
                          "GPUs per rank)",
                          local_rank)
            : std::string(),
        has_device_ops(DeviceKind::cuda) ? fmt::format("this machine has {} CUDA device(s)", gpus)
                                         : std::string("this build of tower has no CUDA backend"));
  // CPU and GPU towers do not mix: once one GPU is missing, every tower goes to a CPU device.
  std::vector<Device> result;
  for (size_t i = 0; i < requested.size(); ++i) {
    const Device cpu{DeviceKind::cpu, static_cast<int>(i)};
    if (requested[i].kind == DeviceKind::cuda)
      std::fprintf(stderr, "%swarning: %s is not available, placing its tower on %s\n",
                   log_prefix().c_str(), requested[i].to_string().c_str(), cpu.to_string().c_str());
    result.push_back(requested[i].kind == DeviceKind::cuda ? cpu : requested[i]);
  }
  return result;
}

BatchPlan plan_batches(const BatchRequest& request, int64_t towers, int ranks) {
  if (request.batch_size > 0 && request.global_batch_size > 0)
    fail("--batch_size (per tower) and --global_batch_size (per step) exclude each other");
  BatchPlan plan;
  plan.micro = request.micro_batch_size;
  if (plan.micro > 0) {
    if (request.global_batch_size <= 0)
      fail("--global_batch_size and --micro_batch_size go together: give both, or neither");
    if (request.global_batch_size % plan.micro != 0)
      fail("--global_batch_size {} must be a multiple of --micro_batch_size {}",
           request.global_batch_size, plan.micro);
    const int64_t micro_batches = request.global_batch_size / plan.micro;
    if (micro_batches % ranks != 0)
      fail(
          "--global_batch_size {} is {} micro-batches of --micro_batch_size {}, which {} ranks "
          "cannot share equally",
          request.global_batch_size, micro_batches, plan.micro, ranks);
    plan.global = request.global_batch_size;
  } else if (request.global_batch_size > 0) {
    if (request.global_batch_size % (towers * ranks) != 0)
      fail("--global_batch_size {} must be a multiple of the {} tower{} x {} rank{}",
           request.global_batch_size, towers, towers == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s");
    plan.global = request.global_batch_size;
  } else {
    plan.global = request.batch_size * towers * ranks;
  }
  plan.local = plan.global / ranks;
  check_tower_share(plan.local, plan.micro, towers);
  return plan;
}

void check_tower_share(int64_t local_batch, int64_t micro, int64_t towers) {
  if (towers < 1) fail("no devices given: pass --devices cpu:0,... or --num_devices N");
  if (micro > 0) {
    if (local_batch % micro != 0)
      fail("this rank's batch of {} examples is not a whole number of micro-batches of {}",
           local_batch, micro);
    if (local_batch / micro < towers)
      fail(
          "{} tower{} (--num_devices or --devices) but only {} micro-batches of "
          "--micro_batch_size {} per rank: every tower needs at least one",
          towers, towers == 1 ? "" : "s", local_batch / micro, micro);
  } else if (local_batch < towers) {
    fail(
        "the batch of {} examples per rank is smaller than the number of towers ({}): every tower "
        "needs at least one example",
        local_batch, towers);
  }
}

}  // namespace tower
