// Time, injectable: the coordinator's job times and queueing delays, the
// worker registry's heartbeat expiry, sessions' idle timeouts and their wait
// for workers, the job driver's bounded waits (an on-demand checkpoint's
// timeout, the grace for the other ranks to report), the worker's
// membership, the rate limiter and the summary writers take a Clock*, so
// tests drive time by hand instead of sleeping. (The scheduler's tick and
// the persister run on real time: they are periods, not timeouts.)
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
  // Waits on `cv` (with `mu` held, released while waiting) until it is
  // signalled or this clock reaches `deadline`; true if the deadline has
  // passed. Wakes spuriously too: callers loop on their condition.
  virtual bool WaitWithDeadline(CondVar* cv, Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The real wall clock; never deleted.
  static Clock* Real();
};

// A clock that only moves when told to. SleepFor blocks until another thread
// advances the time past the sleeper's deadline; WaitWithDeadline returns
// when its condition variable is signalled, or after a few real
// milliseconds (a spurious wake-up), so that its caller sees a time moved
// by AdvanceTime or SetTime at once.
class SimulatedClock : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}

  absl::Time Now() override;
  void SleepFor(absl::Duration d) override;
  bool WaitWithDeadline(CondVar* cv, Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) override;

  void AdvanceTime(absl::Duration d);
  // Moves time to `t` if it is later than now.
  void SetTime(absl::Time t);
  // Number of threads currently blocked in SleepFor (lets a test wait until a
  // worker is asleep before advancing time).
  int num_sleepers();
  // Number of threads currently in WaitWithDeadline.
  int num_waiters();

 private:
  Mutex mu_;
  CondVar cv_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_CLOCK_H_
