// Model files (docs/model_file.md): the example files describe the built-in models exactly, and
// every bad file is one error naming the file, the layer and the key.
#include "tower/models/model_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace tower {
namespace {

std::string read_example(const std::string& name) {
  std::ifstream in(std::string(TOWER_SOURCE_DIR) + "/examples/models/" + name + ".json");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Variables (name, shape, initializer, trainable) and "losses" terms of a model's graph.
struct Built {
  std::vector<std::string> variables;
  size_t losses = 0, updates = 0;
};
Built build(const ModelDef& model, Mode mode) {
  Graph graph;
  Scope scope(graph);
  std::vector<int64_t> dims = {2};
  for (int64_t d : model.default_input.dims()) dims.push_back(d);
  Value images = scope.placeholder("images", Shape(dims));
  ModelOutputs out = model.build(scope, images, 10, mode);
  Built b;
  for (const VariableInfo& v : graph.variables()) {
    const Initializer& init = v.initializer;
    b.variables.push_back(fmt::format("{} {} {} {} {}", v.name, v.spec.shape.to_string(),
                                      static_cast<int>(init.kind), init.value,
                                      v.trainable == Trainable::yes));
  }
  b.losses = graph.get_collection("losses").size();
  b.updates = out.updates.size();
  EXPECT_EQ(out.logits.shape(), (Shape{2, 10})) << model.name;
  return b;
}

TEST(ModelFileTest, ExampleFilesDescribeTheBuiltInModels) {
  for (const std::string name :
       {"lenet", "cifar10", "resnet20", "resnet18", "resnet34", "resnet50", "mobilenet_v2"}) {
    SCOPED_TRACE(name);
    const ModelDef file = parse_model_file(read_example(name), name + ".json");
    const ModelDef& builtin = get_model(name);
    EXPECT_EQ(file.name, name + "_file");
    EXPECT_EQ(file.default_input, builtin.default_input);
    EXPECT_EQ(to_string(file.recipe), to_string(builtin.recipe));
    for (Mode mode : {Mode::train, Mode::eval}) {
      Built a = build(file, mode), b = build(builtin, mode);
      EXPECT_EQ(a.variables, b.variables);
      EXPECT_EQ(a.losses, b.losses);
      EXPECT_EQ(a.updates, b.updates);
    }
  }
}

TEST(ModelFileTest, RegisteringTheSameTextTwiceIsFineAnotherModelOfTheNameIsNot) {
  const std::string text = read_example("lenet");
  EXPECT_EQ(register_model_file(text, "a.json"), "lenet_file");
  EXPECT_EQ(register_model_file(text, "a.json"), "lenet_file");
  EXPECT_EQ(get_model("lenet_file").source, text);
  std::string other = text;
  other.replace(other.find("\"units\": 256"), 12, "\"units\": 128");
  try {
    register_model_file(other, "b.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.json: there is already a model named 'lenet_file'"),
              std::string::npos)
        << e.what();
  }
}

// Each bad file: the message holds every fragment.
TEST(ModelFileTest, EveryBadFileIsOneErrorNamingTheLayerAndTheKey) {
  const std::string head = R"({"name": "m", "input": [1, 8, 8], "layers": [)";
  const std::string logits = R"({"type": "dense", "name": "logits", "units": "num_classes"})";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"{", {"bad.json", "not valid JSON"}},
      {head + R"({"type": "conv2d", "name": "c", "filters": 1099511627776}, )" + logits + "]}",
       {"bad.json", "layer 0 (c): key 'filters' is 1099511627776",
        "a whole number >= 1 and at most 1048576"}},
      {R"({"name": "m", "input": [1, 8, 8e400], "layers": []})", {"bad.json", "not valid JSON"}},
      {"[]", {"bad.json", "the file must be a JSON object"}},
      {R"({"input": [1, 8, 8], "layers": [)" + logits + "]}", {"needs the key 'name'"}},
      {R"({"name": "m", "input": [8, 8], "layers": [)" + logits + "]}",
       {"key 'input'", "[channels, height, width]"}},
      {R"({"name": "m", "input": [1, 8, 8], "layers": []})", {"key 'layers'", "non-empty"}},
      {R"({"name": "m", "input": [1, 8, 8], "colour": 1, "layers": [)" + logits + "]}",
       {"has no key 'colour'"}},
      {R"({"name": "m", "input": [1, 8, 8], "normalization": "imagenet", "layers": [)" + logits +
           "]}",
       {"key 'normalization' is \"imagenet\"", "a value per channel"}},
      {R"({"name": "m", "input": [1, 8, 8], "normalization": {"mean": [0.5], "stddev": [0]},
          "layers": [)" +
           logits + "]}",
       {"normalization: key 'stddev' is [0]", "numbers > 0"}},
      {head + R"({"type": "conv3d", "name": "c"}, )" + logits + "]}",
       {"layer 0 (c)", "key 'type'", "conv2d"}},
      {head + R"({"type": "conv2d", "filters": 4}, )" + logits + "]}",
       {"layer 0", "needs the key 'name'"}},
      {head + R"({"type": "conv2d", "name": "c", "filters": 0}, )" + logits + "]}",
       {"layer 0 (c)", "key 'filters' is 0", ">= 1"}},
      {head + R"({"type": "conv2d", "name": "c", "filters": 4, "kernal": 3}, )" + logits + "]}",
       {"layer 0 (c)", "no key 'kernal'", "kernel"}},
      {head + R"({"type": "conv2d", "name": "c", "filters": 4, "padding": "full"}, )" + logits +
           "]}",
       {"key 'padding'", "\"same\", \"valid\" or the pixels on each side"}},
      {head + R"({"type": "conv2d", "name": "c", "filters": 4, "activation": "gelu"}, )" + logits +
           "]}",
       {"key 'activation'", "relu"}},
      {head + R"({"type": "dense", "name": "d", "units": 4, "init": "xavier"}, )" + logits + "]}",
       {"layer 0 (d)", "key 'init'", "he_normal"}},
      {head + R"({"type": "dropout"}, )" + logits + "]}", {"layer 0", "needs the key 'rate'"}},
      {head + R"({"type": "dropout", "rate": 1.0}, )" + logits + "]}",
       {"key 'rate' is 1.0", "[0, 1)"}},
      {head + R"({"type": "dense", "name": "d", "units": 3}]})", {"(N, 10) logits", "num_classes"}},
      {head + R"({"type": "max_pool", "size": 16}, )" + logits + "]}", {"bad.json: layer 0"}},
      {head + R"({"type": "conv2d", "name": "c", "filters": 4, "groups": 3}, )" + logits + "]}",
       {"bad.json: layer 0", "3 groups must divide the 1 input channels and the 4 filters"}},
      {head + R"({"type": "conv2d", "name": "c", "filters": 4, "dilation": 0}, )" + logits + "]}",
       {"layer 0 (c)", "key 'dilation' is 0", ">= 1"}},
      {head + R"({"type": "depthwise_conv2d", "name": "d", "filters": 4}, )" + logits + "]}",
       {"layer 0 (d)", "no key 'filters'", "multiplier"}},
      {head + R"({"type": "depthwise_conv2d", "name": "d", "multiplier": 0}, )" + logits + "]}",
       {"layer 0 (d)", "key 'multiplier' is 0", ">= 1"}},
  };
  for (const auto& [text, fragments] : cases) {
    try {
      parse_model_file(text, "bad.json");
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      for (const std::string& f : fragments)
        EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
            << "'" << f << "' not in: " << e.what();
    }
  }
}

}  // namespace
}  // namespace tower
