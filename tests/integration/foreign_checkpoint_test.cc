// Weights another tool wrote: `tower eval --checkpoint FILE.safetensors --model NAME` evaluates
// them from their tensors alone (safetensors.numpy.save_file, tower's variable names); a state
// file that tower did not write is named as such, never as damage.
#include <gtest/gtest.h>

#include "io/python_env.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"

namespace tower {
namespace {

using testing::contains;
using testing::run_tower;
using testing::TmpDir;

// The first precision @ 1 printed.
std::string precision_of(const std::string& output) {
  const size_t at = output.find("precision @ 1 = ");
  return at == std::string::npos ? "" : output.substr(at + 16, 6);
}

TEST(ForeignCheckpointTest, EvalReadsASafetensorsFileOfAnotherToolAsTheNamedModel) {
  std::string why;
  auto python = testing::python_with("numpy safetensors", &why);
  if (!python) GTEST_SKIP() << why;
  TmpDir tmp;
  const std::string dir = tmp / "train", file = tmp / "keras_weights.safetensors";
  ASSERT_EQ(run_tower("train --model lenet --max_steps 20 --train_dir " + dir).exit_code, 0);
  // The raw weights only, under their names, as a Python user saves a dict of arrays: no tower
  // metadata, no checksums, no state file.
  auto w = testing::run_shell(*python +
                              " -c \"from safetensors.numpy import load_file, save_file; "
                              "t = load_file('" +
                              dir +
                              "/model.ckpt-20.safetensors'); "
                              "save_file({k: v for k, v in t.items() if k.count('/') == 1}, '" +
                              file + "')\" 2>&1");
  ASSERT_EQ(w.exit_code, 0) << w.output;
  auto raw = run_tower("eval --run_once --no_ema --train_dir " + dir);
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  auto foreign =
      run_tower("eval --checkpoint " + file + " --model lenet --eval_dir " + (tmp / "eval"));
  EXPECT_EQ(foreign.exit_code, 0) << foreign.output;
  EXPECT_EQ(precision_of(foreign.output), precision_of(raw.output)) << foreign.output;

  // With a state file of its own beside it, plain eval says what it is and what to pass.
  testing::write_file(tmp / "keras_weights.json", R"({"epoch": 3, "optimizer": "adam"})");
  auto plain = run_tower("eval --checkpoint " + file);
  EXPECT_EQ(plain.exit_code, 1) << plain.output;
  EXPECT_TRUE(contains(plain.output, "not a state file written by `tower train`")) << plain.output;
  EXPECT_TRUE(contains(plain.output, "--model NAME")) << plain.output;
  EXPECT_FALSE(contains(plain.output, "damaged")) << plain.output;

  // Another model: the variable whose shape differs is named with both shapes.
  auto wrong = run_tower("eval --checkpoint " + file + " --model mlp");
  EXPECT_EQ(wrong.exit_code, 1) << wrong.output;
  EXPECT_TRUE(contains(wrong.output,
                       "as model mlp on fashion-mnist (test): variable 'fc1/weights' "
                       "has shape (3136, 256)"))
      << wrong.output;
}

}  // namespace
}  // namespace tower
