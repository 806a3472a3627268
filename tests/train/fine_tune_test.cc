// Starting from other weights (read_init_from) and freezing (resolve_freeze, Scope::with_frozen):
// torchvision's and timm's names found for every variable, a new head re-initialized, anything
// else that does not fit named, frozen layers left out of the gradients.
#include "tower/train/fine_tune.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "testing/errors.h"
#include "testing/tmp_dir.h"
#include "tower/core/error.h"
#include "tower/core/sha256.h"
#include "tower/graph/gradients.h"
#include "tower/io/safetensors.h"
#include "tower/ops/math.h"

namespace tower {
namespace {

using testing::error_of;
using testing::TmpDir;

const Shape kInput{3, 32, 32};  // the variables' shapes do not depend on the image size

// A tensor of `shape` whose values tell where they came from: seed + index / 1000.
Tensor numbered(const Shape& shape, float seed) {
  Tensor t(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = seed + static_cast<float>(i) / 1000;
  return t;
}

// A file holding every variable of `model` under the name `name_of` gives it (transposed where
// the foreign name says so), with PyTorch's batch counters, built for `classes` classes.
struct ForeignFile {
  std::map<std::string, Tensor> tensors;  // by the file's names
  std::map<std::string, std::string> variable_of;
};
ForeignFile foreign_file(const ModelDef& model, int classes, size_t which) {
  ForeignFile f;
  float seed = 0;
  for (const InitVariable& v : model_variables(model, kInput, classes)) {
    const std::vector<ForeignName> names = model.foreign_names(v.name);
    EXPECT_GT(names.size(), which) << v.name;
    if (names.size() <= which) continue;
    const ForeignName& n = names[which];
    const Shape shape = n.transposed ? Shape{v.shape[1], v.shape[0]} : v.shape;
    EXPECT_TRUE(f.tensors.emplace(n.key, numbered(shape, seed++)).second) << n.key << " twice";
    f.variable_of[n.key] = v.name;
    if (v.name.ends_with("moving_variance")) {
      const std::string counter =
          n.key.substr(0, n.key.size() - std::string("running_var").size()) + "num_batches_tracked";
      f.tensors.emplace(counter, Tensor::from_vector<int64_t>(Shape{}, {7}));
    }
  }
  return f;
}

void write(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  std::vector<std::pair<std::string, const Tensor*>> list;
  for (const auto& [name, t] : tensors) list.push_back({name, &t});
  safetensors_write(path, list);
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
}

// torchvision's names (and timm's, for MobileNetV2) reach every variable, each value lands where
// it belongs (the linear layer transposed), the batch counters are skipped, and the run records
// the file's sha256.
TEST(FineTuneTest, ReadsTorchvisionAndTimmNamesIntoEveryVariable) {
  for (const auto& [name, which] : std::vector<std::pair<std::string, size_t>>{
           {"resnet18", 0}, {"resnet50", 0}, {"mobilenet_v2", 0}, {"mobilenet_v2", 1}}) {
    SCOPED_TRACE(name + (which ? " (timm)" : ""));
    const ModelDef& model = get_model(name);
    const std::vector<InitVariable> variables = model_variables(model, kInput, 1000);
    ForeignFile file = foreign_file(model, 1000, which);
    TmpDir tmp;
    write(tmp / "w.safetensors", file.tensors);
    const InitFrom init = read_init_from(tmp / "w.safetensors", model, variables, false);
    EXPECT_EQ(init.loaded, variables.size());
    EXPECT_TRUE(init.reinitialized.empty() && init.missing.empty() && init.ignored.empty());
    EXPECT_EQ(init.counters, static_cast<int64_t>(file.tensors.size() - variables.size()));
    EXPECT_EQ(init.skipped, 0);
    EXPECT_EQ(init.sha256, sha256_file(tmp / "w.safetensors"));
    for (const auto& [key, variable] : file.variable_of) {
      const Tensor& given = file.tensors.at(key);
      const Tensor& got = init.values.at(variable);
      if (given.shape() == got.shape()) {
        EXPECT_TRUE(same(given, got)) << key;
        continue;
      }
      const int64_t rows = given.shape()[0], cols = given.shape()[1];  // (out, in) -> (in, out)
      ASSERT_EQ(got.shape(), (Shape{cols, rows})) << key;
      EXPECT_EQ(got.data<float>()[1 * rows + 2], given.data<float>()[2 * cols + 1]) << key;
    }
  }
}

// The classifier of another class count starts anew, said as such; so does a head the file lacks
// (a backbone saved without it).
TEST(FineTuneTest, AHeadOfOtherClassesIsReinitialized) {
  const ModelDef& model = get_model("resnet18");
  ForeignFile file = foreign_file(model, 1000, 0);
  TmpDir tmp;
  write(tmp / "w.safetensors", file.tensors);
  const std::vector<InitVariable> variables = model_variables(model, kInput, 5);
  InitFrom init = read_init_from(tmp / "w.safetensors", model, variables, false);
  EXPECT_EQ(init.loaded, variables.size() - 2);
  ASSERT_EQ(init.reinitialized.size(), 2u);
  EXPECT_NE(init.reinitialized[0].find("fc/weights: the file's 'fc.weight' is (1000, 512)"),
            std::string::npos)
      << init.reinitialized[0];
  EXPECT_NE(init.report(variables.size()).find("2 re-initialized"), std::string::npos);
  file.tensors.erase("fc.weight");
  file.tensors.erase("fc.bias");
  write(tmp / "backbone.safetensors", file.tensors);
  init = read_init_from(tmp / "backbone.safetensors", model, variables, false);
  EXPECT_EQ(init.reinitialized.size(), 2u);
  EXPECT_NE(init.reinitialized[1].find("not in the file (a new head)"), std::string::npos);
}

// Any other tensor that is missing or shaped otherwise stops the run naming it, both shapes and
// --init_partial; with it, they are listed and start as initialized.
TEST(FineTuneTest, MissingOrMisshapenTensorsAreNamed) {
  const ModelDef& model = get_model("resnet18");
  ForeignFile file = foreign_file(model, 1000, 0);
  file.tensors.erase("layer2.1.bn2.running_mean");
  file.tensors.insert_or_assign("layer1.0.conv1.weight", numbered(Shape{64, 64, 1, 1}, 0));
  TmpDir tmp;
  write(tmp / "w.safetensors", file.tensors);
  const std::vector<InitVariable> variables = model_variables(model, kInput, 1000);
  const std::string error =
      error_of([&] { read_init_from(tmp / "w.safetensors", model, variables, false); });
  for (const char* part :
       {"2 of its 102 variables", "layer2/1/conv2/moving_mean: not in the file",
        "layer1/0/conv1/weights: the file's 'layer1.0.conv1.weight' is (64, 64, 1, 1), the "
        "model's (64, 64, 3, 3)",
        "--init_partial"})
    EXPECT_NE(error.find(part), std::string::npos) << part << "\n" << error;
  const InitFrom init = read_init_from(tmp / "w.safetensors", model, variables, true);
  EXPECT_EQ(init.missing.size(), 2u);
  EXPECT_EQ(init.loaded, variables.size() - 2);
}

// A file of another model entirely, a missing path and a damaged file are named.
TEST(FineTuneTest, FilesThatFitNothingAreNamed) {
  TmpDir tmp;
  const ModelDef& model = get_model("resnet18");
  const std::vector<InitVariable> variables = model_variables(model, kInput, 10);
  std::map<std::string, Tensor> other;
  other.emplace("dense/kernel", numbered(Shape{4, 4}, 0));
  write(tmp / "other.safetensors", other);
  EXPECT_NE(error_of([&] {
              read_init_from(tmp / "other.safetensors", model, variables, false);
            }).find("none of its 1 tensors fits model resnet18"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              read_init_from(tmp / "nothing", model, variables, false);
            }).find("no such safetensors file or tower checkpoint"),
            std::string::npos);
  std::ofstream(tmp / "cut.safetensors", std::ios::binary) << "\x10\0\0\0\0\0\0\0{\"a\":";
  EXPECT_NE(error_of([&] {
              read_init_from(tmp / "cut.safetensors", model, variables, false);
            }).find("cut.safetensors"),
            std::string::npos);
}

TEST(FineTuneTest, FreezeNamesScopesOrTheBackbone) {
  const std::vector<InitVariable> variables = model_variables(get_model("resnet18"), kInput, 10);
  EXPECT_EQ(resolve_freeze("", variables), std::vector<std::string>{});
  EXPECT_EQ(resolve_freeze("backbone", variables),
            (std::vector<std::string>{"conv1", "layer1", "layer2", "layer3", "layer4"}));
  EXPECT_EQ(resolve_freeze("conv1,layer1.0", variables),
            (std::vector<std::string>{"conv1", "layer1/0"}));
  const std::string error = error_of([&] { resolve_freeze("conv1,layer9", variables); });
  EXPECT_NE(error.find("no variable of the model lies under 'layer9' (its scopes: conv1, layer1, "
                       "layer2, layer3, layer4, fc, or backbone)"),
            std::string::npos)
      << error;
  EXPECT_NE(frozen_line({"conv1"}, variables, {}).find("frozen: conv1 (5 variables, 9664 values)"),
            std::string::npos);
  EXPECT_EQ(frozen_line({}, variables, {}), "");
}

// A frozen scope's variables are not trainable, its batch norms run as in inference (no moving
// average update), its weight decay is left out, and the gradients stop before it.
TEST(FineTuneTest, FrozenScopesBuildNoTrainingOps) {
  const auto build = [](Graph& graph, const std::vector<std::string>& frozen) {
    const Scope scope = Scope(graph).with_frozen(frozen);
    const Value images = scope.placeholder("images", Shape{2, 3, 32, 32});
    ModelOutputs out = get_model("resnet18").build(scope, images, 10, Mode::train);
    std::vector<Value> xs;
    for (const VariableInfo& v : graph.trainable_variables()) xs.push_back(v.value);
    gradients(scope.name_scope("gradients"), ops::reduce_mean(scope, out.logits), xs);
    return out;
  };
  Graph whole, graph;
  const ModelOutputs all = build(whole, {});
  const ModelOutputs out = build(graph, {"conv1", "layer1"});
  std::set<std::string> trainable;
  for (const VariableInfo& v : graph.trainable_variables()) trainable.insert(v.name);
  EXPECT_EQ(trainable.count("conv1/weights") + trainable.count("layer1/1/conv2/gamma"), 0u);
  EXPECT_EQ(trainable.count("layer2/0/conv1/weights"), 1u);
  // 20 batch norms, 5 of them frozen (conv1's, layer1's four): no moving-average updates; the
  // weight decay of their 5 convolutions is left out.
  EXPECT_EQ(all.updates.size() - out.updates.size(), 2 * 5u);
  EXPECT_EQ(whole.get_collection("losses").size() - graph.get_collection("losses").size(), 5u);
  // The backward pass stops at layer2: no filter gradient of a frozen convolution, and none
  // of conv1's input either.
  const auto count = [](const Graph& g, const std::string& op) {
    return std::count_if(g.nodes().begin(), g.nodes().end(),
                         [&](const auto& n) { return n->op == op; });
  };
  EXPECT_EQ(count(whole, "Conv2DBackpropFilter") - count(graph, "Conv2DBackpropFilter"), 5);
}

}  // namespace
}  // namespace tower

namespace tower {
namespace {

// --dropout sets every dropout layer's rate (0: none is built), as timm's drop_rate.
TEST(FineTuneTest, TheRunsDropoutReplacesTheModels) {
  const auto dropouts = [](float rate) {
    Graph graph;
    const Scope scope = Scope(graph).with_dropout(rate);
    get_model("mobilenet_v2")
        .build(scope, scope.placeholder("images", Shape{2, 3, 32, 32}), 10, Mode::train);
    return std::count_if(graph.nodes().begin(), graph.nodes().end(),
                         [](const auto& n) { return n->op == "Dropout"; });
  };
  EXPECT_EQ(dropouts(-1), 1);  // the model's 0.2
  EXPECT_EQ(dropouts(0), 0);
  EXPECT_EQ(dropouts(0.5f), 1);
}

}  // namespace
}  // namespace tower
