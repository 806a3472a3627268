#include "tower/train/lr_find.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tower/data/input_pipeline.h"
#include "tower/io/atomic_file.h"
#include "tower/io/png.h"
#include "tower/train/learner.h"

namespace tower {
namespace {

constexpr double kSmoothing = 0.98;  // fastai's: the loss of one batch is noisy
constexpr double kRunaway = 4;       // stop when the smoothed loss is 4x its lowest

struct Canvas {
  int width, height;
  std::vector<uint8_t> rgb;
  Canvas(int w, int h) : width(w), height(h), rgb(static_cast<size_t>(w * h * 3), 255) {}
  void dot(int x, int y, const uint8_t (&c)[3]) {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    std::copy(c, c + 3, rgb.begin() + (static_cast<ptrdiff_t>(y) * width + x) * 3);
  }
  void line(int x0, int y0, int x1, int y1, const uint8_t (&c)[3]) {  // Bresenham
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    for (int err = dx + dy;;) {
      dot(x0, y0, c);
      if (x0 == x1 && y0 == y1) return;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
};

}  // namespace

size_t steepest_fall(const std::vector<double>& lrs, const std::vector<double>& losses) {
  const size_t lowest =
      static_cast<size_t>(std::min_element(losses.begin(), losses.end()) - losses.begin());
  size_t best = lowest;
  double steepest = 0;
  for (size_t i = std::max<size_t>(1, losses.size() / 10); i <= lowest && i < losses.size(); ++i) {
    const double slope =
        (losses[i] - losses[i - 1]) / (std::log10(lrs[i]) - std::log10(lrs[i - 1]));
    if (slope < steepest) steepest = slope, best = i;
  }
  return best;
}

LrFindResult lr_find(const LrFindConfig& config) {
  const TrainConfig& c = config.train;
  validate(c);
  if (world().size() > 1) fail("tower lr-find runs in one process, not under mpirun");
  if (!(config.start_lr > 0 && config.end_lr > config.start_lr && std::isfinite(config.end_lr)))
    fail("--start_lr {} and --end_lr {}: expected 0 < start < end", config.start_lr, config.end_lr);
  if (config.steps < 2 || config.steps > 100000)
    fail("--steps must be from 2 to 100000, got {}", config.steps);
  const ModelDef& model = get_model(c.model);
  auto train = std::make_shared<const Dataset>(
      open_dataset(run_data_spec(data_options(c), model), Split::train));
  const InputTransforms transforms = input_transforms(c.augmentation, model.default_input,
                                                      train->image_shape(), model.normalization);
  const DevicePlan devices = select_devices({.devices = c.devices,
                                             .num_devices = c.num_devices,
                                             .num_gpus = c.num_gpus,
                                             .threads = c.num_threads,
                                             .precision = c.program.precision},
                                            world());
  const BatchPlan batches = plan_batches({.batch_size = c.micro_batch_size > 0 ? 0 : c.batch_size,
                                          .global_batch_size = c.global_batch_size,
                                          .micro_batch_size = c.micro_batch_size},
                                         static_cast<int64_t>(devices.devices.size()), 1);
  if (batches.global > train->size())
    fail("a step of {} examples is more than the {} of {}: lower --batch_size", batches.global,
         train->size(), train->name);
  InputPipeline pipeline(train, {.batch_size = batches.global,
                                 .seed = c.seed,
                                 .num_workers = std::max(c.num_preprocess_threads, 0),
                                 .transform = transforms.train});
  DataParallelOptions options;
  options.devices = devices.devices;
  options.threads = devices.threads;
  options.seed = c.seed;
  options.program = c.program;
  options.micro_batch = c.micro_batch_size;
  // lr(step) = start * (end / start)^(step / (steps - 1)): an exponential decay with rate > 1.
  const std::string schedule = fmt::format("exponential:decay_steps={},rate={:.17g}",
                                           config.steps - 1, config.end_lr / config.start_lr);
  Learner learner(build_towers(model, pipeline.image_shape(), batches.local, train->num_classes,
                               options, {.bn_momentum = c.bn_momentum}),
                  c.optimizer,
                  {.lr_schedule = schedule,
                   .lr = static_cast<float>(config.start_lr),
                   .steps_per_epoch = pipeline.batches_per_epoch(),
                   .total_steps = config.steps,
                   .clip_norm = c.clip_norm},
                  nullptr);
  fmt::print("lr-find: {} on {}, {} steps of {} examples, lr from {:g} to {:g}\n", c.model,
             train->name, config.steps, batches.global, config.start_lr, config.end_lr);
  LrFindResult result;
  double average = 0, lowest = INFINITY;
  for (int64_t step = 0; step < config.steps; ++step) {
    Batch batch = pipeline.next();
    const StepResult out =
        learner.towers().step(batch.images, batch.labels, static_cast<uint64_t>(step));
    if (!std::isfinite(out.loss)) break;
    average = kSmoothing * average + (1 - kSmoothing) * out.loss;
    const double smoothed = average / (1 - std::pow(kSmoothing, static_cast<double>(step + 1)));
    if (step > 0 && smoothed > kRunaway * lowest) break;
    lowest = std::min(lowest, smoothed);
    result.lrs.push_back(learner.update(step));
    result.losses.push_back(smoothed);
  }
  if (result.losses.size() < 3)
    fail("the loss ran away within {} steps of lr {:g}: lower --start_lr", result.losses.size(),
         config.start_lr);
  result.lowest = static_cast<size_t>(std::min_element(result.losses.begin(), result.losses.end()) -
                                      result.losses.begin());
  result.suggested = steepest_fall(result.lrs, result.losses);
  if (!config.plot.empty()) {
    const std::vector<uint8_t> png = lr_find_plot(result);
    atomic_write_file(config.plot,
                      std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
  }
  return result;
}

std::vector<uint8_t> lr_find_plot(const LrFindResult& r) {
  constexpr int kWidth = 640, kHeight = 400, kMargin = 40;
  constexpr uint8_t kBlack[3] = {0, 0, 0}, kGray[3] = {200, 200, 200}, kBlue[3] = {31, 119, 180},
                    kRed[3] = {214, 39, 40};
  Canvas canvas(kWidth, kHeight);
  const double x0 = std::floor(std::log10(r.lrs.front())), x1 = std::ceil(std::log10(r.lrs.back()));
  const auto [lo, hi] = std::minmax_element(r.losses.begin(), r.losses.end());
  const double y0 = *lo, y1 = *hi > *lo ? *hi : *lo + 1;
  auto px = [&](double lr) {
    return kMargin + static_cast<int>(
                         std::lround((std::log10(lr) - x0) / (x1 - x0) * (kWidth - 2 * kMargin)));
  };
  auto py = [&](double loss) {
    return kHeight - kMargin -
           static_cast<int>(std::lround((loss - y0) / (y1 - y0) * (kHeight - 2 * kMargin)));
  };
  for (double decade = x0; decade <= x1; ++decade) {  // a grid line and a tick per decade
    const int x = px(std::pow(10.0, decade));
    canvas.line(x, kMargin, x, kHeight - kMargin, kGray);
    canvas.line(x, kHeight - kMargin, x, kHeight - kMargin + 6, kBlack);
  }
  canvas.line(kMargin, kHeight - kMargin, kWidth - kMargin, kHeight - kMargin, kBlack);
  canvas.line(kMargin, kMargin, kMargin, kHeight - kMargin, kBlack);
  const int suggested = px(r.lrs[r.suggested]);
  canvas.line(suggested, kMargin, suggested, kHeight - kMargin, kRed);
  for (size_t i = 1; i < r.lrs.size(); ++i)
    for (int thick = 0; thick < 2; ++thick)
      canvas.line(px(r.lrs[i - 1]), py(r.losses[i - 1]) + thick, px(r.lrs[i]),
                  py(r.losses[i]) + thick, kBlue);
  return png_encode(canvas.rgb.data(), kHeight, kWidth, 3);
}

}  // namespace tower
