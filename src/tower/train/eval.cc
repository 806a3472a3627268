#include "tower/train/eval.h"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tower/io/safetensors.h"
#include "tower/models/model.h"
#include "tower/models/model_file.h"
#include "tower/train/evaluator.h"
#include "tower/train/fine_tune.h"
#include "tower/train/inference.h"
#include "tower/train/training_state.h"

namespace tower {
namespace {

// "eval", "eval_raw", "eval_cifar10_tmp_x": what was evaluated, usable in tags and JSON keys.
std::string eval_key(bool ema, const std::string& other_data) {
  std::string key = ema ? "eval" : "eval_raw";
  if (other_data.empty()) return key;
  key += '_';
  for (char c : other_data) key += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return key;
}

// A tensors file as a checkpoint of `config.model` (or its model file) with no state: raw weights,
// the recipe's data and augmentation, the step from the file's metadata (else 0).
TrainingCheckpoint weights_only(const EvalConfig& config) {
  if (!config.model.empty() && !config.model_file.empty())
    fail("--model and --model_file exclude each other");
  if (config.checkpoint.empty())
    fail("--model and --model_file evaluate a tensors file: name it with --checkpoint FILE");
  TrainingCheckpoint c;
  c.data.prefix = resolve_checkpoint(config.train_dir, config.checkpoint);
  SafetensorsFile file = safetensors_read(c.data.prefix + ".safetensors");
  c.data.tensors = std::move(file.tensors);
  if (auto it = file.metadata.find("step"); it != file.metadata.end()) {
    try {
      c.data.step = std::max<int64_t>(0, std::stoll(it->second));
    } catch (const std::exception&) {
    }
  }
  c.state.step = c.data.step;
  c.state.run.model = config.model_file.empty() ? config.model : load_model_file(config.model_file);
  c.state.run.data = config.data;
  to_model_names(c.data.tensors, get_model(c.state.run.model));  // torchvision's, timm's
  return c;
}

}  // namespace

EvalResult evaluate_checkpoint(const EvalConfig& config) {
  if (config.batch_size < 1 || config.batch_size > (1 << 20))
    fail("--batch_size must be a whole number from 1 to {}, got {}", 1 << 20, config.batch_size);
  const bool alone = !config.model.empty() || !config.model_file.empty();
  TrainingCheckpoint checkpoint;
  try {
    checkpoint = alone ? weights_only(config)
                       : load_checkpoint_for_inference(config.train_dir, config.checkpoint);
  } catch (const ForeignStateError& e) {
    fail("{}; to evaluate its tensors alone, pass --model NAME or --model_file FILE", e.what());
  } catch (const Error& e) {
    // A state file of another tool may fail before its keys are read (no step): say so, not
    // damage.
    if (alone || config.checkpoint.empty()) throw;
    const std::string state = resolve_checkpoint(config.train_dir, config.checkpoint) + ".json";
    std::ifstream in(state);
    const nlohmann::json json = nlohmann::json::parse(in, nullptr, false);
    if (!in || json.is_discarded() || (json.is_object() && json.contains("run"))) throw;
    fail(
        "'{}' is not a state file written by `tower train` ({}); to evaluate the tensors alone, "
        "pass --model NAME or --model_file FILE",
        state, e.what());
  }
  const std::string& prefix = checkpoint.data.prefix;
  const TrainingState& state = checkpoint.state;
  const ModelDef& model = run_model(state, prefix + ".json");
  const bool other_data = !config.data.empty() && config.data != state.run.data;
  const std::string data = other_data ? config.data : state.run.data;
  // The images the run held out (a folder's split depends on the fraction).
  const double fraction = !other_data && state.test_fraction > 0 ? state.test_fraction : 0.1;
  DatasetSpec spec = run_data_spec(
      {.data = data, .test_fraction = fraction, .skip_bad_images = config.skip_bad_images}, model);
  if (spec.format == DatasetFormat::folder && state.image_shape.rank() == 3)
    spec.image_shape = state.image_shape;  // the size the run trained on (--image_size)
  auto test_set = std::make_shared<const Dataset>(open_dataset(spec, Split::test));
  const int threads = inference_threads(config.num_threads);
  const bool ema = config.use_ema && state.ema;
  EvalResult result;
  result.step = checkpoint.data.step;
  result.checkpoint = checkpoint.data.prefix;
  result.key = eval_key(ema, other_data ? data : std::string());
  try {
    Evaluator evaluator(state.run.model, test_set,
                        eval_transform(state, model, test_set->image_shape()), config.batch_size,
                        threads, config.precision);
    result.examples = evaluator.examples();
    result.class_names =
        !other_data && state.classes.size() == static_cast<size_t>(test_set->num_classes)
            ? state.classes
            : test_set->class_names;
    result.precision_at_1 = evaluator.evaluate([&](const std::string& name) -> const Tensor& {
      return checkpoint_weight(checkpoint, name, ema);
    });
    result.precision_at_5 = evaluator.precision_at_5();
    result.confusion = evaluator.confusion();
    result.logits = evaluator.logits();
  } catch (const Error& e) {
    if (alone)
      fail("cannot evaluate {} as model {} on {}: {}", prefix, state.run.model, test_set->name,
           e.what());
    fail("cannot evaluate checkpoint {} (model {}, trained on {}) on {}{}: {}", prefix,
         state.run.model, state.run.data, other_data ? "--data " : "", data, e.what());
  }
  return result;
}

}  // namespace tower
