// Our parameters and Adafactor statistics as a T5X checkpoint: T5X's names
// and layouts for T5 1.0 and T5.1.1, the round trip through
// WriteT5xCheckpoint and ImportT5x (square kernels' factored statistics
// included), bfloat16 parameters, and refusals.
#include "model/t5x_export.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/t5x_checkpoint.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/t5.h"
#include "model/t5x_import.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

ModelConfig Config(bool v1_1) {
  ModelConfig c = *PresetConfig("tiny");  // d_model 64, 4 heads of 16: square attention kernels
  if (!v1_1) {
    c.set_feed_forward(ModelConfig::RELU);
    c.set_tie_embeddings(true);
  }
  return c;
}

TensorMap Params(const ModelConfig& config) {
  T5 model(config, torch::kCPU, 3);
  TensorMap out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// Adafactor-like statistics for every parameter as our Adafactor lays them
// out: 2-D ones factored (v_row drops the larger dimension, the later of
// equal ones; v_col the other), others v; m for every other parameter.
std::map<std::string, torch::Tensor> Statistics(const TensorMap& params) {
  std::map<std::string, torch::Tensor> out;
  torch::manual_seed(5);
  int i = 0;
  for (const auto& [name, p] : params) {
    if (p.dim() == 2) {
      const int64_t d0 = p.size(0) > p.size(1) ? 0 : 1;
      out[name + "/v_row"] = torch::rand({p.size(1 - d0)});
      out[name + "/v_col"] = torch::rand({p.size(d0)});
    } else {
      out[name + "/v"] = torch::rand(p.sizes());
    }
    if (i++ % 2 == 0) out[name + "/m"] = torch::randn(p.sizes());
  }
  out["step"] = torch::tensor(int64_t{40}, torch::kLong);
  return out;
}

torch::Tensor AsTensor(const ZarrArray& a) {
  const auto type = a.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
  return torch::from_blob(const_cast<char*>(a.data.data()), a.shape, torch::TensorOptions().dtype(type)).clone();
}

TEST(ExportT5xTest, NamesAndLayoutsAsT5xHasThem) {
  for (bool v1_1 : {false, true}) {
    const TensorMap params = Params(Config(v1_1));
    absl::StatusOr<T5xCheckpoint> t5x = ExportT5x(params, {}, 12, torch::kFloat);
    ASSERT_THAT(t5x, IsOk());
    EXPECT_EQ(t5x->step, 12);
    EXPECT_TRUE(t5x->state.empty());
    EXPECT_EQ(t5x->target.size(), params.size());
    const auto& target = t5x->target;
    EXPECT_EQ(target.count("decoder/logits_dense/kernel"), v1_1 ? 1u : 0u);
    EXPECT_EQ(target.count("encoder/layers_1/mlp/wi_0/kernel"), v1_1 ? 1u : 0u);
    EXPECT_EQ(target.count("encoder/layers_1/mlp/wi/kernel"), v1_1 ? 0u : 1u);
    for (const char* name :
         {"token_embedder/embedding", "encoder/relpos_bias/rel_embedding", "decoder/relpos_bias/rel_embedding",
          "encoder/encoder_norm/scale", "decoder/layers_1/pre_cross_attention_layer_norm/scale",
          "decoder/layers_0/encoder_decoder_attention/out/kernel"}) {
      EXPECT_EQ(target.count(name), 1u) << name;
    }
    // Kernels [in, out]: ours transposed; the others as they are.
    const ZarrArray& wo = target.at("encoder/layers_0/mlp/wo/kernel");
    EXPECT_EQ(wo.shape, (std::vector<int64_t>{256, 64}));
    EXPECT_TRUE(torch::equal(AsTensor(wo), params.at("encoder_layers.0.mlp.wo.weight").t()));
    EXPECT_TRUE(torch::equal(AsTensor(target.at("token_embedder/embedding")), params.at("token_embedder.weight")));
  }
}

TEST(ExportT5xTest, RoundTripsThroughT5xsFormatAndTheImport) {
  for (bool v1_1 : {false, true}) {
    const TensorMap params = Params(Config(v1_1));
    const std::map<std::string, torch::Tensor> stats = Statistics(params);
    absl::StatusOr<T5xCheckpoint> t5x = ExportT5x(params, stats, 40, torch::kFloat);
    ASSERT_THAT(t5x, IsOk());
    // Every parameter has all four slots; the unused ones zeros of [1].
    EXPECT_EQ(t5x->state.size(), 4 * params.size());
    EXPECT_EQ(t5x->state.at("param_states/encoder/layers_0/attention/query/kernel/v").shape, std::vector<int64_t>{1});
    const std::string model_dir = ::testing::TempDir() + "/export_" + (v1_1 ? "v1_1" : "v1_0");
    std::filesystem::remove_all(model_dir);
    ASSERT_THAT(WriteT5xCheckpoint(*t5x, model_dir), IsOk());
    absl::StatusOr<T5xImport> back = ImportT5x(model_dir);
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(back->step, 40);
    EXPECT_EQ(back->config.feed_forward(), Config(v1_1).feed_forward());
    ASSERT_EQ(back->params.size(), params.size());
    for (const auto& [name, p] : params) EXPECT_TRUE(torch::equal(back->params.at(name), p)) << name;
    ASSERT_EQ(back->optimizer.size(), stats.size() - 1);  // all but the step
    for (const auto& [name, s] : stats) {
      if (name != "step") EXPECT_TRUE(torch::equal(back->optimizer.at(name), s)) << name;
    }
  }
}

TEST(ExportT5xTest, SquareKernelsStatisticsSwap) {
  const TensorMap params = Params(Config(true));
  const std::map<std::string, torch::Tensor> stats = Statistics(params);
  absl::StatusOr<T5xCheckpoint> t5x = ExportT5x(params, stats, 1, torch::kFloat);
  ASSERT_THAT(t5x, IsOk());
  // [64, 64]: T5X's v_row is the mean over its last dimension (out), which
  // is ours over our first: our v_col.
  const std::string query = "param_states/encoder/layers_0/attention/query/kernel/";
  EXPECT_TRUE(torch::equal(AsTensor(t5x->state.at(query + "v_row")),
                           stats.at("encoder_layers.0.attention.query.weight/v_col")));
  EXPECT_TRUE(torch::equal(AsTensor(t5x->state.at(query + "v_col")),
                           stats.at("encoder_layers.0.attention.query.weight/v_row")));
  // [64, 256] ours is [256, 64] T5X's: v_row keeps 64 in both.
  const std::string wo = "param_states/encoder/layers_0/mlp/wo/kernel/";
  EXPECT_TRUE(torch::equal(AsTensor(t5x->state.at(wo + "v_row")), stats.at("encoder_layers.0.mlp.wo.weight/v_row")));
}

TEST(ExportT5xTest, Bfloat16Parameters) {
  const TensorMap params = Params(Config(true));
  absl::StatusOr<T5xCheckpoint> t5x = ExportT5x(params, Statistics(params), 1, torch::kBFloat16);
  ASSERT_THAT(t5x, IsOk());
  const ZarrArray& embedding = t5x->target.at("token_embedder/embedding");
  EXPECT_EQ(embedding.dtype, "bfloat16");
  EXPECT_TRUE(torch::equal(AsTensor(embedding), params.at("token_embedder.weight").to(torch::kBFloat16)));
  EXPECT_EQ(t5x->state.at("param_states/token_embedder/embedding/v_row").dtype, "float32");
  EXPECT_THAT(ExportT5x(params, {}, 1, torch::kHalf).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("float32 or bfloat16")));
}

