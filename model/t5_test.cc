#include "model/t5.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

ModelConfig Tiny(bool v1_1 = true) {
  ModelConfig c = *PresetConfig("tiny");
  if (!v1_1) {
    c.set_feed_forward(ModelConfig::RELU);
    c.set_tie_embeddings(true);
  }
  c.set_dropout_rate(0.0f);
  return c;
}

// A batch of 2 rows, no padding in the decoder.
T5Batch MakeBatch(int64_t seed) {
  torch::manual_seed(seed);
  T5Batch b;
  b.encoder_input_tokens = torch::randint(2, 500, {2, 7}, torch::kLong);
  b.encoder_input_tokens.index_put_({1, torch::indexing::Slice(5)}, 0);  // padding
  b.decoder_target_tokens = torch::randint(2, 500, {2, 5}, torch::kLong);
  b.decoder_input_tokens = torch::zeros_like(b.decoder_target_tokens);
  b.decoder_input_tokens.narrow(1, 1, 4).copy_(b.decoder_target_tokens.narrow(1, 0, 4));
  b.decoder_loss_weights = torch::ones({2, 5});
  return b;
}

class PresetModuleTest : public ::testing::TestWithParam<std::string> {};

// The module built from each preset (on the meta device: no memory) has
// exactly the closed-form count, which equals the published one
// (model/presets_test.cc).
TEST_P(PresetModuleTest, ModuleHasPublishedParameterCount) {
  ModelConfig config = *PresetConfig(GetParam());
  T5 model(config, torch::Device(torch::kMeta));
  EXPECT_EQ(model->NumParameters(), CountParameters(config));
}

INSTANTIATE_TEST_SUITE_P(AllPresets, PresetModuleTest, ::testing::ValuesIn(PresetNames()));

TEST(T5Test, ParameterNamesFollowT5X) {
  T5 model(Tiny(), torch::Device(torch::kMeta));
  auto params = model->named_parameters();
  EXPECT_NE(params.find("encoder_layers.0.attention.query.weight"), nullptr);
  EXPECT_NE(params.find("decoder_layers.1.encoder_decoder_attention.out.weight"), nullptr);
  EXPECT_NE(params.find("decoder_layers.0.mlp.wi_1.weight"), nullptr);
  EXPECT_NE(params.find("encoder_relpos.rel_embedding"), nullptr);
  EXPECT_NE(params.find("logits_dense.weight"), nullptr);
  EXPECT_EQ(params.find("encoder_layers.0.attention.query.bias"), nullptr);  // no biases
  T5 tied(Tiny(/*v1_1=*/false), torch::Device(torch::kMeta));
  EXPECT_EQ(tied->named_parameters().find("logits_dense.weight"), nullptr);
  EXPECT_NE(tied->named_parameters().find("decoder_layers.0.mlp.wi.weight"), nullptr);
}

TEST(T5Test, SameSeedSameParameters) {
  T5 a(Tiny(), torch::kCPU, 7), b(Tiny(), torch::kCPU, 7), c(Tiny(), torch::kCPU, 8);
  EXPECT_TRUE(torch::equal(a->token_embedder->weight, b->token_embedder->weight));
  EXPECT_FALSE(torch::equal(a->token_embedder->weight, c->token_embedder->weight));
}

TEST(RelativePositionBucketTest, MatchesT5Buckets) {
  // Bidirectional, 32 buckets, max distance 128: exact for |d| < 8, then
  // logarithmic; positive offsets use the upper 16 buckets.
  torch::Tensor rel = torch::tensor({-200, -128, -20, -8, -7, -1, 0, 1, 7, 8, 20, 128, 200});
  torch::Tensor buckets = RelativePositionBucket(rel, true, 32, 128);
  // 8 + floor(log(n/8)/log(16) * 8): n=20 -> 10, n=128 -> 16 -> clamp 15.
  EXPECT_TRUE(torch::equal(buckets, torch::tensor({15, 15, 10, 8, 7, 1, 0, 17, 23, 24, 26, 31, 31})));
  // Causal: only non-positive offsets matter; future keys map to bucket 0.
  torch::Tensor causal = RelativePositionBucket(torch::tensor({-300, -40, -16, -15, 0, 5}), false, 32, 128);
  // 16 + floor(log(n/16)/log(8) * 16): n=40 -> 23, n=16 -> 16.
  EXPECT_TRUE(torch::equal(causal, torch::tensor({31, 23, 16, 15, 0, 0})));
}

TEST(MaskTest, PackedSegmentsNeverAttendAcrossAndDecoderIsCausal) {
  T5Batch b;
  b.encoder_input_tokens = torch::tensor({{5, 6, 1, 7, 1, 0}});
  b.encoder_segment_ids = torch::tensor({{1, 1, 1, 2, 2, 0}});
  b.decoder_target_tokens = torch::tensor({{8, 1, 9, 9, 1}});
  b.decoder_segment_ids = torch::tensor({{1, 1, 2, 2, 2}});
  b.decoder_input_tokens = torch::tensor({{0, 8, 0, 9, 9}});
  const torch::Tensor enc = EncoderSelfAttentionMask(b).squeeze();
  const torch::Tensor dec = DecoderSelfAttentionMask(b).squeeze();
  const torch::Tensor cross = CrossAttentionMask(b).squeeze();
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) {
      const int si = b.encoder_segment_ids[0][i].item<int>();
      const int sj = b.encoder_segment_ids[0][j].item<int>();
      const bool allowed = si != 0 && si == sj;
      EXPECT_EQ(enc[i][j].item<float>() == 0.0f, allowed) << i << "," << j;
    }
  }
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 5; ++j) {
      const bool allowed = j <= i && b.decoder_segment_ids[0][i].item<int>() == b.decoder_segment_ids[0][j].item<int>();
      EXPECT_EQ(dec[i][j].item<float>() == 0.0f, allowed) << i << "," << j;
    }
    for (int j = 0; j < 6; ++j) {
      const bool allowed = b.encoder_segment_ids[0][j].item<int>() == b.decoder_segment_ids[0][i].item<int>();
      EXPECT_EQ(cross[i][j].item<float>() == 0.0f, allowed) << i << "," << j;
    }
  }
}

