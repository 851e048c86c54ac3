#include "common/rate_limiter.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(RateLimiterTest, BurstThenRatePerKey) {
  SimulatedClock clock;
  RateLimiter limiter(/*rate=*/2, /*burst=*/3, &clock);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow("a")) << i;
  absl::Duration retry;
  EXPECT_FALSE(limiter.Allow("a", &retry));
  EXPECT_EQ(retry, absl::Milliseconds(500));  // one token at 2 per second
  EXPECT_TRUE(limiter.Allow("b"));            // another client has its own bucket
  clock.AdvanceTime(absl::Milliseconds(499));
  EXPECT_FALSE(limiter.Allow("a"));
  clock.AdvanceTime(absl::Milliseconds(1));
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_FALSE(limiter.Allow("a"));
  // A long pause refills to the burst, not beyond.
  clock.AdvanceTime(absl::Hours(1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow("a")) << i;
  EXPECT_FALSE(limiter.Allow("a"));
}

TEST(RateLimiterTest, ZeroRateIsUnlimited) {
  SimulatedClock clock;
  RateLimiter limiter(0, 1, &clock);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.Allow("a"));
}

TEST(RateLimiterTest, IdleClientsAreForgotten) {
  SimulatedClock clock;
  RateLimiter limiter(1, 1, &clock);
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(limiter.Allow("client-" + std::to_string(i)));
  clock.AdvanceTime(absl::Seconds(2));
  EXPECT_TRUE(limiter.Allow("new"));  // prunes the full buckets
  EXPECT_TRUE(limiter.Allow("client-0"));
  EXPECT_FALSE(limiter.Allow("client-0"));
}

}  // namespace
}  // namespace trainyard
