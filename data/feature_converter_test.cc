#include "data/feature_converter.h"

#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

TEST(FeatureConverterTest, UnpackedPadsAndShiftsRight) {
  FeatureConverter converter(4, 3, /*pack=*/false);
  ConvertedBatch b = converter.Convert({{{5, 6, 1}, {7, 1}}, {{8, 1}, {9, 10, 1}}});
  EXPECT_EQ(b.rows, 2);
  EXPECT_FALSE(b.packed());
  EXPECT_THAT(b.encoder_input_tokens, ElementsAre(5, 6, 1, 0, 8, 1, 0, 0));
  EXPECT_THAT(b.decoder_target_tokens, ElementsAre(7, 1, 0, 9, 10, 1));
  EXPECT_THAT(b.decoder_input_tokens, ElementsAre(0, 7, 0, 0, 9, 10));
  EXPECT_THAT(b.decoder_loss_weights, ElementsAre(1, 1, 0, 1, 1, 1));
  EXPECT_DOUBLE_EQ(b.target_non_padding_fraction(), 5.0 / 6.0);
}

TEST(FeatureConverterTest, PackedPlacesExamplesWithSegmentsAndPositions) {
  FeatureConverter converter(6, 5, /*pack=*/true);
  ConvertedBatch b = converter.Convert({{{5, 6, 1}, {7, 1}}, {{8, 1}, {9, 10, 1}}, {{4, 4, 4, 1}, {3, 1}}});
  ASSERT_EQ(b.rows, 2);  // the third example does not fit the first row's inputs
  EXPECT_THAT(b.encoder_input_tokens, ElementsAre(5, 6, 1, 8, 1, 0, /**/ 4, 4, 4, 1, 0, 0));
  EXPECT_THAT(b.encoder_segment_ids, ElementsAre(1, 1, 1, 2, 2, 0, /**/ 1, 1, 1, 1, 0, 0));
  EXPECT_THAT(b.encoder_positions, ElementsAre(0, 1, 2, 0, 1, 0, /**/ 0, 1, 2, 3, 0, 0));
  EXPECT_THAT(b.decoder_target_tokens, ElementsAre(7, 1, 9, 10, 1, /**/ 3, 1, 0, 0, 0));
  EXPECT_THAT(b.decoder_input_tokens, ElementsAre(0, 7, 0, 9, 10, /**/ 0, 3, 0, 0, 0));
  EXPECT_THAT(b.decoder_segment_ids, ElementsAre(1, 1, 2, 2, 2, /**/ 1, 1, 0, 0, 0));
  EXPECT_THAT(b.decoder_positions, ElementsAre(0, 1, 0, 1, 2, /**/ 0, 1, 0, 0, 0));
  EXPECT_EQ(b.examples, 3);
  EXPECT_DOUBLE_EQ(b.target_non_padding_fraction(), 7.0 / 10.0);
}

// Reads the examples back out of packed rows, segment by segment.
std::vector<TokenizedExample> Unpack(const ConvertedBatch& b) {
  std::vector<TokenizedExample> out;
  for (int64_t r = 0; r < b.rows; ++r) {
    std::map<int, TokenizedExample> by_segment;
    for (int64_t t = 0; t < b.inputs_length; ++t) {
      const int s = b.encoder_segment_ids[r * b.inputs_length + t];
      if (s) by_segment[s].inputs.push_back(b.encoder_input_tokens[r * b.inputs_length + t]);
    }
    for (int64_t t = 0; t < b.targets_length; ++t) {
      const int64_t k = r * b.targets_length + t;
      const int s = b.decoder_segment_ids[k];
      if (!s) continue;
      TokenizedExample& ex = by_segment[s];
      // The decoder input is the previous target of the same segment, or 0.
      const int32_t want_input = ex.targets.empty() ? 0 : ex.targets.back();
      EXPECT_EQ(b.decoder_input_tokens[k], want_input) << "row " << r << " position " << t;
      EXPECT_EQ(b.decoder_positions[k], static_cast<int32_t>(ex.targets.size()));
      ex.targets.push_back(b.decoder_target_tokens[k]);
    }
    for (auto& [s, ex] : by_segment) out.push_back(ex);
  }
  return out;
}

TEST(FeatureConverterTest, PackingNeverMixesSegmentsAndKeepsEveryExample) {
  std::mt19937 rng(42);
  std::vector<TokenizedExample> examples(500);
  for (auto& ex : examples) {
    ex.inputs.resize(1 + rng() % 12);
    ex.targets.resize(1 + rng() % 9);
    for (auto& t : ex.inputs) t = 3 + static_cast<int32_t>(rng() % 100);
    for (auto& t : ex.targets) t = 3 + static_cast<int32_t>(rng() % 100);
  }
  FeatureConverter converter(16, 12, /*pack=*/true);
  const ConvertedBatch b = converter.Convert(examples);
  std::vector<TokenizedExample> back = Unpack(b);
  ASSERT_EQ(back.size(), examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    EXPECT_THAT(back[i].inputs, ElementsAreArray(examples[i].inputs)) << i;
    EXPECT_THAT(back[i].targets, ElementsAreArray(examples[i].targets)) << i;
  }
  // Packing pays: far fewer rows than examples, and rows mostly full.
  // (In-order greedy packing: 500 examples of ~6.5/16 input and ~5/12 target
  // tokens fit ~1.5 per row.)
  EXPECT_LT(b.rows, 350);
  EXPECT_GT(b.target_non_padding_fraction(), 0.6);
  // Deterministic.
  const ConvertedBatch again = converter.Convert(examples);
  EXPECT_EQ(again.decoder_target_tokens, b.decoder_target_tokens);
  EXPECT_EQ(again.encoder_segment_ids, b.encoder_segment_ids);
}

TEST(FeatureConverterTest, TooLongExamplesAreTruncatedAndCounted) {
  FeatureConverter converter(3, 2, /*pack=*/true);
  ConvertedBatch b = converter.Convert({{{5, 6, 7, 8, 1}, {9, 9, 1}}, {{4}, {3}}});
  EXPECT_EQ(b.truncated_examples, 1);
  EXPECT_THAT(b.encoder_input_tokens, ElementsAre(5, 6, 7, 4, 0, 0));
  EXPECT_THAT(b.decoder_target_tokens, ElementsAre(9, 9, 3, 0));
}

TEST(FeatureConverterTest, ConvertToRowsReportsWhatFit) {
  FeatureConverter converter(4, 4, /*pack=*/true);
  std::vector<TokenizedExample> examples(5, TokenizedExample{{5, 1}, {6, 1}});
  size_t consumed = 0;
  ConvertedBatch b = converter.ConvertToRows(examples, 2, &consumed);
  EXPECT_EQ(consumed, 4u);  // two per row
  EXPECT_EQ(b.rows, 2);
  FeatureConverter unpacked(4, 4, /*pack=*/false);
  b = unpacked.ConvertToRows(examples, 3, &consumed);
  EXPECT_EQ(consumed, 3u);
}

}  // namespace
}  // namespace trainyard
