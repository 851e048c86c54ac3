#include "trainer/learning_rate.h"

#include <cmath>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

LearningRateCallable Make(const std::string& factors, float base, int64_t warmup, int64_t steps_per_cycle = 0,
                          int64_t steps_per_decay = 0, int64_t step_offset = 0, float min_lr = 0) {
  LearningRateSchedule config;
  config.set_factors(factors);
  config.set_base_learning_rate(base);
  config.set_warmup_steps(warmup);
  config.set_steps_per_cycle(steps_per_cycle);
  config.set_steps_per_decay(steps_per_decay);
  config.set_step_offset(step_offset);
  config.set_min_learning_rate(min_lr);
  absl::StatusOr<LearningRateCallable> schedule = LearningRateCallable::Create(config);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return *schedule;
}

TEST(LearningRateTest, T5DefaultConstantTimesRsqrtDecay) {
  auto lr = Make("constant * rsqrt_decay", 1.0f, 10000);
  EXPECT_NEAR(lr(0), 0.01, 1e-12);  // 1 / sqrt(10000) during warmup
  EXPECT_NEAR(lr(9999), 0.01, 1e-12);
  EXPECT_NEAR(lr(40000), 0.005, 1e-12);  // 1 / sqrt(40000)
  EXPECT_NEAR(lr(1000000), 0.001, 1e-12);
}

TEST(LearningRateTest, LinearWarmupThenRsqrt) {
  auto lr = Make("constant * linear_warmup * rsqrt_decay", 0.5f, 100);
  EXPECT_NEAR(lr(0), 0.0, 1e-12);
  EXPECT_NEAR(lr(50), 0.5 * 0.5 / 10.0, 1e-12);
  EXPECT_NEAR(lr(100), 0.5 / 10.0, 1e-12);
  EXPECT_NEAR(lr(400), 0.5 / 20.0, 1e-12);
}

TEST(LearningRateTest, RsqrtNormalizedDecayIsOneUntilWarmupEnds) {
  auto lr = Make("constant * rsqrt_normalized_decay", 2.0f, 100);
  EXPECT_NEAR(lr(10), 2.0, 1e-12);
  EXPECT_NEAR(lr(400), 1.0, 1e-12);  // sqrt(100) / sqrt(400)
}

TEST(LearningRateTest, DecayEvery) {
  LearningRateSchedule config;
  config.set_factors("constant * decay_every");
  config.set_base_learning_rate(1.0f);
  config.set_decay_factor(0.1f);
  config.set_steps_per_decay(1000);
  auto lr = *LearningRateCallable::Create(config);
  EXPECT_NEAR(lr(999), 1.0, 1e-12);
  EXPECT_NEAR(lr(1000), 0.1, 1e-7);
  EXPECT_NEAR(lr(2500), 0.01, 1e-8);
}

TEST(LearningRateTest, CosineAndLinearDecayAfterWarmupAndCyclic) {
  auto cosine = Make("constant * linear_warmup * cosine_decay", 1.0f, 100, 1000);
  EXPECT_NEAR(cosine(50), 0.5, 1e-12);  // warmup half way, progress 0 -> cos factor 1
  EXPECT_NEAR(cosine(100), 1.0, 1e-12);
  EXPECT_NEAR(cosine(600), 0.5, 1e-12);  // p = 0.5
  EXPECT_NEAR(cosine(1099), 0.5 * (1 + std::cos(M_PI * 0.999)), 1e-12);
  EXPECT_NEAR(cosine(1100), 1.0, 1e-12);  // a new cycle
  auto linear = Make("constant * linear_decay", 2.0f, 0, 100);
  EXPECT_NEAR(linear(0), 2.0, 1e-12);
  EXPECT_NEAR(linear(25), 1.5, 1e-12);
  EXPECT_NEAR(linear(99), 2.0 * 0.01, 1e-12);
}

TEST(LearningRateTest, StepOffsetAndFloor) {
  auto lr = Make("constant * linear_decay", 1.0f, 0, 100, 0, /*step_offset=*/50, /*min_lr=*/0.2f);
  EXPECT_NEAR(lr(10), 1.0, 1e-12);  // before the offset: step 0
  EXPECT_NEAR(lr(75), 0.75, 1e-12);
  EXPECT_NEAR(lr(140), 0.2, 1e-7);  // 0.1 floored at 0.2
}

TEST(LearningRateTest, UnknownFactorAndMissingParameters) {
  LearningRateSchedule config;
  config.set_factors("constant * exponential_decay");
  EXPECT_THAT(LearningRateCallable::Create(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"exponential_decay\"")));
  config.set_factors("constant * rsqrt_decay");
  EXPECT_THAT(LearningRateCallable::Create(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("warmup_steps")));
  config.set_factors("cosine_decay");
  EXPECT_THAT(LearningRateCallable::Create(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("steps_per_cycle")));
}

TEST(LearningRateTest, EveryFactorTheSpecAllowsIsOneTheScheduleComputes) {
  // One table (spec/learning_rate_factors.h) for validation and the
  // schedule: each name parses to its factor and builds a schedule.
  ASSERT_EQ(LearningRateFactorNames().size(), 7u);
  for (const std::string& name : LearningRateFactorNames()) {
    LearningRateSchedule config;
    config.set_factors(name);
    config.set_warmup_steps(10);
    config.set_steps_per_decay(5);
    config.set_steps_per_cycle(100);
    EXPECT_THAT(LearningRateCallable::Create(config).status(), IsOk()) << name;
    EXPECT_TRUE(ParseLearningRateFactor(name).has_value()) << name;
  }
  EXPECT_FALSE(ParseLearningRateFactor("Constant").has_value());
  EXPECT_EQ(ParseLearningRateFactor("cosine_decay"), LearningRateFactor::kCosineDecay);
}

}  // namespace
}  // namespace trainyard
