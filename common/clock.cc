#include "common/clock.h"

#include "absl/time/clock.h"

namespace trainyard {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
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

int SimulatedClock::num_sleepers() {
  MutexLock lock(&mu_);
  return sleepers_;
}

}  // namespace trainyard
