// The MPI communicator: MPI_COMM_WORLD, with non-blocking collectives polled against a deadline
// so that a dead or stuck rank turns into an error instead of a hang.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include "tower/parallel/communicator.h"

namespace tower {
namespace {

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    // Collectives come from one thread at a time (the reducer's or the trainer's), never two.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      fail("the MPI library offers thread level {} but tower needs MPI_THREAD_SERIALIZED", provided);
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm local;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string_view backend() const override { return "mpi"; }

  void allreduce_sum(float* data, int64_t count) override {
    for (int64_t done = 0; done < count;) {
      const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
      MPI_Request request;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, comm_, &request),
            "MPI_Iallreduce");
      wait(request, "an all-reduce");
      done += n;
    }
  }

  void broadcast(void* data, size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min<size_t>(bytes - done, INT_MAX));
      MPI_Request request;
      check(MPI_Ibcast(p + done, n, MPI_BYTE, root, comm_, &request), "MPI_Ibcast");
      wait(request, "a broadcast");
      done += static_cast<size_t>(n);
    }
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    std::vector<int> sizes(static_cast<size_t>(size_));
    int my_size = static_cast<int>(mine.size());
    MPI_Request request;
    check(MPI_Iallgather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm_, &request), "MPI_Iallgather");
    wait(request, "an all-gather");
    std::vector<int> offsets(sizes.size(), 0);
    for (size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
    std::string all(static_cast<size_t>(offsets.back() + sizes.back()), '\0');
    check(MPI_Iallgatherv(mine.data(), my_size, MPI_CHAR, all.data(), sizes.data(), offsets.data(),
                          MPI_CHAR, comm_, &request),
          "MPI_Iallgatherv");
    wait(request, "an all-gather");
    std::vector<std::string> out;
    for (size_t r = 0; r < sizes.size(); ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(sizes[r])));
    return out;
  }

  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

  void finalize() {
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

  // Polls until done. Open MPI makes progress only inside MPI calls, so the poll is what moves
  // the data; it backs off to short sleeps to leave the cores to the towers.
  void wait(MPI_Request& request, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout());
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (polls > 100) {
        if (Clock::now() > deadline)
          fail("rank {} waited {:.0f} s in {} for the other ranks, which did not answer (a rank "
               "died, hangs, or is much slower); stopping the job",
               rank_, timeout(), what);
        std::this_thread::sleep_for(std::chrono::microseconds(polls > 2000 ? 200 : 20));
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_size_ = 1;
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
