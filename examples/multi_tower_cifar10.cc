// The classic TensorFlow "CIFAR-10 multi-GPU" training program, written against tower's C++ API.
//
//   classic program                         tower
//   ---------------                         -----
//   cifar10.distorted_inputs() + queues  -> InputPipeline (worker threads = queue runners)
//   for i in range(FLAGS.num_gpus):
//     with tf.device('/gpu:%d' % i),
//          tf.name_scope('tower_%d' % i):   -> DataParallel builds tower_fn once per device under
//       loss = tower_loss(scope, ...)          the name scope tower_<i>, reusing the variables
//       tf.get_variable_scope().reuse_variables()
//       grads = opt.compute_gradients(loss) -> gradients of each tower's loss
//   grads = average_gradients(tower_grads)  -> the GradientReducer (central or allreduce)
//   opt.apply_gradients(grads, global_step)  -> DataParallelOptimizer: every replica
//   variable_averages.apply(...)            -> ExponentialMovingAverage
//   saver.save(...)                         -> checkpoint_save (safetensors + JSON state)
//
// usage: multi_tower_cifar10 DATA_DIR [NUM_TOWERS] [MAX_STEPS]   (DATA_DIR: CIFAR-10 binary files,
// e.g. from `tower make-dataset --format cifar10 --out DATA_DIR`)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tower/data/input_pipeline.h"
#include "tower/io/checkpoint.h"
#include "tower/models/model.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/ema.h"
#include "tower/train/lr_schedule.h"
#include "tower/train/optimizer.h"

using namespace tower;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATA_DIR [NUM_TOWERS] [MAX_STEPS]\n", argv[0]);
    return 2;
  }
  const int num_towers = argc > 2 ? std::atoi(argv[2]) : 2;
  const int64_t max_steps = argc > 3 ? std::atoll(argv[3]) : 1000, batch_per_tower = 64;

  // distorted_inputs(): random crop 24x24, flip, brightness, contrast, standardization.
  auto train_set = std::make_shared<const Dataset>(
      open_dataset(parse_dataset_spec(std::string("cifar10:") + argv[1]), Split::train));
  InputPipeline inputs(train_set, {.batch_size = batch_per_tower * num_towers,
                                   .seed = 1,
                                   .num_workers = 2,
                                   .transform = cifar10_train_transform()});

  // tower_loss(): the model's logits, cross-entropy and the weight-decay terms of this tower.
  TowerFn tower_loss = [](const Scope& scope, Value images, Value labels) {
    ModelOutputs out = get_model("cifar10").build(scope, images, 10, Mode::train);
    return TowerOutputs{classification_loss(scope, out.logits, labels).total_loss, {}, {}};
  };
  DataParallelOptions options;
  const DevicePlan plan = select_devices({.num_devices = num_towers}, world());
  options.devices = plan.devices;
  options.threads = plan.threads;
  DataParallel towers(inputs.image_shape(), batch_per_tower * num_towers, tower_loss, options);

  // GradientDescentOptimizer with lr 0.1 decayed x0.1 every 350 epochs, and the moving average.
  // DataParallelOptimizer updates every replica (the default allreduce strategy keeps one copy of
  // the variables per tower).
  DataParallelOptimizer optimizer(towers, {.name = "sgd"});
  const std::vector<Param>& params = optimizer.params();  // replica 0's variables and gradients
  auto lr = parse_lr_schedule("exponential:decay_epochs=350,rate=0.1,staircase=1", 0.1f,
                              inputs.batches_per_epoch(), max_steps);
  ExponentialMovingAverage ema(0.9999f);
  std::vector<std::pair<std::string, const Tensor*>> averaged;
  for (const Param& p : params) averaged.push_back({p.name, p.value});
  ema.init(averaged);

  for (int64_t step = 0; step < max_steps; ++step) {
    Batch batch = inputs.next();
    StepResult result = towers.step(batch.images, batch.labels, static_cast<uint64_t>(step));
    optimizer.apply(lr->lr(step), step);
    ema.update(step + 1);
    if (step % 100 == 0)
      std::printf("step %lld, loss = %.2f\n", static_cast<long long>(step), result.loss);
  }
  std::vector<std::pair<std::string, const Tensor*>> tensors = averaged;
  for (auto& [name, shadow] : ema.shadows()) tensors.push_back({name, shadow});
  checkpoint_save("multi_tower_train", max_steps, tensors, {{"step", max_steps}}, 5);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
