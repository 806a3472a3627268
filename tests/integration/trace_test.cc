// `tower train --trace FILE`: the trace-event JSON has a lane per thread with the expected slices,
// and Perfetto's trace processor reads it the same way (where it can be had).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/python_env.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"

namespace tower {
namespace {

using testing::run_tower;
using testing::TmpDir;

class TraceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Team mode: in contended mode (on a loaded machine) a tower's thread also runs the other
    // tower's kernels, and the per-lane slice counts below would move between lanes.
    dir_ = new TmpDir();
    auto data = run_tower("make-dataset --format cifar10 --out " + (*dir_ / "data") +
                          " --num_train 500 --num_test 100 --seed 4");
    ASSERT_EQ(data.exit_code, 0) << data.output;
    auto r = run_tower(
        "train --model cifar10 --data cifar10:" + (*dir_ / "data") +
        " --num_devices 2 --batch_size 8 --max_steps 5 --num_preprocess_threads 2 --contention off"
        " --trace " +
        trace() + " --trace_steps 3 --train_dir " + (*dir_ / "run"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    output_ = new std::string(r.output);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete output_;
  }
  static std::string trace() { return *dir_ / "trace.json"; }
  static TmpDir* dir_;
  static std::string* output_;
};
TmpDir* TraceTest::dir_ = nullptr;
std::string* TraceTest::output_ = nullptr;

// Lane -> slice name -> count, from the JSON file.
std::map<std::string, std::map<std::string, int>> slices_by_lane(const std::string& path) {
  std::ifstream in(path);
  const nlohmann::json json = nlohmann::json::parse(in);
  std::map<int, std::string> lane;
  for (const auto& e : json.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      lane[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
  std::map<std::string, std::map<std::string, int>> slices;
  for (const auto& e : json.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int tid = e.at("tid").get<int>();
    EXPECT_TRUE(lane.count(tid)) << "a slice on an unnamed lane: " << e.dump();
    EXPECT_GE(e.at("dur").get<double>(), 0);
    ++slices[lane.count(tid) ? lane.at(tid) : "?"][e.at("name").get<std::string>()];
  }
  return slices;
}

TEST_F(TraceTest, EveryThreadHasItsLaneWithTheSlicesOfThreeSteps) {
  EXPECT_NE(output_->find("trace of 3 steps written to " + trace()), std::string::npos) << *output_;
  auto slices = slices_by_lane(trace());
  for (const std::string name : {"main (rank 0)", "tower 0 (cpu:0)", "tower 1 (cpu:1)"})
    EXPECT_TRUE(slices.count(name)) << "no lane '" << name << "'";
  EXPECT_EQ(slices["main (rank 0)"]["optimizer"], 3);
  EXPECT_EQ(slices["main (rank 0)"]["towers: forward, backward, reduce"], 3);
  // cifar10: 2 convolutions forward (each fused with its bias and ReLU), 2 filter gradients (each
  // with its bias gradient) and 1 input gradient per step and tower.
  for (const std::string tower : {"tower 0 (cpu:0)", "tower 1 (cpu:1)"}) {
    EXPECT_EQ(slices[tower]["Conv2D+BiasAdd+Relu"], 6) << tower;
    EXPECT_EQ(slices[tower]["Conv2DBackpropFilter+BiasAddGrad"], 6) << tower;
    EXPECT_EQ(slices[tower]["Conv2DBackpropInput"], 3) << tower;
  }
  // One bucket (the model's 4.3 MB of gradients fit in the default 25 MB) in 4 chunks (2 per
  // tower), taken by the towers' threads once done: 4 slices per step.
  int chunks = 0;
  for (auto& [lane, names] : slices) {
    chunks += names["reduce bucket"];
    names.erase("reduce bucket");
  }
  EXPECT_EQ(chunks, 12);
  EXPECT_EQ(slices["tower 0 (cpu:0)"], slices["tower 1 (cpu:1)"]);
  // The workers run up to 4 batches ahead: at least the batch that the first step's frees a place
  // for is made while the trace records, by whichever worker is free.
  EXPECT_GE(slices["input worker 0"]["batch"] + slices["input worker 1"]["batch"], 1);
}

TEST_F(TraceTest, PerfettoTraceProcessorReadsTheSameLanes) {
  std::string why;
  auto python = testing::python_with("perfetto", &why);
  if (!python) GTEST_SKIP() << why;
  auto r = testing::run_python(*python, "perfetto_check.py " + trace(), dir_->path());
  if (r.exit_code == 3) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json lanes = nlohmann::json::parse(r.output).at("lanes");
  EXPECT_GT(lanes.value("tower 0 (cpu:0)", 0), 15);
  EXPECT_GE(lanes.value("main (rank 0)", 0), 6);
  for (const auto& [lane, names] : slices_by_lane(trace())) {
    int n = 0;
    for (const auto& [name, count] : names) n += count;
    EXPECT_EQ(lanes.value(lane, 0), n) << lane;
  }
}

}  // namespace
}  // namespace tower
