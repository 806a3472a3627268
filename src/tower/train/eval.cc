// `tower eval`: precision @ 1 of a checkpoint on the test split.
#include "tower/io/checkpoint.h"
#include "tower/models/model.h"
#include "tower/train/evaluator.h"
#include "tower/train/trainer.h"

namespace tower {

EvalResult evaluate_checkpoint(const EvalConfig& config) {
  std::string prefix = config.checkpoint;
  if (prefix.empty()) {
    auto latest = checkpoint_latest(config.train_dir);
    if (!latest) fail("no checkpoint in '{}' (expected model.ckpt-<step> files)", config.train_dir);
    prefix = *latest;
  }
  CheckpointData checkpoint = checkpoint_load(prefix);
  const auto& run = checkpoint.state.at("run");
  const std::string model_name = run.at("model").get<std::string>();
  const std::string data = config.data.empty() ? run.at("data").get<std::string>() : config.data;
  const ModelDef& model = get_model(model_name);
  auto test_set = std::make_shared<const Dataset>(open_dataset(parse_dataset_spec(data), Split::test));
  Evaluator evaluator(model_name, test_set,
                      eval_transform_for(model.default_input, test_set->image_shape()),
                      config.batch_size, config.num_threads);
  const bool ema = config.use_ema && checkpoint.state.value("ema", false);
  EvalResult result;
  result.step = checkpoint.step;
  result.examples = evaluator.examples();
  result.precision_at_1 = evaluator.evaluate([&](const std::string& name) -> const Tensor& {
    auto it = ema ? checkpoint.tensors.find(name + "/ExponentialMovingAverage")
                  : checkpoint.tensors.end();
    if (it == checkpoint.tensors.end()) it = checkpoint.tensors.find(name);
    if (it == checkpoint.tensors.end())
      fail("checkpoint {} has no tensor '{}' needed by model {}", prefix, name, model_name);
    return it->second;
  });
  return result;
}

}  // namespace tower
