#include "data/span_corruption.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(SpanCorruptionTest, ExactNoiseCountAndSpansPerExample) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<bool> mask = RandomSpansNoiseMask(100, 0.15, 3.0, &rng);
    ASSERT_EQ(mask.size(), 100u);
    int noise = 0, spans = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      noise += mask[i];
      spans += mask[i] && (i == 0 || !mask[i - 1]);
    }
    EXPECT_EQ(noise, 15);   // round(100 * 0.15)
    EXPECT_EQ(spans, 5);    // round(15 / 3)
    EXPECT_FALSE(mask[0]);  // spans alternate starting with non-noise
  }
}

TEST(SpanCorruptionTest, StatisticsOverTenThousandExamplesMatchTheConfiguration) {
  std::mt19937_64 rng(7);
  double noise = 0, tokens = 0, spans = 0;
  std::vector<double> position_noise(57, 0.0);
  for (int n = 0; n < 10000; ++n) {
    const int64_t length = 20 + n % 37;  // varied lengths 20..56
    const std::vector<bool> mask = RandomSpansNoiseMask(length, 0.15, 3.0, &rng);
    for (int64_t i = 0; i < length; ++i) {
      noise += mask[i];
      spans += mask[i] && (i == 0 || !mask[i - 1]);
      if (length == 56) position_noise[i] += mask[i];
    }
    tokens += static_cast<double>(length);
  }
  EXPECT_NEAR(noise / tokens, 0.15, 0.005);
  EXPECT_NEAR(noise / spans, 3.0, 0.3);
  // As in T5, spans alternate starting with non-noise and ending with noise:
  // the first token is never noise, the last always; the middle of the
  // sequence is noised at about the configured rate.
  EXPECT_EQ(position_noise[0], 0.0);
  EXPECT_NEAR(position_noise[55] / 270.0, 1.0, 1e-9);
  for (int i = 20; i < 36; ++i) EXPECT_NEAR(position_noise[i] / 270.0, 0.15, 0.08) << i;
}

TEST(SpanCorruptionTest, SentinelsReplaceSpansAndTargetsRestoreThem) {
  std::mt19937_64 rng(3);
  std::vector<int32_t> tokens;
  for (int32_t t = 10; t < 40; ++t) tokens.push_back(t);
  const TokenizedExample ex = SpanCorrupt(tokens, /*first_sentinel=*/499, 0.15, 3.0, &rng);
  // Re-insert the targets' spans at the sentinels: the original sequence.
  std::vector<int32_t> restored;
  size_t t = 0;
  for (size_t i = 0; i + 1 < ex.inputs.size(); ++i) {
    const int32_t token = ex.inputs[i];
    if (token < 400) {
      restored.push_back(token);
      continue;
    }
    ASSERT_EQ(ex.targets[t], token);  // the same sentinel opens the span in the targets
    for (++t; t + 1 < ex.targets.size() && ex.targets[t] < 400; ++t) restored.push_back(ex.targets[t]);
  }
  EXPECT_EQ(restored, tokens);
  EXPECT_EQ(ex.inputs.back(), 1);
  EXPECT_EQ(ex.targets.back(), 1);
  EXPECT_EQ(ex.targets.front(), 499);  // <extra_id_0> first
}

}  // namespace
}  // namespace trainyard
