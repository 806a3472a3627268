// The fixed tree over micro-batches: its nodes, and the same bits whatever the towers and ranks
// that hold the micro-batches.
#include "tower/parallel/tree_reducer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>

#include "tower/core/philox.h"

namespace tower {
namespace {

TEST(TreeTest, SiblingsAreAlignedNeighboursOfOneLevel) {
  EXPECT_TRUE(tree_siblings({0, 1}, {1, 2}, 8));
  EXPECT_TRUE(tree_siblings({4, 6}, {6, 8}, 8));
  EXPECT_FALSE(tree_siblings({1, 2}, {2, 3}, 8));  // children of different nodes
  EXPECT_FALSE(tree_siblings({0, 2}, {2, 3}, 8));  // [2, 3) is not a level-1 node of 8
  EXPECT_TRUE(tree_siblings({0, 2}, {2, 3}, 3));   // ... but it is of 3 (the odd one moved up)
  EXPECT_TRUE(tree_siblings({0, 4}, {4, 5}, 5));
  EXPECT_FALSE(tree_siblings({0, 3}, {3, 4}, 8));  // a left child is a power of two wide
}

TEST(TreeTest, CoverIsTheLargestNodesInsideARun) {
  using V = std::vector<TreeSpan>;
  EXPECT_EQ(tree_cover(0, 8, 8), (V{{0, 8}}));
  EXPECT_EQ(tree_cover(0, 6, 6), (V{{0, 6}}));
  EXPECT_EQ(tree_cover(0, 6, 8), (V{{0, 4}, {4, 6}}));
  EXPECT_EQ(tree_cover(1, 7, 8), (V{{1, 2}, {2, 4}, {4, 6}, {6, 7}}));
  EXPECT_EQ(tree_cover(3, 6, 6), (V{{3, 4}, {4, 6}}));
}

// Micro-batch m's gradient: two variables of 5 and 3 floats, values of mixed magnitude so that
// the order of additions shows in the bits.
std::vector<Tensor> leaf(int64_t m) {
  std::vector<Tensor> g;
  g.emplace_back(Shape{5}, DType::f32);
  g.emplace_back(Shape{3}, DType::f32);
  Philox rng(9, static_cast<uint64_t>(m));
  int64_t k = 0;
  for (Tensor& t : g)
    for (int64_t i = 0; i < t.numel(); ++i, ++k)
      t.data<float>()[i] =
          (rng.uniform(static_cast<uint64_t>(k)) - 0.5f) * (k % 2 == 0 ? 1e6f : 1e-3f);
  return g;
}

// The tree written out recursively: the reference every layout must match bitwise.
std::vector<float> reference(int64_t n) {
  std::function<std::vector<float>(TreeSpan)> sum = [&](TreeSpan s) {
    if (s.hi - s.lo == 1) {
      std::vector<float> out;
      for (const Tensor& t : leaf(s.lo))
        for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<float>()[i]);
      return out;
    }
    int64_t half = 1;  // the left child: the largest power of two below the width
    while (half * 2 < s.hi - s.lo) half *= 2;
    auto a = sum({s.lo, s.lo + half}), b = sum({s.lo + half, s.hi});
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  };
  auto root = sum({0, n});
  for (float& x : root) x *= 1.0f / static_cast<float>(n);
  return root;
}

// One rank: its towers add their micro-batches (each tower on its own thread), then finish().
std::vector<float> reduce_on_rank(int64_t n, int rank, int ranks, std::vector<int64_t> counts,
                                  Communicator* comm, float* mean_loss) {
  MicroBatchLayout layout{n, rank * (n / ranks), counts};
  TreeReducer tree({Shape{5}, Shape{3}}, 2, layout, 1, comm);
  for (int step = 0; step < 2; ++step) {  // buffers are reused from step to step
    tree.begin_step();
    std::vector<std::thread> towers;
    int64_t first = layout.rank_first;
    for (size_t t = 0; t < counts.size(); ++t) {
      towers.emplace_back([&tree, t, first, count = counts[t]] {
        for (int64_t m = first; m < first + count; ++m) {
          auto g = leaf(m);
          const float loss = static_cast<float>(m);
          tree.add(static_cast<int>(t), m, {&g[0], &g[1]}, &loss);
        }
      });
      first += counts[t];
    }
    for (auto& t : towers) t.join();
    tree.finish();
  }
  std::vector<float> out;
  for (int v = 0; v < 2; ++v) {
    EXPECT_EQ(std::memcmp(tree.result(0, v).raw_data(), tree.result(1, v).raw_data(),
                          tree.result(0, v).nbytes()),
              0);
    for (int64_t i = 0; i < tree.result(0, v).numel(); ++i)
      out.push_back(tree.result(0, v).data<float>()[i]);
  }
  *mean_loss = tree.mean_scalars()[0];
  return out;
}

TEST(TreeReducerTest, EveryPlacementGivesTheBitsOfTheTree) {
  for (int64_t n : {1, 2, 5, 6, 8, 12}) {
    const std::vector<float> expected = reference(n);
    const float expected_loss = static_cast<float>(n - 1) / 2;  // mean of 0 .. n-1
    // Towers per rank, ranks: every split of the micro-batches into contiguous runs.
    for (int ranks : {1, 2, 3}) {
      if (n % ranks != 0) continue;
      const int64_t per_rank = n / ranks;
      for (int64_t towers = 1; towers <= std::min<int64_t>(per_rank, 4); ++towers) {
        SCOPED_TRACE(::testing::Message()
                     << n << " micro-batches, " << ranks << " ranks x " << towers << " towers");
        std::vector<int64_t> counts;  // uneven: the first towers take one more
        for (int64_t t = 0; t < towers; ++t)
          counts.push_back(per_rank / towers + (t < per_rank % towers ? 1 : 0));
        auto comms = make_thread_communicators(ranks);
        std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
        std::vector<float> losses(static_cast<size_t>(ranks));
        std::vector<std::thread> threads;
        for (int r = 0; r < ranks; ++r)
          threads.emplace_back([&, r] {
            results[static_cast<size_t>(r)] =
                reduce_on_rank(n, r, ranks, counts, comms[static_cast<size_t>(r)].get(),
                               &losses[static_cast<size_t>(r)]);
          });
        for (auto& t : threads) t.join();
        for (int r = 0; r < ranks; ++r) {
          EXPECT_EQ(std::memcmp(results[static_cast<size_t>(r)].data(), expected.data(),
                                expected.size() * sizeof(float)),
                    0)
              << "rank " << r;
          EXPECT_FLOAT_EQ(losses[static_cast<size_t>(r)], expected_loss);
        }
      }
    }
  }
}

TEST(TreeReducerTest, TheTreeIsNotTheLeftToRightSum) {
  // The check above would be empty if every order gave the same bits for these values.
  const int64_t n = 8;
  std::vector<float> running(8, 0.0f);
  for (int64_t m = 0; m < n; ++m) {
    int64_t k = 0;
    for (const Tensor& t : leaf(m))
      for (int64_t i = 0; i < t.numel(); ++i)
        running[static_cast<size_t>(k++)] += t.data<float>()[i];
  }
  for (float& x : running) x *= 1.0f / static_cast<float>(n);
  EXPECT_NE(std::memcmp(running.data(), reference(n).data(), running.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace tower