TEST(T5Test, PackingDoesNotLeakAcrossSegments) {
  // Two examples packed in one row give the same logits as each alone.
  T5 model(Tiny(), torch::kCPU, 3);
  model->eval();
  torch::NoGradGuard no_grad;
  T5Batch packed;
  packed.encoder_input_tokens = torch::tensor({{11, 12, 1, 21, 22, 23, 1, 0}});
  packed.encoder_segment_ids = torch::tensor({{1, 1, 1, 2, 2, 2, 2, 0}});
  packed.decoder_target_tokens = torch::tensor({{31, 1, 41, 42, 1, 0}});
  packed.decoder_segment_ids = torch::tensor({{1, 1, 2, 2, 2, 0}});
  packed.decoder_input_tokens = torch::tensor({{0, 31, 0, 41, 42, 0}});
  T5Batch second;
  second.encoder_input_tokens = torch::tensor({{21, 22, 23, 1}});
  second.decoder_target_tokens = torch::tensor({{41, 42, 1}});
  second.decoder_input_tokens = torch::tensor({{0, 41, 42}});
  const torch::Tensor packed_logits = model->forward(packed, {});
  const torch::Tensor alone = model->forward(second, {});
  EXPECT_TRUE(torch::allclose(packed_logits.narrow(1, 2, 3), alone, 1e-5, 1e-5))
      << (packed_logits.narrow(1, 2, 3) - alone).abs().max();
}

TEST(T5Test, DecoderIsCausal) {
  T5 model(Tiny(), torch::kCPU, 3);
  torch::NoGradGuard no_grad;
  T5Batch b = MakeBatch(1);
  const torch::Tensor before = model->forward(b, {});
  b.decoder_input_tokens.narrow(1, 3, 2).fill_(77);  // change the future
  const torch::Tensor after = model->forward(b, {});
  EXPECT_TRUE(torch::equal(before.narrow(1, 0, 3), after.narrow(1, 0, 3)));
  EXPECT_FALSE(torch::allclose(before.narrow(1, 3, 2), after.narrow(1, 3, 2)));
}

class CacheTest : public ::testing::TestWithParam<bool> {};

TEST_P(CacheTest, CachedDecodingEqualsFullRecompute) {
  T5 model(Tiny(GetParam()), torch::kCPU, 5);
  torch::NoGradGuard no_grad;
  T5Batch b = MakeBatch(2);
  const torch::Tensor full = model->forward(b, {});
  DecodeState state = model->StartDecoding(b.encoder_input_tokens, 5, {});
  for (int64_t t = 0; t < 5; ++t) {
    const torch::Tensor step = model->DecodeStep(b.decoder_input_tokens.select(1, t), &state, {});
    EXPECT_TRUE(torch::allclose(step, full.select(1, t), 1e-4, 1e-5))
        << "t=" << t << " max diff " << (step - full.select(1, t)).abs().max();
  }
}

INSTANTIATE_TEST_SUITE_P(V1AndV11, CacheTest, ::testing::Bool());

TEST(T5Test, DropoutIsDeterministicGivenTheGenerator) {
  ModelConfig config = Tiny();
  config.set_dropout_rate(0.3f);
  T5 model(config, torch::kCPU, 1);
  T5Batch b = MakeBatch(3);
  auto run = [&](uint64_t seed) {
    ForwardOptions options;
    options.train = true;
    options.generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    return model->forward(b, options);
  };
  EXPECT_TRUE(torch::equal(run(9), run(9)));
  EXPECT_FALSE(torch::equal(run(9), run(10)));
  EXPECT_FALSE(torch::equal(run(9), model->forward(b, {})));
}

TEST(T5Test, Bfloat16ComputeStaysCloseToFloat32) {
  T5 model(Tiny(), torch::kCPU, 4);
  torch::NoGradGuard no_grad;
  T5Batch b = MakeBatch(4);
  ForwardOptions bf16;
  bf16.compute_dtype = torch::kBFloat16;
  const torch::Tensor ref = model->forward(b, {});
  const torch::Tensor low = model->forward(b, bf16);
  EXPECT_EQ(low.scalar_type(), torch::kFloat);
  // bf16 has 8 bits of mantissa: relative error ~1e-2 on logits of this size.
  EXPECT_LT((low - ref).abs().max().item<float>(), 0.1f * ref.abs().max().item<float>());
  // The predicted token agrees at (nearly) every one of the 10 positions.
  EXPECT_GE(low.argmax(-1).eq(ref.argmax(-1)).sum().item<int>(), 8);
}

}  // namespace
}  // namespace trainyard
