#include "model/weights.h"

#include <fstream>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(WeightsTest, SaveThenAssignRestoresEveryParameterBitForBit) {
  const ModelConfig config = *PresetConfig("tiny");
  T5 a(config, torch::kCPU, 1), b(config, torch::kCPU, 2);
  const std::string path = ::testing::TempDir() + "/tiny.safetensors";
  ASSERT_THAT(SaveParameters(*a, path, torch::kFloat, {{"step", "0"}}), IsOk());
  absl::StatusOr<TensorMap> tensors = ReadTensors(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  EXPECT_EQ(tensors->size(), a->named_parameters().size());
  ASSERT_THAT(AssignParameters(*tensors, /*strict=*/true, b.get()), IsOk());
  for (const auto& p : a->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), b->named_parameters()[p.key()])) << p.key();
  }
}

TEST(WeightsTest, Bfloat16SaveRoundsToBfloat16) {
  const ModelConfig config = *PresetConfig("tiny");
  T5 a(config, torch::kCPU, 1);
  const std::string path = ::testing::TempDir() + "/tiny_bf16.safetensors";
  ASSERT_THAT(SaveParameters(*a, path, torch::kBFloat16), IsOk());
  absl::StatusOr<TensorMap> tensors = ReadTensors(path);
  ASSERT_TRUE(tensors.ok());
  const torch::Tensor& w = tensors->at("token_embedder.weight");
  EXPECT_EQ(w.scalar_type(), torch::kFloat);  // read back as float32
  EXPECT_TRUE(torch::equal(w, a->token_embedder->weight.to(torch::kBFloat16).to(torch::kFloat)));
  EXPECT_THAT(SaveParameters(*a, path, torch::kHalf), StatusCodeIs(absl::StatusCode::kInvalidArgument));
}

TEST(WeightsTest, HfConfigErrorsNameTheKey) {
  const std::string path = ::testing::TempDir() + "/config.json";
  std::ofstream(path) << R"({"vocab_size": 100, "d_model": 8, "d_kv": 2, "d_ff": 16,
                            "num_heads": 4, "feed_forward_proj": "relu"})";
  EXPECT_THAT(ReadHfConfig(path).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing \"num_layers\"")));
  std::ofstream(path) << R"({"vocab_size": 100, "d_model": 8, "d_kv": 2, "d_ff": 16,
                            "num_heads": 4, "num_layers": 2, "feed_forward_proj": "swiglu"})";
  EXPECT_THAT(ReadHfConfig(path).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"swiglu\" is not supported")));
  std::ofstream(path) << R"({"vocab_size": 100, "d_model": 8, "d_kv": 2, "d_ff": 16,
                            "num_heads": 4, "num_layers": 2, "feed_forward_proj": "gated-gelu",
                            "tie_word_embeddings": false})";
  absl::StatusOr<ModelConfig> config = ReadHfConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_decoder_layers(), 2);  // defaults to num_layers
  EXPECT_EQ(config->feed_forward(), ModelConfig::GATED_GELU);
  EXPECT_FALSE(config->tie_embeddings());
  EXPECT_EQ(config->relative_attention_num_buckets(), 32);
}

TEST(WeightsTest, MissingHfDirectoryIsNotFound) {
  EXPECT_THAT(ImportHf("/nonexistent/hf").status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace trainyard
