// Communicators: the collectives of a thread group (the same contract as MPI's), timeouts, and
// the consistency checks every multi-rank run makes at start-up.
#include "tower/parallel/communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

namespace tower {
namespace {

// Runs fn(comm) on `ranks` threads, one per rank; returns each rank's error message ("" if none).
std::vector<std::string> on_ranks(int ranks, const std::function<void(Communicator&)>& fn,
                                  double timeout = 30) {
  auto comms = make_thread_communicators(ranks);
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Communicator& comm = *comms[static_cast<size_t>(r)];
      comm.set_timeout(timeout);
      try {
        fn(comm);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(CommunicatorTest, SingleProcessIsOneRankAndCollectivesAreIdentities) {
  auto comm = make_single_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  float x[2] = {1.5f, -2};
  comm->allreduce_sum(x, 2);
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(comm->allgather("a"), std::vector<std::string>{"a"});
  EXPECT_GE(cores_per_rank(*comm), 1);
}

TEST(CommunicatorTest, ThreadRanksSumBroadcastAndGather) {
  for (int ranks : {2, 3, 5}) {
    auto errors = on_ranks(ranks, [&](Communicator& comm) {
      for (int round = 0; round < 20; ++round) {  // rounds back to back must not mix
        std::vector<float> x = {static_cast<float>(comm.rank() + round),
                                0.1f * static_cast<float>(comm.rank())};
        comm.allreduce_sum(x.data(), 2);
        const float n = static_cast<float>(ranks);
        EXPECT_EQ(x[0], n * static_cast<float>(round) + n * (n - 1) / 2);
        std::vector<int> v = {comm.rank(), round};
        comm.broadcast(v.data(), sizeof(int) * 2, ranks - 1);
        EXPECT_EQ(v[0], ranks - 1);
        auto all = comm.allgather(std::string(static_cast<size_t>(comm.rank()), 'x'));
        ASSERT_EQ(static_cast<int>(all.size()), ranks);
        for (int r = 0; r < ranks; ++r)
          EXPECT_EQ(all[static_cast<size_t>(r)].size(), static_cast<size_t>(r));
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
  }
}

TEST(CommunicatorTest, ARankThatNeverComesMakesTheOthersFailWithinTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = on_ranks(
      3,
      [](Communicator& comm) {
        if (comm.rank() == 2) return;  // "dies" before the collective
        float x = 1;
        comm.allreduce_sum(&x, 1);
      },
      0.3);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(errors[0].find("did not answer"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("did not answer"), std::string::npos) << errors[1];
}

TEST(CommunicatorTest, MismatchedFieldsAreNamedOnEveryRank) {
  auto errors = on_ranks(3, [](Communicator& comm) {
    check_same_on_all_ranks(
        comm, {{"--model", "lenet"}, {"--lr", comm.rank() == 2 ? "0.2" : "0.1"}}, "flags");
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("disagree on their flags: --lr is 0.2 on rank 2 but 0.1 on rank 0"),
              std::string::npos)
        << e;
  auto agree = on_ranks(2, [](Communicator& comm) {
    check_same_on_all_ranks(comm, {{"--lr", "0.1"}}, "flags");
  });
  EXPECT_EQ(agree, (std::vector<std::string>{"", ""}));
}

TEST(CommunicatorTest, BroadcastFromRankZeroMakesEveryRankIdentical) {
  std::vector<uint64_t> sums(3);
  auto errors = on_ranks(3, [&](Communicator& comm) {
    Tensor a = Tensor::from_vector<float>(Shape{3}, {1.0f * static_cast<float>(comm.rank()), 2, 3});
    Tensor b = Tensor::from_vector<int32_t>(Shape{2}, {comm.rank(), 7});
    broadcast_from_rank0(comm, {&a, &b}, "weights");
    EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 2, 3}));
    EXPECT_EQ(b.to_vector<int32_t>(), (std::vector<int32_t>{0, 7}));
    sums[static_cast<size_t>(comm.rank())] = checksum({&a, &b});
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(sums[0], sums[2]);

  auto differ = on_ranks(2, [](Communicator& comm) {
    Tensor a = Tensor::from_vector<float>(Shape{1}, {static_cast<float>(comm.rank())});
    check_identical_on_all_ranks(comm, {&a}, "trained weights");
  });
  EXPECT_NE(differ[0].find("rank 1 holds other trained weights than rank 0"), std::string::npos)
      << differ[0];
}

}  // namespace
}  // namespace tower
