// Learning-rate schedules, chosen by `--lr_schedule SPEC`:
//
//   SPEC := NAME [ ":" KEY "=" VALUE { "," KEY "=" VALUE } ]    lists inside a VALUE use ";"
//
// constant
//     lr = --lr
// exponential:decay_steps=N | decay_epochs=E, rate=R [, staircase=0|1]
//     lr = --lr * R^(step / N), the exponent floored when staircase=1 (default 0);
//     decay_epochs=E means N = floor(E * steps per epoch). The classic CIFAR-10 schedule is
//     exponential:decay_epochs=350,rate=0.1,staircase=1
// piecewise:boundaries=B1;...;Bn | boundary_epochs=E1;...;En, values=V0;...;Vn
//     TensorFlow's piecewise_constant: lr = V0 while step <= B1, Vi while Bi < step <= B(i+1),
//     Vn after Bn. The values are absolute (--lr is not used); boundaries strictly increase.
// cosine[:warmup_steps=W | warmup_epochs=E][, warmup_start=S][, alpha=A]
//     Linear warm-up from S (default 0) at step 0 to --lr at step W (default 0: none), then
//     cosine decay from --lr to A * --lr (default A = 0) at the last step of training.
// plateau:patience=N[, factor=F][, min_lr=M]
//     --lr, times F (default 0.1) after every N evaluations (--eval_every) in a row without a
//     better precision, never below M (default 0): Keras' ReduceLROnPlateau. The run counts
//     (the evaluations, not the steps), and its checkpoints record the count.
//
// `step` is the number of updates done before the one the learning rate is for (0 first).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace tower {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual float lr(int64_t step) const = 0;
};

// A piecewise spec with every value times `factor` (how --lr moves a recipe's piecewise schedule,
// whose values are absolute); other specs unchanged.
std::string scale_piecewise_values(const std::string& spec, double factor);

// The plateau schedule's keys (patience 0 for any other schedule).
struct PlateauSpec {
  int64_t patience = 0;
  double factor = 0.1, min_lr = 0;
};
PlateauSpec plateau_spec(const std::string& spec);

// The spec with its boundary_epochs and decay_epochs times `factor`: a recipe's schedule, written
// for the recipe's number of epochs, fitted to a run of another length (ResNet's x0.1 at epochs
// 82 and 123 of 164 are at 50% and 75% of any run). Steps and warm-ups are left as they are.
std::string scale_schedule_epochs(const std::string& spec, double factor);

// Throws tower::Error naming the spec and what was expected when it is malformed. A spec that is
// adjusted to the run (a cosine warm-up longer than the run is clamped to half of it), or that
// never changes the rate where it means to (a piecewise boundary or a staircase decay past the
// run's last step), says so in `*warning` when given, for the caller to print once (rank 0).
std::unique_ptr<LrSchedule> parse_lr_schedule(const std::string& spec, float initial_lr,
                                              int64_t steps_per_epoch, int64_t total_steps,
                                              std::string* warning = nullptr);

}  // namespace tower
