// The processes of one training job. Every process (rank) runs its own towers; collectives
// combine the ranks. Under `mpirun` in a build with MPI, world() is MPI_COMM_WORLD; otherwise it
// is this process alone, and nothing here touches MPI.
//
// Collectives never hang: one that waits more than timeout() seconds for the other ranks ends
// the job (MPI) or throws a tower::Error (thread ranks), and main() ends the whole job with
// abort() on any error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tower/core/tensor.h"

namespace tower {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_size() const = 0;            // ranks on this machine (they share its cores)
  virtual int local_rank() const = 0;            // this rank's place among them
  virtual std::string_view backend() const = 0;  // "single" | "mpi"

  // In place: data[i] becomes the sum over ranks; every rank gets the same bits.
  virtual void allreduce_sum(float* data, int64_t count) = 0;
  // `bytes` bytes from `root` into `data` on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's string, indexed by rank.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // Every rank's `count` floats, one after the other in rank order, into `all` (size() * count).
  virtual void allgather(const float* mine, int64_t count, float* all) = 0;
  // Ends every process of the job now, with this exit code.
  [[noreturn]] virtual void abort(int exit_code) = 0;

  double timeout() const { return timeout_; }
  void set_timeout(double seconds) { timeout_ = seconds; }

 private:
  double timeout_ = 300;
};

// This job's communicator: made on first use, MPI only when launched by an MPI launcher.
Communicator& world();
// A communicator of one rank (tests, and builds without MPI).
std::unique_ptr<Communicator> make_single_communicator();
// `size` ranks that are threads of this process, one communicator each (rank r drives
// result[r] from its own thread): multi-rank code under test without MPI, and under TSan.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size);
// Finalizes MPI at a normal exit (a no-op without it).
void shutdown_world();

// "tower: " on a single process, "tower[rank R]: " when there are several: the prefix of the
// lines a rank writes to stderr.
std::string log_prefix();

// The cores this rank should use: its CPU affinity, shared with the other ranks on the machine
// when the launcher did not bind them to separate cores.
int cores_per_rank(const Communicator& comm);

// Fails on every rank, naming the first field where some rank differs from rank 0 (fields are
// (name, value) pairs; `what` says what they describe, e.g. "flags").
void check_same_on_all_ranks(Communicator& comm,
                             const std::vector<std::pair<std::string, std::string>>& fields,
                             std::string_view what);

// Copies `tensors` from rank 0 to every rank, then verifies by checksum that all ranks hold the
// same bits (a mismatch is an error naming the rank and `what`).
void broadcast_from_rank0(Communicator& comm, const std::vector<Tensor*>& tensors,
                          std::string_view what);
// FNV-1a over the tensors' bytes.
uint64_t checksum(const std::vector<const Tensor*>& tensors);
// Fails if the tensors' checksum differs between ranks.
void check_identical_on_all_ranks(Communicator& comm, const std::vector<const Tensor*>& tensors,
                                  std::string_view what);

}  // namespace tower
