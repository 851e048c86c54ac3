// Time, injectable: the coordinator's job times and queueing delays, the
// worker registry's heartbeat expiry, sessions' idle timeouts, the rate
// limiter and the summary writers take a Clock*, so tests can drive time by
// hand instead of sleeping. (The job driver's and sessions' bounded waits
// still use the real clock.)
//
// Thread-safety: every Clock is safe to use from many threads.
#ifndef TRAINYARD_COMMON_CLOCK_H_
#define TRAINYARD_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace trainyard {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  virtual void SleepFor(absl::Duration d) = 0;

  // The real wall clock; never deleted.
  static Clock* Real();
};

// A clock that only moves when told to. SleepFor blocks until another thread
// advances the time past the sleeper's deadline.
class SimulatedClock : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}

  absl::Time Now() override;
  void SleepFor(absl::Duration d) override;

  void AdvanceTime(absl::Duration d);
  // Moves time to `t` if it is later than now.
  void SetTime(absl::Time t);
  // Number of threads currently blocked in SleepFor (lets a test wait until a
  // worker is asleep before advancing time).
  int num_sleepers();

 private:
  Mutex mu_;
  CondVar cv_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CLOCK_H_
