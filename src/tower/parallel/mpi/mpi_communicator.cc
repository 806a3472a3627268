// The MPI communicator: MPI_COMM_WORLD with blocking collectives (Open MPI's tuned, shared-memory
// aware algorithms are about twice as fast as its non-blocking ones here), each watched by a
// watchdog thread that ends the job when a collective outlives the timeout, so a dead or stuck
// rank never makes the others hang.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "tower/parallel/communicator.h"

namespace tower {
namespace {

using Clock = std::chrono::steady_clock;

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    // The watchdog may call MPI_Abort while another thread is inside a collective.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      fail("the MPI library offers thread level {} but tower needs at least MPI_THREAD_SERIALIZED",
           provided);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm local;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_free(&local);
    watchdog_ = std::thread([this] { watch(); });
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }
  std::string_view backend() const override { return "mpi"; }

  void allreduce_sum(float* data, int64_t count) override {
    for (int64_t done = 0; done < count;) {
      const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
      guarded("an all-reduce", [&] {
        return MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, comm_);
      });
      done += n;
    }
  }

  void broadcast(void* data, size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min<size_t>(bytes - done, INT_MAX));
      guarded("a broadcast", [&] { return MPI_Bcast(p + done, n, MPI_BYTE, root, comm_); });
      done += static_cast<size_t>(n);
    }
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    std::vector<int> sizes(static_cast<size_t>(size_));
    int my_size = static_cast<int>(mine.size());
    guarded("an all-gather",
            [&] { return MPI_Allgather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm_); });
    std::vector<int> offsets(sizes.size(), 0);
    for (size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
    std::string all(static_cast<size_t>(offsets.back() + sizes.back()), '\0');
    guarded("an all-gather", [&] {
      return MPI_Allgatherv(mine.data(), my_size, MPI_CHAR, all.data(), sizes.data(),
                            offsets.data(), MPI_CHAR, comm_);
    });
    std::vector<std::string> out;
    for (size_t r = 0; r < sizes.size(); ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(sizes[r])));
    return out;
  }

  void allgather(const float* mine, int64_t count, float* all) override {
    if (count > INT_MAX) fail("an all-gather of {} floats per rank is more than MPI takes", count);
    guarded("an all-gather", [&] {
      return MPI_Allgather(mine, static_cast<int>(count), MPI_FLOAT, all, static_cast<int>(count),
                           MPI_FLOAT, comm_);
    });
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

  void finalize() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

 private:
  void check(int code, const char* call) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    fail("{} failed on rank {}: {}", call, rank_, std::string(text, static_cast<size_t>(length)));
  }

  // Runs one blocking collective with the watchdog armed.
  template <typename Call>
  void guarded(const char* what, Call&& call) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      what_ = what;
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout()));
      armed_ = true;
    }
    cv_.notify_all();
    const int code = call();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      armed_ = false;
    }
    check(code, what);
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      const auto deadline = deadline_;
      if (cv_.wait_until(lock, deadline,
                         [&] { return stopping_ || !armed_ || deadline_ != deadline; }))
        continue;
      std::fprintf(stderr,
                   "tower[rank %d]: error: rank %d waited %.0f s in %s for the other ranks, which "
                   "did not answer (a rank died, hangs, or is much slower); stopping the job\n",
                   rank_, rank_, timeout(), what_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
  std::thread watchdog_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false, stopping_ = false;
  const char* what_ = "";
  Clock::time_point deadline_;
};

MpiCommunicator* g_mpi = nullptr;

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  auto comm = std::make_unique<MpiCommunicator>();
  g_mpi = comm.get();
  return comm;
}

void finalize_mpi() {
  if (g_mpi != nullptr) g_mpi->finalize();
  g_mpi = nullptr;
}

}  // namespace tower
