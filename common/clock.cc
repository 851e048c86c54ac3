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
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

void SimulatedClock::SleepFor(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  const absl::Time deadline = now_ + d;
  ++sleepers_;
  cv_.notify_all();  // num_sleepers() changed
  cv_.wait(lock, [&] { return now_ >= deadline; });
  --sleepers_;
}

void SimulatedClock::AdvanceTime(absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ += d;
  cv_.notify_all();
}

void SimulatedClock::SetTime(absl::Time t) {
  std::lock_guard<std::mutex> lock(mu_);
  if (t > now_) now_ = t;
  cv_.notify_all();
}

int SimulatedClock::num_sleepers() {
  std::lock_guard<std::mutex> lock(mu_);
  return sleepers_;
}

}  // namespace trainyard
