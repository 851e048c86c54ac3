#include "common/clock.h"

#include "absl/time/clock.h"

namespace trainyard {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  bool WaitWithDeadline(CondVar* cv, Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) override {
    if (deadline == absl::InfiniteFuture()) {
      cv->Wait(mu);
      return false;
    }
    return cv->WaitWithDeadline(mu, deadline);
  }
};

}  // namespace

Clock* Clock::Real() {
  static Clock* clock = new RealClock;
  return clock;
}

absl::Time SimulatedClock::Now() {
  MutexLock lock(&mu_);
  return now_;
}

void SimulatedClock::SleepFor(absl::Duration d) {
  MutexLock lock(&mu_);
  const absl::Time deadline = now_ + d;
  ++sleepers_;
  cv_.SignalAll();  // num_sleepers() changed
  while (now_ < deadline) cv_.Wait(&mu_);
  --sleepers_;
}

bool SimulatedClock::WaitWithDeadline(CondVar* cv, Mutex* mu, absl::Time deadline) {
  {
    MutexLock lock(&mu_);
    if (now_ >= deadline) return true;
    ++waiters_;
    cv_.SignalAll();  // num_waiters() changed
  }
  // A few real milliseconds at most: a time move is noticed at the caller's
  // next check, and no pointer to `cv` or `mu` outlives this call.
  cv->WaitWithDeadline(mu, absl::Now() + absl::Milliseconds(5));
  MutexLock lock(&mu_);
  --waiters_;
  return now_ >= deadline;
}

void SimulatedClock::AdvanceTime(absl::Duration d) {
  MutexLock lock(&mu_);
  now_ += d;
  cv_.SignalAll();
}

void SimulatedClock::SetTime(absl::Time t) {
  MutexLock lock(&mu_);
  if (t > now_) now_ = t;
  cv_.SignalAll();
}

int SimulatedClock::num_waiters() {
  MutexLock lock(&mu_);
  return waiters_;
}

int SimulatedClock::num_sleepers() {
  MutexLock lock(&mu_);
  return sleepers_;
}

}  // namespace trainyard
