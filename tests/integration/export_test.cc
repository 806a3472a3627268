// `tower export` checked by the real client: the exported ONNX file, run by ONNX Runtime on a test
// split's pixels as they are in the files, reproduces `tower eval` (accuracy, top-1, logits).
// `tower predict` on image files written by Pillow gives eval's logits for the same images.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/python_env.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/tmp_dir.h"
#include "tower/data/dataset.h"

namespace tower {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_tower;
using testing::TmpDir;

// The precision @ 1 that `tower eval` printed.
double eval_precision(const std::string& output) {
  const size_t at = output.find("precision @ 1 = ");
  return at == std::string::npos ? -1 : std::stod(output.substr(at + 16));
}

class OnnxExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto python = testing::python_with("numpy onnx onnxruntime pillow", &why);
    if (!python) GTEST_SKIP() << why;
    python_ = *python;
  }

  // Trains `train_args` into a train dir, evaluates it (logits saved), exports it, and runs
  // check_onnx.py on the test split: its JSON report, checked against eval's printed accuracy.
  nlohmann::json train_export_check(const std::string& train_args, const std::string& format,
                                    const std::string& data_dir,
                                    const std::string& export_args = "",
                                    const std::string& eval_args = "") {
    const std::string dir = tmp_ / "train", logits = tmp_ / "logits.npy",
                      model = tmp_ / "model.onnx";
    auto r = run_tower("train " + train_args + " --train_dir " + dir);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto e = run_tower("eval --run_once --train_dir " + dir + " --save_logits " + logits + " " +
                       eval_args);
    EXPECT_EQ(e.exit_code, 0) << e.output;
    auto x = run_tower("export --train_dir " + dir + " --out " + model + " " + export_args);
    EXPECT_EQ(x.exit_code, 0) << x.output;
    EXPECT_TRUE(contains(x.output, "ONNX opset 17")) << x.output;
    auto c =
        testing::run_shell(python_ + " " + TOWER_SOURCE_DIR + "/tests/integration/check_onnx.py " +
                           model + " " + format + " " + data_dir + " " + logits + " 2>&1");
    EXPECT_EQ(c.exit_code, 0) << c.output;
    nlohmann::json report;
    try {
      report = nlohmann::json::parse(c.output.substr(c.output.rfind("\n{") + 1));
    } catch (const std::exception&) {
      ADD_FAILURE() << c.output;
      return report;
    }
    // The same decisions on every image, logits within rtol 1e-4 / atol 1e-5, and the accuracy
    // eval printed (to its 4 digits; exactly from eval's own logits).
    EXPECT_EQ(report["top1_differs"], 0) << report;
    EXPECT_TRUE(report["within_tolerance"]) << report;
    EXPECT_EQ(report["accuracy"], report["tower_accuracy"]) << report;
    EXPECT_NEAR(report["accuracy"].get<double>(), eval_precision(e.output), 5.01e-5) << e.output;
    EXPECT_LT(report["probabilities_sum"].get<double>(), 1e-5) << report;
    return report;
  }

  std::string make_cifar10(int64_t test) {
    const std::string data = tmp_ / "cifar";
    auto r = run_tower("make-dataset --format cifar10 --num_train 640 --num_test " +
                       std::to_string(test) + " --out " + data);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return data;
  }

  TmpDir tmp_;
  std::string python_;
};

// The default model on all 10,000 Fashion-MNIST test images, the class names in the metadata,
// uint8 NHWC with a dynamic batch as the input.
TEST_F(OnnxExportTest, LenetOnFashionMnistMatchesEvalInOnnxRuntime) {
  nlohmann::json report =
      train_export_check("--model lenet --max_steps 40", "idx", std::string(kFashionMnistDir));
  EXPECT_EQ(report["examples"], 10000);
  EXPECT_EQ(report["input"], nlohmann::json::parse(R"j(["tensor(uint8)", ["N", 28, 28, 1]])j"));
  EXPECT_EQ(report["classes"][0], "T-shirt/top");
  EXPECT_EQ(report["classes"][9], "Ankle boot");
  EXPECT_EQ(report["opset"], 17);
}

TEST_F(OnnxExportTest, Float32InputOfTheSamePixels) {
  nlohmann::json report =
      train_export_check("--model lenet --max_steps 10", "idx", std::string(kFashionMnistDir),
                         "--input_type float32 --no_ema", "--no_ema");
  EXPECT_EQ(report["input"][0], "tensor(float)");
}

// The tutorial CNN: a central crop and per-image standardization inside the graph, LRN.
TEST_F(OnnxExportTest, Cifar10CropAndStandardizationInsideTheGraph) {
  const std::string data = make_cifar10(500);
  train_export_check("--model cifar10 --data cifar10:" + data + " --max_steps 30 --batch_size 32",
                     "cifar10", data);
}

// Batch norms folded into the convolutions, residual additions, global average pooling.
TEST_F(OnnxExportTest, Resnet20WithFoldedBatchNorms) {
  const std::string data = make_cifar10(300);
  train_export_check("--model resnet20 --data cifar10:" + data + " --max_steps 100 --batch_size 32",
                     "cifar10", data);
}

