// `tower bench` in contended mode: --contention on|off (or TOWER_CONTENTION) picks the mode of a
// 2-thread team, and the JSON line says how many steps ran in it (ProgramOptions::contention);
// another value is an error that names it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/subprocess.h"

namespace tower {
namespace {
using testing::run_command;
using testing::tower_binary;

nlohmann::json bench(const std::string& contention, const std::string& mode) {
  const auto r =
      run_command(tower_binary() + " bench --model lenet --mode " + mode + " --contention " +
                  contention + " --threads 2 --batch_size 64 --steps 2 --windows 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output.substr(r.output.rfind("{\"")));
}

TEST(BenchCliTest, ContentionFlagTurnsContendedModeOnAndOff) {
  for (const std::string mode : {"train", "infer"}) {
    const nlohmann::json on = bench("on", mode), off = bench("off", mode);
    EXPECT_GE(on.at("contended_runs").get<int>(), 3) << mode << ": warm-up and the timed steps";
    EXPECT_EQ(off.at("contended_runs").get<int>(), 0) << mode;
    EXPECT_GT(on.at("images_per_sec").get<double>(), 0) << mode;
    EXPECT_GT(off.at("images_per_sec").get<double>(), 0) << mode;
  }
}

TEST(BenchCliTest, UnknownContentionValueIsOneClearError) {
  const auto r = run_command("TOWER_CONTENTION=yes " + tower_binary() +
                             " bench --model lenet --threads 2 --steps 1 --windows 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("TOWER_CONTENTION=yes: expected on, off or auto"), std::string::npos)
      << r.output;
  const auto flag = run_command(tower_binary() + " bench --model lenet --contention maybe");
  EXPECT_EQ(flag.exit_code, 1) << flag.output;
  EXPECT_NE(flag.output.find("--contention maybe: expected on, off or auto"), std::string::npos)
      << flag.output;
}

// One meaning of --batch_size across sub-commands: per tower, as in train; the whole step's is
// --global_batch_size, as in train's micro-batch mode.
TEST(BenchCliTest, BatchSizeIsPerTowerAsInTrainAndGlobalBatchSizeIsTheStep) {
  auto json_of = [](const std::string& flags) {
    const auto r =
        run_command(tower_binary() + " bench --model lenet --num_devices 2 --threads 2 " +
                    "--steps 1 --windows 1 " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.rfind("{\"")));
  };
  const nlohmann::json per_tower = json_of("--batch_size 16");
  EXPECT_EQ(per_tower.at("batch_size"), 16);
  EXPECT_EQ(per_tower.at("global_batch_size"), 32);
  const nlohmann::json global = json_of("--global_batch_size 16");
  EXPECT_EQ(global.at("batch_size"), 8);
  EXPECT_EQ(global.at("global_batch_size"), 16);
  const auto both =
      run_command(tower_binary() + " bench --model lenet --batch_size 8 --global_batch_size 16");
  EXPECT_EQ(both.exit_code, 1) << both.output;
  EXPECT_NE(both.output.find("--batch_size (per tower) and --global_batch_size"), std::string::npos)
      << both.output;
}

// --no_fusion and --plain_layouts reach the programs, and so do the variables the CLI takes in
// their place (TOWER_FUSION=off, TOWER_LAYOUTS=plain): the JSON line's program statistics.
TEST(BenchCliTest, FusionAndLayoutSwitchesReachThePrograms) {
  auto json_of = [](const std::string& env, const std::string& flags) {
    const auto r =
        run_command(env + tower_binary() + " bench --model cifar10 --mode " +
                    "train --global_batch_size 16 --threads 1 --steps 1 --windows 1 " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.rfind("{\"")));
  };
  EXPECT_GT(json_of("", "").at("fused_nodes").get<int>(), 0);
  EXPECT_EQ(json_of("", "--no_fusion").at("fused_nodes"), 0);
  EXPECT_EQ(json_of("TOWER_FUSION=off ", "").at("fused_nodes"), 0);
  EXPECT_EQ(json_of("TOWER_LAYOUTS=plain ", "").at("reorders"),
            json_of("", "--plain_layouts").at("reorders"));
}

}  // namespace
}  // namespace tower
