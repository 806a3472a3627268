// Choosing the towers of a run: which devices, how many threads each, and how the batch is shared
// out over towers and ranks. The one place train, eval, bench and the examples do it, so that each
// check (a device that does not exist, a precision the hardware lacks, a batch that does not share
// out) exists once and runs before anything is loaded.
#pragma once

#include <cstdint>
#include <vector>

#include "tower/core/device.h"
#include "tower/parallel/communicator.h"

namespace tower {

// With several ranks on one machine each takes GPUs of its own: the cuda:N a rank asks for are
// counted from local_rank * (the number of GPUs it asks for), so that `mpirun -np 8 tower train
// --num_gpus 1` puts one rank on each of 8 GPUs. CPU devices are returned as they are.
std::vector<Device> rank_devices(const std::vector<Device>& requested, int local_rank);

// Resolves requested devices for this machine, for the rank with this local rank (rank_devices):
// "cuda:N" that does not exist is an error, or with allow_soft_placement a CPU device (and a
// warning line on stderr).
std::vector<Device> resolve_devices(const std::vector<Device>& requested, bool allow_soft_placement,
                                    int local_rank = 0);

// How devices were asked for: the --devices, --num_devices, --num_gpus and --threads flags.
struct DeviceRequest {
  std::vector<Device> devices;  // explicit (--devices); empty: num_devices logical CPU devices
  int num_devices = 0;          // 0: one per core
  int num_gpus = 0;             // > 0: cuda:0 .. cuda:num_gpus-1 (the classic flag)
  int threads = 0;              // cores in all; 0: this rank's share of the machine
  bool allow_soft_placement = false;
  Precision precision = Precision::fp32;  // checked on every device chosen
};
struct DevicePlan {
  std::vector<Device> devices;  // one tower each
  std::vector<int> threads;     // per device
  int cores = 0;                // in all
};
constexpr int kMaxTowersPerRank = 1024;
// Checks that every device exists (cpu:N up to the machine's logical devices, one per core;
// cuda:N through resolve_devices), that --num_devices is at most kMaxTowersPerRank, that only one
// of --devices, --num_devices and --num_gpus is given, and that every device has the precision;
// each error names the flag. (parse_device_list refuses a device listed twice.)
DevicePlan select_devices(const DeviceRequest& request, const Communicator& comm);

// How the batch was asked for: per tower (--batch_size), or for the whole step of all ranks
// (--global_batch_size), optionally cut into micro-batches (--micro_batch_size, which needs the
// global batch).
struct BatchRequest {
  int64_t batch_size = 0;
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 0;
};
struct BatchPlan {
  int64_t global = 0;  // examples per step, all ranks
  int64_t local = 0;   // this rank's share
  int64_t micro = 0;   // > 0: micro-batches of this many examples
};
// The batch of each rank, with every check that it shares out: equally over the ranks, and with at
// least one example (or micro-batch) for each of `towers` towers. Errors name the flags.
BatchPlan plan_batches(const BatchRequest& request, int64_t towers, int ranks);
// This rank's part of plan_batches' checks, for a rank that is handed its batch
// (DataParallel): local examples, or micro-batches of `micro`, for every one of `towers` towers.
void check_tower_share(int64_t local_batch, int64_t micro, int64_t towers);

}  // namespace tower