// torchvision's architectures at CIFAR size: given (PyTorch) padding in convolutions and max
// pooling, bottleneck blocks (resnet50); depthwise convolutions, ReLU6 as Clip and linear
// bottlenecks (mobilenet_v2).
TEST_F(OnnxExportTest, Resnet50AtCifarSize) {
  const std::string data = make_cifar10(200);
  train_export_check("--model resnet50 --data cifar10:" + data +
                         " --max_steps 10 --batch_size 16 --precise_bn off",
                     "cifar10", data);
}
TEST_F(OnnxExportTest, MobileNetV2AtCifarSize) {
  const std::string data = make_cifar10(200);
  train_export_check("--model mobilenet_v2 --data cifar10:" + data +
                         " --max_steps 10 --batch_size 16 --precise_bn off",
                     "cifar10", data);
}

// A model file with every layer type: LRN, SAME pools, tanh/elu/sigmoid, a batch norm after an
// activation (kept as BatchNormalization) and one on dense features, dropout (gone).
TEST_F(OnnxExportTest, ModelFileWithEveryLayerType) {
  train_export_check(std::string("--model_file ") + TOWER_SOURCE_DIR +
                         "/tests/integration/every_layer.json --max_steps 60",
                     "idx", std::string(kFashionMnistDir));
}

// Files a user has (Pillow's PNGs, a larger JPEG, a corrupt file): predict names the corrupt
// one, still predicts the others, exits 1; its logits are eval's for the same images.
TEST_F(OnnxExportTest, PredictOnImageFilesGivesEvalsLogits) {
  const std::string dir = tmp_ / "train", images = tmp_ / "images";
  ASSERT_EQ(run_tower("train --model lenet --max_steps 20 --train_dir " + dir).exit_code, 0);
  auto e = run_tower("eval --run_once --train_dir " + dir + " --save_logits " + (tmp_ / "l.npy"));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto w = testing::run_shell(python_ + " " + TOWER_SOURCE_DIR +
                              "/tests/integration/write_images.py idx " +
                              std::string(kFashionMnistDir) + " " + images + " 6 2>&1");
  ASSERT_EQ(w.exit_code, 0) << w.output;
  auto p = testing::run_shell(testing::tower_binary() + " predict --json --train_dir " + dir + " " +
                              images + " 2>" + (tmp_ / "err.txt"));
  EXPECT_EQ(p.exit_code, 1) << p.output;
  const std::string err = testing::read_file(tmp_ / "err.txt");
  EXPECT_TRUE(contains(err, "corrupt.png")) << err;
  EXPECT_TRUE(contains(err, "1 of 8 images could not be read")) << err;
  std::istringstream lines(p.output);
  std::string line;
  std::vector<nlohmann::json> predictions;
  while (std::getline(lines, line)) predictions.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(predictions.size(), 7u) << p.output;  // 0000..0005.png, large.jpg
  // eval's logits of the first six test images, from its .npy (float32, C order).
  const std::string npy = testing::read_file(tmp_ / "l.npy");
  const size_t data = npy.size() - 10000 * 10 * sizeof(float);
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(predictions[i]["file"].get<std::string>().ends_with(fmt::format("{:04}.png", i)));
    for (int c = 0; c < 10; ++c) {
      float want;
      std::memcpy(&want, npy.data() + data + (i * 10 + c) * sizeof(float), sizeof(float));
      EXPECT_NEAR(predictions[i]["logits"][c].get<float>(), want, 1e-5 + 1e-4 * std::abs(want))
          << i << " " << c;
    }
    EXPECT_EQ(predictions[i]["top"].size(), 3u);
  }
  // The larger JPEG (image 0, 3x larger, RGB) is brought to 28x28 grey: the same class.
  EXPECT_EQ(predictions[6]["top"][0]["class"], predictions[0]["top"][0]["class"]) << p.output;
  // Plain output: a class name per image.
  auto plain = run_tower("predict --train_dir " + dir + " " + images + "/0001.png");
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_TRUE(
      contains(plain.output, "0001.png: " + predictions[1]["top"][0]["class"].get<std::string>()))
      << plain.output;
}

// A damaged checkpoint is named, an unwritable output is named, and neither leaves a file (nor
// touches one already there).
TEST_F(OnnxExportTest, BadInputNamesTheFileAndWritesNothing) {
  const std::string dir = tmp_ / "train";
  ASSERT_EQ(run_tower("train --model lenet --max_steps 2 --train_dir " + dir).exit_code, 0);
  auto missing = run_tower("export --train_dir " + dir + " --out " + (tmp_ / "no/dir/m.onnx"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(contains(missing.output, tmp_ / "no/dir/m.onnx")) << missing.output;
  EXPECT_FALSE(fs::exists(tmp_ / "no"));

  const std::string out = tmp_ / "m.onnx";
  testing::write_file(out, "previous");
  const std::string tensors = dir + "/model.ckpt-2.safetensors";
  fs::resize_file(tensors, fs::file_size(tensors) / 2);
  auto damaged = run_tower("export --train_dir " + dir + " --checkpoint model.ckpt-2 --out " + out);
  EXPECT_EQ(damaged.exit_code, 1);
  EXPECT_TRUE(contains(damaged.output, "model.ckpt-2.safetensors")) << damaged.output;
  EXPECT_EQ(testing::read_file(out), "previous");
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp_.path()), {}), 2);  // train/, m.onnx

  auto format = run_tower("export --train_dir " + dir + " --format tflite --out " + out);
  EXPECT_EQ(format.exit_code, 1);
  EXPECT_TRUE(contains(format.output, "--format 'tflite': expected onnx")) << format.output;
}

}  // namespace
}  // namespace tower
