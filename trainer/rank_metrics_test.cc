#include "trainer/rank_metrics.h"

#include <map>
#include <string>
#include <vector>

#include "collective/ranks_on_threads.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

torch::Tensor Scalar(double v) { return torch::tensor(v, torch::kDouble); }

// One rank's share of one step: `correct` of `tokens` real target tokens,
// and its part of the step's loss.
Metrics Share(double correct, double tokens, double loss) {
  return {{"accuracy", Metric::Average(Scalar(correct), Scalar(tokens))},
          {"loss", Metric::AveragePerStep(Scalar(loss))}};
}

// Each rank's shares of the steps it took part in, merged across steps.
Metrics Merged(const std::vector<Metrics>& steps) {
  Metrics total;
  for (const Metrics& m : steps) MergeMetrics(m, /*within_step=*/false, &total);
  return total;
}

// `shares[r]`: rank r's shares, combined over 2 global steps on
// shares.size() ranks; every rank's values.
std::vector<std::map<std::string, double>> Combine(const std::vector<std::vector<Metrics>>& shares) {
  const int world = static_cast<int>(shares.size());
  std::vector<std::map<std::string, double>> values(world);
  OnFakeRanks(world, [&](int rank, Collective* collective) {
    Metrics metrics = Merged(shares[rank]);
    EXPECT_THAT(AllReduceMetrics(collective, /*steps=*/2, &metrics), IsOk());
    values[rank] = MetricValues(metrics);
  });
  return values;
}

// Three ranks, the last in one of the two steps only: accuracy is every
// rank's correct tokens over every rank's tokens, and the loss the sum of
// the ranks' shares per global step (not per rank's step).
TEST(RankMetricsTest, SumsNumeratorsAndDenominatorsAndCountsGlobalSteps) {
  const auto values =
      Combine({{Share(1, 4, 1.5), Share(2, 6, 0.5)}, {Share(3, 3, 1.0), Share(1, 3, 0.25)}, {Share(1, 4, 0.75)}});
  for (const auto& v : values) {
    EXPECT_DOUBLE_EQ(v.at("accuracy"), 8.0 / 20.0);
    EXPECT_DOUBLE_EQ(v.at("loss"), (2.0 + 1.25 + 0.75) / 2);
  }
}

// A rank that took part in no step (an empty eval shard) holds no metrics:
// it gets the others' names and contributes nothing; no rank waits.
TEST(RankMetricsTest, ARankWithoutStepsGetsTheNames) {
  const auto values = Combine({{Share(1, 4, 1.5), Share(2, 6, 0.5)}, {Share(3, 3, 1.0), Share(1, 3, 0.25)}, {}});
  for (const auto& v : values) {
    ASSERT_EQ(v.size(), 2u);
    EXPECT_DOUBLE_EQ(v.at("accuracy"), 7.0 / 16.0);
    EXPECT_DOUBLE_EQ(v.at("loss"), (2.0 + 1.25) / 2);
  }
}

TEST(RankMetricsTest, NoRankWithMetricsLeavesThemEmpty) {
  for (const auto& v : Combine({{}, {}})) EXPECT_TRUE(v.empty());
}

TEST(RankMetricsTest, OneRankIsLeftAsItIs) {
  LocalCollective local;
  Metrics metrics = Merged({Share(1, 4, 1.5), Share(2, 6, 0.5)});
  ASSERT_THAT(AllReduceMetrics(&local, /*steps=*/2, &metrics), IsOk());
  EXPECT_DOUBLE_EQ(MetricValues(metrics).at("accuracy"), 3.0 / 10.0);
  EXPECT_DOUBLE_EQ(MetricValues(metrics).at("loss"), 2.0 / 2);
}

}  // namespace
}  // namespace trainyard