TEST(ExportT5xTest, Refusals) {
  const TensorMap params = Params(Config(true));
  TensorMap odd = params;
  odd["encoder_layers.0.attention.query.bias"] = torch::zeros({64});
  EXPECT_THAT(ExportT5x(odd, {}, 1, torch::kFloat).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("encoder_layers.0.attention.query.bias [64] is not a parameter of T5 1.0 or T5.1.1")));
  std::map<std::string, torch::Tensor> stats = Statistics(params);
  stats["encoder_layers.0.mlp.wo.weight/nu"] = torch::zeros({1});
  EXPECT_THAT(ExportT5x(params, stats, 1, torch::kFloat).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("encoder_layers.0.mlp.wo.weight/nu")));
  stats = Statistics(params);
  stats.erase("encoder_norm.scale/v");
  EXPECT_THAT(ExportT5x(params, stats, 1, torch::kFloat).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("encoder_norm.scale: Adafactor's statistics")));
  stats = Statistics(params);
  stats["encoder_layers.0.mlp.wo.weight/v_row"] = torch::zeros({256});
  EXPECT_THAT(ExportT5x(params, stats, 1, torch::kFloat).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("encoder_layers.0.mlp.wo.weight/v_row: [256]; T5X's v_row of "
                                 "encoder/layers_0/mlp/wo/kernel [256, 64] is [64]")));
}

TEST(WhyNotAdafactorStateTest, AdamWAndEmptyStatesAreNotAdafactors) {
  const std::map<std::string, torch::Tensor> state = {
      {"step", torch::tensor(int64_t{3})}, {"w/m", torch::zeros({2})}, {"w/v", torch::zeros({2})}};
  // A T5X import (no job), a job with the default optimizer, an Adafactor job.
  for (const char* meta : {R"({"step": 3, "job": null})", R"({"job": {"name": "x"}})",
                           R"({"job": {"optimizer": {"adafactor": {"decay_rate": 0.8}}}})"}) {
    EXPECT_THAT(WhyNotAdafactorState(meta, state), IsOkAndHolds(std::string())) << meta;
  }
  EXPECT_THAT(WhyNotAdafactorState(R"({"job": {"optimizer": {"adamw": {}}}})", state),
              IsOkAndHolds(HasSubstr("an AdamW checkpoint")));
  EXPECT_THAT(WhyNotAdafactorState("{}", {}), IsOkAndHolds(HasSubstr("no optimizer state")));
  EXPECT_THAT(WhyNotAdafactorState("{}", {{"step", torch::tensor(int64_t{3})}}),
              IsOkAndHolds(HasSubstr("no optimizer state")));
  EXPECT_THAT(WhyNotAdafactorState("{not json", state), StatusCodeIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace trainyard
