#include "evaluation/metric_fns.h"

#include <cmath>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(Tokenize13aTest, SplitsSymbolsAndPunctuationLikeSacrebleu) {
  EXPECT_EQ(Tokenize13a("Hello, world."), "Hello , world .");
  EXPECT_EQ(Tokenize13a("pi is 3.14, not 1,000."), "pi is 3.14 , not 1,000 .");
  EXPECT_EQ(Tokenize13a("pages 5-6 of a well-known (old) book"), "pages 5 - 6 of a well-known ( old ) book");
  EXPECT_EQ(Tokenize13a("don't &amp; \"quote\""), "don't & \" quote \"");
  EXPECT_EQ(Tokenize13a("  spaces\tand\nlines  "), "spaces and lines");
}

TEST(MetricFnsTest, ExactMatchNormalisesSequenceAccuracyDoesNot) {
  const std::vector<std::string> t = {"The Cat!", "dog", "a bird"};
  const std::vector<std::string> p = {"cat", "Dog", "fish"};
  EXPECT_NEAR(ExactMatch(t, p)->at("exact_match"), 200.0 / 3, 1e-9);
  EXPECT_EQ(SequenceAccuracy(t, p)->at("sequence_accuracy"), 0.0);
  EXPECT_EQ(SequenceAccuracy({"x", "y"}, {"x", "z"})->at("sequence_accuracy"), 50.0);
  EXPECT_EQ(NormalizeSquad("  The  quick, brown fox!  "), "quick brown fox");
}

TEST(MetricFnsTest, TokenF1IsTheHarmonicMeanOfTokenPrecisionAndRecall) {
  // "cat sat" vs "cat sat down": P = 2/3, R = 1, F = 0.8. Both empty: 1.
  EXPECT_NEAR(TokenF1({"The cat sat."}, {"a cat sat down"})->at("f1"), 80.0, 1e-9);
  EXPECT_NEAR(TokenF1({"cat", "the"}, {"dog", ""})->at("f1"), 50.0, 1e-9);
}

TEST(MetricFnsTest, BleuFollowsSacrebleusCorpusFormula) {
  EXPECT_NEAR(Bleu({"a b c d e", "x y z w"}, {"a b c d e", "x y z w"})->at("bleu"), 100.0, 1e-9);
  // Precisions 5/6, 3/5, 2/4, 1/3; equal lengths.
  EXPECT_NEAR(Bleu({"the cat sat on a mat"}, {"the cat sat on the mat"})->at("bleu"),
              100 * std::pow(5.0 / 6 * 3.0 / 5 * 2.0 / 4 * 1.0 / 3, 0.25), 1e-9);
  // No 4-gram matches: "exp" smoothing makes p4 = 100 / (2 * 1).
  EXPECT_NEAR(Bleu({"a b c e"}, {"a b c d"})->at("bleu"), std::pow(75.0 * (200.0 / 3) * 50 * 50, 0.25), 1e-9);
  // Counts are summed over the corpus before the precisions are taken:
  // 1-grams 6/8, 2-grams 4/6, 3-grams 2/4, 4-grams 0/2 (smoothed: 100/4).
  EXPECT_NEAR(Bleu({"a b c d", "e f g h"}, {"a b c x", "e f g y"})->at("bleu"),
              std::pow(75.0 * (400.0 / 6) * 50 * 25, 0.25), 1e-9);
  // Brevity: a hypothesis of 3 tokens against 6.
  EXPECT_NEAR(Bleu({"a b c d e f"}, {"a b c"})->at("bleu"), 0.0, 1e-9);  // no 4-grams at all: 0
  EXPECT_NEAR(Bleu({"a b c d e f g h"}, {"a b c d"})->at("bleu"), 100 * std::exp(1 - 8.0 / 4), 1e-9);
  EXPECT_NEAR(Bleu({"x"}, {""})->at("bleu"), 0.0, 1e-12);
}

TEST(MetricFnsTest, RougeF1MeasuresOverLowercaseAlphanumericTokens) {
  // "the cat sat" vs "The cat!": R1 P=1 R=2/3 F=0.8; R2 P=1 R=1/2 F=2/3; L = R1.
  absl::StatusOr<MetricResults> r = Rouge({"the cat sat"}, {"The cat!"});
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_NEAR(r->at("rouge1"), 80.0, 1e-9);
  EXPECT_NEAR(r->at("rouge2"), 200.0 / 3, 1e-9);
  EXPECT_NEAR(r->at("rougeL"), 80.0, 1e-9);
  // LCS differs from unigram overlap when the order differs: "a b c d" vs
  // "d c b a": every unigram matches, LCS is 1.
  r = Rouge({"a b c d"}, {"d c b a"});
  EXPECT_NEAR(r->at("rouge1"), 100.0, 1e-9);
  EXPECT_NEAR(r->at("rouge2"), 0.0, 1e-9);
  EXPECT_NEAR(r->at("rougeL"), 25.0, 1e-9);
  EXPECT_EQ(RougeTokens("Hello, World-2024!"), (std::vector<std::string>{"hello", "world", "2024"}));
}

TEST(MetricFnsTest, ComputeMetricsCallsEachFormWithItsArguments) {
  std::vector<std::string> seen_targets;
  AuxValues seen_aux;
  MetricFn with_aux{"aux",
                    PredictionAuxMetricFn([&](const std::vector<std::string>& t, const std::vector<std::string>& p,
                                              const AuxValues& aux) -> absl::StatusOr<MetricResults> {
                      seen_targets = t;
                      seen_aux = aux;
                      return MetricResults{{"mean_aux_score", (aux.at("scores")[0] + aux.at("scores")[1]) / 2},
                                           {"predictions", static_cast<double>(p.size())}};
                    })};
  const std::vector<MetricFn> fns = {*BuiltinMetricFn("sequence_accuracy"), *BuiltinMetricFn("mean_log_likelihood"),
                                     with_aux};
  const std::vector<std::string> targets = {"one", "two"}, predictions = {"one", "three"};
  const AuxValues aux = {{"scores", {-1.0, -3.0}}};
  const std::vector<double> scores = {-0.5, -1.5};
  absl::StatusOr<MetricResults> m = ComputeMetrics(fns, targets, &predictions, &aux, &scores);
  ASSERT_THAT(m.status(), IsOk());
  EXPECT_EQ(
      *m,
      (MetricResults{
          {"mean_aux_score", -2.0}, {"mean_log_likelihood", -1.0}, {"predictions", 2.0}, {"sequence_accuracy", 50.0}}));
  EXPECT_EQ(seen_targets, targets);
  EXPECT_EQ(seen_aux, aux);
  EXPECT_THAT(ComputeMetrics(fns, targets, &predictions, &aux, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'mean_log_likelihood' needs scores")));
  EXPECT_THAT(
      ComputeMetrics({*BuiltinMetricFn("bleu"), *BuiltinMetricFn("bleu")}, targets, &predictions, &aux, &scores)
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metric 'bleu' is returned by both 'bleu' and 'bleu'")));
  EXPECT_THAT(ComputeMetrics({*BuiltinMetricFn("rouge")}, targets, nullptr, &aux, &scores).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'rouge' needs predictions")));
  const std::vector<std::string> one = {"x"};
  EXPECT_THAT(ComputeMetrics({*BuiltinMetricFn("exact_match")}, targets, &one, nullptr, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metric function 'exact_match': exact_match: 2 targets but 1 predictions")));
  EXPECT_THAT(BuiltinMetricFn("accuracy").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not one of: bleu, exact_match")));
}

}  // namespace
}  // namespace trainyard
