#include "spec/presets.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// The published parameter counts of T5X's presets.
struct Expected {
  const char* preset;
  int64_t params;
};

class PresetCountTest : public ::testing::TestWithParam<Expected> {};

TEST_P(PresetCountTest, MatchesPublishedCount) {
  absl::StatusOr<ModelConfig> config = PresetConfig(GetParam().preset);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(CountParameters(*config), GetParam().params);
}

INSTANTIATE_TEST_SUITE_P(Published, PresetCountTest,
                         ::testing::Values(Expected{"t5_small", 60506624}, Expected{"t5_base", 222903552},
                                           Expected{"t5_large", 737668096}, Expected{"t5_3b", 2851598336LL},
                                           Expected{"t5_11b", 11307321344LL}, Expected{"t5_1_1_small", 76961152},
                                           Expected{"t5_1_1_base", 247577856}, Expected{"t5_1_1_large", 783150080},
                                           Expected{"t5_1_1_xl", 2849757184LL}, Expected{"t5_1_1_xxl", 11135332352LL}),
                         [](const ::testing::TestParamInfo<Expected>& info) { return info.param.preset; });

TEST(PresetsTest, TinyIsAFewHundredThousandParameters) {
  absl::StatusOr<ModelConfig> config = PresetConfig("tiny");
  ASSERT_TRUE(config.ok());
  // 2 x 512 x 64 embeddings + 2 encoder layers of 65,664 + 2 decoder layers of
  // 82,112 + 2 x (32 x 4) relative biases + 2 final norms of 64.
  EXPECT_EQ(CountParameters(*config), 361472);
}

TEST(PresetsTest, UnknownPresetListsAllowedNames) {
  absl::StatusOr<ModelConfig> config = PresetConfig("t5_huge");
  EXPECT_THAT(config.status(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("t5_huge")));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("t5_1_1_xxl"));
}

TEST(PresetsTest, ResolveAppliesDropoutOverrideToPreset) {
  ModelSpec spec;
  spec.set_preset("t5_small");
  spec.set_dropout_rate(0.25f);
  absl::StatusOr<ModelConfig> config = ResolveModelConfig(spec);
  ASSERT_TRUE(config.ok());
  EXPECT_FLOAT_EQ(config->dropout_rate(), 0.25f);
  EXPECT_EQ(config->d_ff(), 2048);
}

TEST(PresetsTest, ResolveAppliesVocabSizeOverrideToPreset) {
  ModelSpec spec;
  spec.set_preset("tiny");
  absl::StatusOr<ModelConfig> config = ResolveModelConfig(spec);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->vocab_size(), 512);
  spec.set_vocab_size(640);
  config = ResolveModelConfig(spec);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->vocab_size(), 640);
  EXPECT_EQ(config->d_model(), PresetConfig("tiny")->d_model());
}

TEST(PresetsTest, ResolveFillsExplicitConfigDefaults) {
  ModelSpec spec;
  spec.mutable_config()->set_vocab_size(100);
  absl::StatusOr<ModelConfig> config = ResolveModelConfig(spec);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->relative_attention_num_buckets(), 32);
  EXPECT_EQ(config->relative_attention_max_distance(), 128);
  EXPECT_FLOAT_EQ(config->dropout_rate(), 0.1f);
  EXPECT_FLOAT_EQ(config->layer_norm_epsilon(), 1e-6f);
  EXPECT_EQ(config->feed_forward(), ModelConfig::RELU);
}

TEST(PresetsTest, ResolveWithoutArchitectureIsInvalid) {
  EXPECT_THAT(ResolveModelConfig(ModelSpec()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("preset")));
}

}  // namespace
}  // namespace trainyard
