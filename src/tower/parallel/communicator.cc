#include "tower/parallel/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tower/core/device.h"

namespace tower {

#ifdef TOWER_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_communicator();  // mpi/mpi_communicator.cc
void finalize_mpi();
#endif

namespace {

class SingleCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string_view backend() const override { return "single"; }
  void allreduce_sum(float*, int64_t) override {}
  void broadcast(void*, size_t, int) override {}
  std::vector<std::string> allgather(const std::string& mine) override { return {mine}; }
  void allgather(const float* mine, int64_t count, float* all) override {
    std::copy(mine, mine + count, all);
  }
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }
};

// The state the ranks of a thread group share: one round of exchange() at a time.
struct ThreadGroup {
  explicit ThreadGroup(int size) : slots(static_cast<size_t>(size)) {}
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::string> slots;  // each rank's contribution to the current round
  int arrived = 0, departed = 0;
  bool draining = false;  // every rank arrived; they are reading the slots
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->slots.size()); }
  int local_size() const override { return size(); }
  int local_rank() const override { return rank_; }
  std::string_view backend() const override { return "threads"; }

  void allreduce_sum(float* data, int64_t count) override {
    const auto all =
        exchange(std::string(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * 4));
    std::fill(data, data + count, 0.0f);
    for (const std::string& part : all)  // in rank order: the same bits on every rank
      for (int64_t i = 0; i < count; ++i) data[i] += reinterpret_cast<const float*>(part.data())[i];
  }
  void broadcast(void* data, size_t bytes, int root) override {
    const auto all =
        exchange(rank_ == root ? std::string(static_cast<const char*>(data), bytes) : "");
    std::memcpy(data, all[static_cast<size_t>(root)].data(), bytes);
  }
  std::vector<std::string> allgather(const std::string& mine) override { return exchange(mine); }
  void allgather(const float* mine, int64_t count, float* all) override {
    const auto parts = exchange(std::string(reinterpret_cast<const char*>(mine),
                                            static_cast<size_t>(count) * sizeof(float)));
    for (size_t r = 0; r < parts.size(); ++r)
      std::memcpy(all + static_cast<int64_t>(r) * count, parts[r].data(), parts[r].size());
  }
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }

 private:
  std::vector<std::string> exchange(std::string mine) {
    ThreadGroup& g = *group_;
    std::unique_lock<std::mutex> lock(g.mutex);
    wait(lock, [&] { return !g.draining; });
    g.slots[static_cast<size_t>(rank_)] = std::move(mine);
    if (++g.arrived == size()) {
      g.draining = true;
      g.cv.notify_all();
    }
    wait(lock, [&] { return g.draining; });
    std::vector<std::string> all = g.slots;
    if (++g.departed == size()) {
      g.arrived = g.departed = 0;
      g.draining = false;
      g.cv.notify_all();
    }
    return all;
  }
  template <typename Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred pred) {
    if (!group_->cv.wait_for(lock, std::chrono::duration<double>(timeout()), pred))
      fail("rank {} waited {:.0f} s for the other ranks, which did not answer", rank_, timeout());
  }
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

// The launcher's size variable: Open MPI's, or the PMI ones other MPIs set.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  return std::getenv("PMIX_RANK") != nullptr ? 2 : 0;
}

std::unique_ptr<Communicator> make_world() {
  const int size = launcher_size();
  if (size > 0) {
#ifdef TOWER_HAVE_MPI
    return make_mpi_communicator();
#else
    if (size > 1)
      fail(
          "started by an MPI launcher with {} processes, but this tower was built without MPI "
          "(apt-get install libopenmpi-dev openmpi-bin, then rebuild)",
          size);
#endif
  }
  return make_single_communicator();
}

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> comm;
  return comm;
}

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size) {
  auto group = std::make_shared<ThreadGroup>(size);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return ranks;
}

Communicator& world() {
  static std::once_flag once;
  std::call_once(once, [] { world_slot() = make_world(); });
  return *world_slot();
}

void shutdown_world() {
#ifdef TOWER_HAVE_MPI
  if (world_slot()) finalize_mpi();
#endif
}

std::string log_prefix() {
  return world().size() > 1 ? fmt::format("tower[rank {}]: ", world().rank()) : "tower: ";
}

int cores_per_rank(const Communicator& comm) {
  const int mine = cpu_info().num_cores;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  // Bound by the launcher to a subset of the cores: that subset is ours alone.
  if (comm.local_size() <= 1 || mine < online) return mine;
  return std::max(1, mine / comm.local_size());
}

void check_same_on_all_ranks(Communicator& comm,
                             const std::vector<std::pair<std::string, std::string>>& fields,
                             std::string_view what) {
  if (comm.size() == 1) return;
  std::string mine;
  for (const auto& [name, value] : fields) mine += name + '\0' + value + '\0';
  const std::vector<std::string> all = comm.allgather(mine);
  auto parse = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t a = text.find('\0', pos), b = text.find('\0', a + 1);
      out.emplace_back(text.substr(pos, a - pos), text.substr(a + 1, b - a - 1));
      pos = b + 1;
    }
    return out;
  };
  const auto root = parse(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto other = parse(all[r]);
    for (size_t i = 0; i < std::max(root.size(), other.size()); ++i) {
      const std::string name = i < root.size() ? root[i].first : other[i].first;
      const std::string a = i < root.size() ? root[i].second : "(none)";
      const std::string b = i < other.size() && other[i].first == name ? other[i].second : "(none)";
      if (a != b)
        fail(
            "the ranks disagree on their {}: {} is {} on rank {} but {} on rank 0; every rank "
            "must run the same model with the same flags",
            what, name, b, r, a);
    }
  }
}

uint64_t checksum(const std::vector<const Tensor*>& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor* t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t->raw_data());
    for (size_t i = 0; i < t->nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

void check_identical_on_all_ranks(Communicator& comm, const std::vector<const Tensor*>& tensors,
                                  std::string_view what) {
  if (comm.size() == 1) return;
  const std::vector<std::string> sums = comm.allgather(fmt::format("{:016x}", checksum(tensors)));
  for (size_t r = 1; r < sums.size(); ++r)
    if (sums[r] != sums[0])
      fail("rank {} holds other {} than rank 0 (checksum {} vs {})", r, what, sums[r], sums[0]);
}

void broadcast_from_rank0(Communicator& comm, const std::vector<Tensor*>& tensors,
                          std::string_view what) {
  if (comm.size() == 1) return;
  for (Tensor* t : tensors) comm.broadcast(t->raw_data(), t->nbytes(), 0);
  check_identical_on_all_ranks(comm, std::vector<const Tensor*>(tensors.begin(), tensors.end()),
                               what);
}

}  // namespace tower
