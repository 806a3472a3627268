#include "tower/models/model.h"

#include <map>

#include "tower/ops/activation.h"
#include "tower/ops/bias.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/nn_loss.h"

namespace tower {
namespace {
std::map<std::string, ModelDef>& registry() {
  static std::map<std::string, ModelDef> models;
  return models;
}
}  // namespace

ModelRegistrar::ModelRegistrar(ModelDef def) {
  std::string name = def.name;
  registry().emplace(std::move(name), std::move(def));
}

void register_model(ModelDef def) {
  auto it = registry().find(def.name);
  if (it == registry().end()) {
    std::string name = def.name;
    registry().emplace(std::move(name), std::move(def));
  } else if (it->second.source.empty() || it->second.source != def.source) {
    fail("there is already a model named '{}'{}: give this one another \"name\"", def.name,
         it->second.source.empty() ? " (a built-in one)" : " from another model file");
  }
}

const ModelDef& get_model(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (auto& [n, d] : registry()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown model '{}': expected one of {}", name, known);
  }
  return it->second;
}

Recipe fashion_mnist_recipe() {
  return {.optimizer = "adam",
          .lr = 0.003f,
          .lr_schedule = "cosine:warmup_steps=50",
          .batch_size = 64,
          .epochs = 2.5,
          .ema_decay = 0.9999f,
          .data = "fashion-mnist"};
}

std::string to_string(const Recipe& r) {
  std::string text = fmt::format("{} lr {}", r.optimizer, r.lr);
  if (r.optimizer == "momentum") text += fmt::format(" (momentum {})", r.momentum);
  if (r.optimizer == "adamw") text += fmt::format(" (weight decay {})", r.weight_decay);
  text +=
      fmt::format(", {}, batch {} per tower, {} epochs, ", r.lr_schedule, r.batch_size, r.epochs);
  text += r.ema_decay > 0 ? fmt::format("EMA {}", r.ema_decay) : std::string("no EMA");
  text += fmt::format(", augmentation {}", r.augmentation);
  return r.data.empty() ? text : text + fmt::format(", for {} data", r.data);
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (auto& [n, d] : registry()) names.push_back(n);
  return names;
}

int64_t count_parameters(const ModelDef& model, const Shape& input, int num_classes) {
  Graph graph;
  Scope scope(graph);
  std::vector<int64_t> dims = {1};
  for (int64_t d : input.dims()) dims.push_back(d);
  model.build(scope, scope.placeholder("images", Shape(dims)), num_classes, Mode::train);
  int64_t total = 0;
  for (const VariableInfo& v : graph.trainable_variables()) total += v.spec.shape.numel();
  return total;
}

LossOutputs classification_loss(const Scope& scope, Value logits, Value labels,
                                const ops::SoftmaxCrossEntropyAttrs& target) {
  Value xent = ops::sparse_softmax_cross_entropy_with_logits(scope, logits, labels, target);
  Value mean = ops::reduce_mean(scope, xent);
  Graph& graph = scope.graph();
  graph.add_to_collection("losses", mean);
  std::string prefix = scope.name_prefix().empty() ? "" : scope.name_prefix() + "/";
  return {ops::add_n(scope, graph.get_collection("losses", prefix)), mean};
}

}  // namespace tower
