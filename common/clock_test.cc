#include "common/clock.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(SimulatedClockTest, OnlyMovesWhenAdvanced) {
  SimulatedClock clock(absl::FromUnixSeconds(1000));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1000));
  clock.AdvanceTime(absl::Seconds(5));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1005));
  clock.SetTime(absl::FromUnixSeconds(900));  // never backwards
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1005));
}

TEST(SimulatedClockTest, SleeperWakesExactlyAtDeadline) {
  SimulatedClock clock;
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepFor(absl::Seconds(30));
    woke = true;
  });
  // Wait (bounded) until the sleeper is blocked.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (clock.num_sleepers() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(clock.num_sleepers(), 1);
  clock.AdvanceTime(absl::Seconds(29));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(woke);
  clock.AdvanceTime(absl::Seconds(1));
  sleeper.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(clock.num_sleepers(), 0);
}

TEST(SimulatedClockTest, AWaitEndsWhenTheClockPassesItsDeadlineOrItIsSignalled) {
  SimulatedClock clock(absl::FromUnixSeconds(100));
  Mutex mu;
  CondVar cv;
  bool signalled = false;
  std::atomic<int> loops{0};
  std::atomic<bool> timed_out{false};
  std::thread waiter([&] {
    MutexLock lock(&mu);
    const absl::Time deadline = absl::FromUnixSeconds(130);
    while (!signalled) {
      ++loops;
      if (clock.WaitWithDeadline(&cv, &mu, deadline)) {
        timed_out = true;
        break;
      }
    }
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (clock.num_waiters() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  clock.AdvanceTime(absl::Seconds(29));  // not yet
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(timed_out);
  clock.AdvanceTime(absl::Seconds(1));
  waiter.join();
  EXPECT_TRUE(timed_out);
  // A signal ends a wait before its deadline; a deadline already passed
  // returns at once.
  timed_out = false;
  std::thread signalled_waiter([&] {
    MutexLock lock(&mu);
    while (!signalled) {
      if (clock.WaitWithDeadline(&cv, &mu, absl::FromUnixSeconds(1000))) timed_out = true;
    }
  });
  {
    MutexLock lock(&mu);
    signalled = true;
    cv.SignalAll();
  }
  signalled_waiter.join();
  EXPECT_FALSE(timed_out);
  MutexLock lock(&mu);
  EXPECT_TRUE(clock.WaitWithDeadline(&cv, &mu, absl::FromUnixSeconds(130)));
  EXPECT_EQ(clock.num_waiters(), 0);
}

TEST(RealClockTest, AdvancesWithWallTime) {
  Clock* clock = Clock::Real();
  const absl::Time before = clock->Now();
  clock->SleepFor(absl::Milliseconds(5));
  EXPECT_GE(clock->Now() - before, absl::Milliseconds(5));
}

}  // namespace
}  // namespace trainyard
