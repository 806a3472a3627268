// Sensing contention: how long the threads of a team waited for a core (the kernel's scheduler
// statistics), and the automatic switch between team mode and contended mode
// (ProgramOptions::contention).
#pragma once

#include <cstdint>

namespace tower {

// The scheduler statistics of thread `tid` of this process, kept open: the nanoseconds it has
// spent runnable but waiting for a core (their second field), 0 where the kernel does not say.
class RunDelay {
 public:
  explicit RunDelay(int tid);
  ~RunDelay();
  RunDelay(const RunDelay&) = delete;
  RunDelay& operator=(const RunDelay&) = delete;
  int64_t nanoseconds() const;

 private:
  int fd_;
};

// Automatic contention, after a run whose threads waited `waited_ns` for a core (summed over the
// threads) in `run_ns`: into contended mode after 2 runs in a row that waited 15% of the run's
// time or more, out of it after 3 under 5%. `streak` counts the runs in a row that pointed to the
// other mode.
void observe_contention(int64_t waited_ns, double run_ns, bool& contended, int& streak);

}  // namespace tower
