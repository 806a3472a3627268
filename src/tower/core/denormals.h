// Subnormal floats (magnitudes below 1.2e-38) as zero in a thread's SSE/AVX arithmetic: results
// that would be subnormal are flushed to zero (FTZ) and subnormal inputs read as zero (DAZ). Late
// in training, tiny gradients, Adam's second moments and the like go subnormal, and an operation
// on one costs about a hundred cycles, which slowed the default run's late steps markedly
// (bench/results/cpu_kernel_choices.md). TensorFlow's threads run the same way. Every thread of
// a Program's run and of tower's thread pools has it, so a result does not depend on which thread
// computed it. Nothing on other architectures.
#pragma once

namespace tower {

bool denormals_are_zero();             // this thread's mode
void set_denormals_are_zero(bool on);  // this thread's mode, for good

// On for this thread while the scope lives, then back to what it was.
class DenormalsAreZero {
 public:
  DenormalsAreZero() : previous_(denormals_are_zero()) { set_denormals_are_zero(true); }
  ~DenormalsAreZero() { set_denormals_are_zero(previous_); }
  DenormalsAreZero(const DenormalsAreZero&) = delete;
  DenormalsAreZero& operator=(const DenormalsAreZero&) = delete;

 private:
  bool previous_;
};

}  // namespace tower
