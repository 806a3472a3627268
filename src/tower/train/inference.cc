#include "tower/train/inference.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "tower/parallel/data_parallel.h"
#include "tower/train/batch_norm_statistics.h"
#include "tower/train/evaluator.h"

namespace tower {
namespace {

bool has_checkpoint_files(const std::string& prefix) {
  std::error_code ec;
  return std::filesystem::exists(prefix + ".safetensors", ec) ||
         std::filesystem::exists(prefix + ".json", ec);
}

std::string drop_suffix(std::string name) {
  for (const std::string ext : {".safetensors", ".json"})
    if (name.size() > ext.size() && name.ends_with(ext)) name.resize(name.size() - ext.size());
  return name;
}

}  // namespace

std::string resolve_checkpoint(const std::string& train_dir, const std::string& name) {
  if (name.empty()) {
    auto found = checkpoint_latest(train_dir);
    if (!found) fail("no checkpoint in '{}' (expected model.ckpt-<step> files)", train_dir);
    return *found;
  }
  const std::string prefix = drop_suffix(name);
  if (has_checkpoint_files(prefix)) return prefix;
  const std::string in_dir = (std::filesystem::path(train_dir) / prefix).string();
  if (has_checkpoint_files(in_dir)) return in_dir;
  if (!prefix.empty() && prefix.size() <= 18 &&
      std::all_of(prefix.begin(), prefix.end(),
                  [](unsigned char c) { return std::isdigit(c) != 0; })) {
    const std::string step = checkpoint_prefix(train_dir, std::stoll(prefix));
    if (has_checkpoint_files(step)) return step;
  }
  return prefix;  // loading it names the missing file
}

TrainingCheckpoint load_checkpoint_for_inference(const std::string& train_dir,
                                                 const std::string& name) {
  const std::string prefix = resolve_checkpoint(train_dir, name);
  try {
    return load_training_checkpoint(prefix);
  } catch (const Error& e) {
    if (!name.empty()) throw;
    const std::vector<int64_t> steps = checkpoint_list(train_dir);
    fail("{}\n{}", e.what(),
         older_checkpoint_hint(train_dir, steps.empty() ? 0 : steps.back(), "--checkpoint"));
  }
}

const Tensor& checkpoint_weight(const TrainingCheckpoint& checkpoint, const std::string& variable,
                                bool ema) {
  const auto& tensors = checkpoint.data.tensors;
  auto it = tensors.end();
  // Recomputed batch-norm statistics fit the weights the run evaluated: the moving averages of
  // the weights where it kept them.
  if (ema || !checkpoint.state.ema) it = tensors.find(variable + kRecomputedSuffix);
  if (it == tensors.end() && ema) it = tensors.find(variable + "/ExponentialMovingAverage");
  if (it == tensors.end()) it = tensors.find(variable);
  if (it == tensors.end()) {
    std::vector<std::string> names;
    for (const auto& [name, tensor] : tensors)
      if (names.size() < 8) names.push_back(name);
    fail("the checkpoint {} has no tensor '{}' needed by model {} (it has {}{})",
         checkpoint.data.prefix, variable, checkpoint.state.run.model,
         names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")),
         tensors.size() > names.size() ? ", ..." : "");
  }
  return it->second;
}

TransformSpec eval_transform(const TrainingState& state, const ModelDef& model,
                             const Shape& image) {
  const std::string& augmentation =
      state.augmentation.empty() ? model.recipe.augmentation : state.augmentation;
  // The normalization the run trained with (older states: the model's).
  const Normalization& normalization =
      state.normalization.empty() ? model.normalization : state.normalization;
  return input_transforms(augmentation, model.default_input, image, normalization).eval;
}

int inference_threads(int num_threads) {
  return select_devices({.num_devices = 1, .threads = num_threads}, world()).cores;
}

InferenceModel open_inference_model(const std::string& train_dir, const std::string& checkpoint,
                                    bool use_ema) {
  InferenceModel m;
  m.checkpoint = load_checkpoint_for_inference(train_dir, checkpoint);
  const TrainingState& state = m.checkpoint.state;
  m.model = &run_model(state, m.checkpoint.data.prefix + ".json");
  m.ema = use_ema && state.ema;
  m.image_shape = state.image_shape;
  m.classes = state.classes;
  if (m.image_shape.rank() != 3 || m.classes.empty()) {
    const Dataset test =
        open_dataset(run_data_spec({.data = state.run.data}, *m.model), Split::test);
    if (m.image_shape.rank() != 3) m.image_shape = test.image_shape();
    if (m.classes.empty()) m.classes = test.class_names;
  }
  m.transform = eval_transform(state, *m.model, m.image_shape);
  m.input_shape = transform_output_shape(m.transform, m.image_shape);
  return m;
}

}  // namespace tower
