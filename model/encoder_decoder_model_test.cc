#include "model/encoder_decoder_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/parameter_storage.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<EncoderDecoderModel> TinyModel(uint64_t seed = 11) {
  ModelConfig config = *PresetConfig("tiny");
  config.set_dropout_rate(0.0f);
  ModelOptions options;
  options.init_seed = seed;
  return std::move(EncoderDecoderModel::Create(config, options)).value();
}

T5Batch Batch() {
  torch::manual_seed(5);
  T5Batch b;
  b.encoder_input_tokens = torch::randint(2, 500, {3, 6}, torch::kLong);
  b.decoder_target_tokens = torch::randint(2, 500, {3, 4}, torch::kLong);
  b.decoder_target_tokens.index_put_({2, 3}, 0);
  b.decoder_input_tokens = torch::zeros_like(b.decoder_target_tokens);
  b.decoder_input_tokens.narrow(1, 1, 3).copy_(b.decoder_target_tokens.narrow(1, 0, 3));
  b.decoder_loss_weights = b.decoder_target_tokens.gt(0).to(torch::kFloat);
  return b;
}

double LogSumExp(std::initializer_list<double> xs) {
  double s = 0;
  for (double x : xs) s += std::exp(x);
  return std::log(s);
}

// Three tokens over a vocabulary of 3, the third one padding.
TEST(LossTest, CrossEntropyAndZLossAgainstHandComputedValues) {
  const torch::Tensor logits = torch::tensor({{{1.0f, 2.0f, 3.0f}, {0.5f, -1.0f, 0.0f}, {9.0f, 9.0f, 9.0f}}});
  const torch::Tensor targets = torch::tensor({{2, 0, 1}});
  const torch::Tensor weights = torch::tensor({{1.0f, 1.0f, 0.0f}});
  LossOptions options;
  options.z_loss = 1e-4;
  LossOutput out = ComputeLoss(logits, targets, weights, options);
  const double z1 = LogSumExp({1, 2, 3}), z2 = LogSumExp({0.5, -1, 0});
  const double ce = (z1 - 3.0) + (z2 - 0.5);
  const double zl = 1e-4 * (z1 * z1 + z2 * z2);
  EXPECT_NEAR(out.loss.item<double>(), (ce + zl) / 2.0, 1e-6);  // 2 real target tokens
  EXPECT_NEAR(out.z_loss.item<double>(), zl / 2.0, 1e-7);
  EXPECT_NEAR(out.metrics.at("cross_ent_loss").Value(), ce / 2.0, 1e-6);
  EXPECT_NEAR(out.metrics.at("accuracy").Value(), 1.0, 1e-12);  // argmax 2 and 0
  EXPECT_NEAR(out.metrics.at("non_padding_fraction/loss_weights").Value(), 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(out.metrics.at("loss_per_all_target_tokens").Value(), (ce + zl) / 2.0 / 3.0, 1e-6);
  EXPECT_NEAR(out.metrics.at("loss_per_nonpadding_target_token").Value(), (ce + zl) / 4.0, 1e-6);
}

TEST(LossTest, LabelSmoothingSubtractsTheTargetEntropy) {
  const torch::Tensor logits = torch::tensor({{{1.0f, 2.0f, 3.0f}}});
  const torch::Tensor targets = torch::tensor({{2}});
  LossOptions options;
  options.z_loss = 0.0;
  options.label_smoothing = 0.1;
  LossOutput out = ComputeLoss(logits, targets, torch::Tensor(), options);
  const double z = LogSumExp({1, 2, 3});
  const double conf = 0.9, low = 0.05;
  const double entropy = -(conf * std::log(conf) + 2 * low * std::log(low + 1e-20));
  const double expected = -(conf * (3 - z) + low * ((1 - z) + (2 - z))) - entropy;
  EXPECT_NEAR(out.loss.item<double>(), expected, 1e-6);
}

TEST(LossTest, NormalizationModes) {
  const torch::Tensor logits = torch::zeros({1, 2, 4});  // log 4 per token
  const torch::Tensor targets = torch::tensor({{1, 2}});
  LossOptions options;
  options.z_loss = 0.0;
  options.normalization = LossConfig::NO_NORMALIZATION;
  EXPECT_NEAR(ComputeLoss(logits, targets, torch::Tensor(), options).loss.item<double>(), 2 * std::log(4.0), 1e-6);
  options.normalization = LossConfig::CONSTANT;
  options.normalizing_constant = 4.0;
  EXPECT_NEAR(ComputeLoss(logits, targets, torch::Tensor(), options).loss.item<double>(), std::log(4.0) / 2, 1e-6);
  options.loss_normalizing_factor = 8.0;  // the trainer's global token count wins
  EXPECT_NEAR(ComputeLoss(logits, targets, torch::Tensor(), options).loss.item<double>(), std::log(4.0) / 4, 1e-6);
}

TEST(MetricsTest, MergeWithinAndAcrossSteps) {
  Metrics a, b;
  a["loss"] = Metric::AveragePerStep(torch::tensor(1.0));
  a["accuracy"] = Metric::Average(torch::tensor(3.0), torch::tensor(4.0));
  b["loss"] = Metric::AveragePerStep(torch::tensor(2.0));
  b["accuracy"] = Metric::Average(torch::tensor(1.0), torch::tensor(4.0));
  Metrics step = a;
  MergeMetrics(b, /*within_step=*/true, &step);  // two microbatches of one step
  EXPECT_DOUBLE_EQ(step.at("loss").Value(), 3.0);
  EXPECT_DOUBLE_EQ(step.at("accuracy").Value(), 0.5);
  Metrics steps = a;
  MergeMetrics(b, /*within_step=*/false, &steps);  // two steps
  EXPECT_DOUBLE_EQ(steps.at("loss").Value(), 1.5);
}

TEST(ModelTest, ScoreIsTheSumOfLogSoftmaxAtTargets) {
  auto model = TinyModel();
  T5Batch b = Batch();
  absl::StatusOr<torch::Tensor> scores = model->ScoreBatch(b);
  ASSERT_TRUE(scores.ok()) << scores.status();
  torch::NoGradGuard no_grad;
  const torch::Tensor log_probs = torch::log_softmax(model->network()->forward(b, {}), -1);
  for (int64_t i = 0; i < 3; ++i) {
    double expected = 0;
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t target = b.decoder_target_tokens[i][t].item<int64_t>();
      if (target == 0) continue;
      expected += log_probs[i][t][target].item<double>();
    }
    EXPECT_NEAR((*scores)[i].item<double>(), expected, 1e-4);
  }
}

TEST(ModelTest, LossFnGradientsReachEveryParameter) {
  auto model = TinyModel();
  absl::StatusOr<LossOutput> out = model->LossFn(Batch(), LossOptions(), at::make_generator<at::CPUGeneratorImpl>(1));
  ASSERT_TRUE(out.ok()) << out.status();
  out->loss.backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
  }
  // With random weights over 512 tokens the loss is about log(512) or more.
  EXPECT_GT(out->loss.item<double>(), std::log(512.0) * 0.5);
}

DecodeOptions Greedy(int64_t len) {
  DecodeOptions options;
  options.max_decode_length = len;
  return options;
}

TEST(DecodingTest, GreedyEqualsBeamSizeOneAndScoresMatch) {
  auto model = TinyModel(21);
  T5Batch b = Batch();
  absl::StatusOr<Predictions> greedy = model->PredictBatchWithAux(b, Greedy(6));
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  DecodeOptions beam = Greedy(6);
  beam.method = DecodeOptions::Method::kBeam;
  beam.beam_size = 1;
  beam.alpha = 0.0;
  absl::StatusOr<Predictions> beam1 = model->PredictBatchWithAux(b, beam);
  ASSERT_TRUE(beam1.ok()) << beam1.status();
  EXPECT_TRUE(torch::equal(greedy->tokens, beam1->tokens)) << greedy->tokens << "\n" << beam1->tokens;
  EXPECT_TRUE(torch::allclose(greedy->scores, beam1->scores, 1e-4, 1e-4));

  // The greedy score is the model's log-likelihood of the decoded sequence.
  T5Batch scored = b;
  scored.decoder_target_tokens = greedy->tokens;
  scored.decoder_input_tokens = torch::zeros_like(greedy->tokens);
  scored.decoder_input_tokens.narrow(1, 1, 5).copy_(greedy->tokens.narrow(1, 0, 5));
  scored.decoder_loss_weights = greedy->tokens.gt(0).to(torch::kFloat);
  absl::StatusOr<torch::Tensor> likelihood = model->ScoreBatch(scored);
  ASSERT_TRUE(likelihood.ok());
  EXPECT_TRUE(torch::allclose(*likelihood, greedy->scores, 1e-4, 1e-4));
}

TEST(DecodingTest, WideBeamFindsSequencesAtLeastAsLikelyAsGreedy) {
  auto model = TinyModel(22);
  T5Batch b = Batch();
  DecodeOptions beam = Greedy(5);
  beam.method = DecodeOptions::Method::kBeam;
  beam.beam_size = 4;
  beam.alpha = 0.0;
  absl::StatusOr<Predictions> greedy = model->PredictBatchWithAux(b, Greedy(5));
  absl::StatusOr<Predictions> wide = model->PredictBatchWithAux(b, beam);
  ASSERT_TRUE(greedy.ok() && wide.ok());
  // Not a theorem for every model, but for this fixed one: searching 4 beams
  // without a length penalty finds outputs at least as likely as greedy's.
  EXPECT_TRUE(wide->scores.ge(greedy->scores - 1e-4).all().item<bool>()) << wide->scores << greedy->scores;
}

TEST(DecodingTest, SamplingIsSeededAndTopKOneIsGreedy) {
  auto model = TinyModel(23);
  T5Batch b = Batch();
  DecodeOptions sample = Greedy(6);
  sample.method = DecodeOptions::Method::kSample;
  sample.seed = 3;
  auto s1 = model->PredictBatchWithAux(b, sample);
  auto s2 = model->PredictBatchWithAux(b, sample);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_TRUE(torch::equal(s1->tokens, s2->tokens));
  sample.top_k = 1;
  auto top1 = model->PredictBatchWithAux(b, sample);
  auto greedy = model->PredictBatchWithAux(b, Greedy(6));
  ASSERT_TRUE(top1.ok() && greedy.ok());
  EXPECT_TRUE(torch::equal(top1->tokens, greedy->tokens));
  sample.top_k = 0;
  sample.top_p = 1e-6;  // only the most likely token survives
  auto nucleus = model->PredictBatchWithAux(b, sample);
  ASSERT_TRUE(nucleus.ok());
  EXPECT_TRUE(torch::equal(nucleus->tokens, greedy->tokens));
}

// A row samples with draws keyed by its example: the same
// tokens whatever else its batch holds and wherever the row sits in it (the
// texts of an INFERENCE job on any number of workers).
TEST(DecodingTest, ARowSamplesTheSameTokensInAnyBatch) {
  auto model = TinyModel(23);
  const T5Batch all = Batch();
  DecodeOptions sample = Greedy(6);
  sample.method = DecodeOptions::Method::kSample;
  sample.temperature = 2.0;  // flat: different keys sample different tokens
  sample.seed = 3;
  sample.row_keys = {10, 11, 12};
  auto whole = model->PredictBatchWithAux(all, sample);
  ASSERT_TRUE(whole.ok()) << whole.status();
  // Rows 2 and 0, in that order, in a batch of their own.
  sample.row_keys = {12, 10};
  auto part = model->PredictBatchWithAux(all.SelectRows(torch::tensor({2, 0}, torch::kLong)), sample);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_TRUE(torch::equal(part->tokens[0], whole->tokens[2]));
  EXPECT_TRUE(torch::equal(part->tokens[1], whole->tokens[0]));
  EXPECT_EQ(part->scores[0].item<float>(), whole->scores[2].item<float>());
  // Row 0 alone, with key 10: the same again; with another key (or the
  // default key, its row number 0), another sample.
  sample.row_keys = {10};
  auto alone = model->PredictBatchWithAux(all.Slice(0, 1), sample);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_TRUE(torch::equal(alone->tokens[0], whole->tokens[0]));
  sample.row_keys = {};
  auto unkeyed = model->PredictBatchWithAux(all.Slice(0, 1), sample);
  ASSERT_TRUE(unkeyed.ok()) << unkeyed.status();
  EXPECT_FALSE(torch::equal(unkeyed->tokens[0], whole->tokens[0]));
  EXPECT_NE(RowSeed(3, 0), RowSeed(3, 10));
  EXPECT_NE(RowSeed(3, 10), RowSeed(4, 10));
}

TEST(DecodingTest, RowKeysMustMatchTheRows) {
  auto model = TinyModel(23);
  DecodeOptions sample = Greedy(6);
  sample.method = DecodeOptions::Method::kSample;
  sample.row_keys = {1, 2};
  EXPECT_THAT(model->PredictBatchWithAux(Batch(), sample).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("row_keys: 2 keys for a batch of 3 rows; want one per row, or none")));
}

TEST(DecodingTest, StopsAtEosAndZeroFillsAfter) {
  auto model = TinyModel(24);
  torch::NoGradGuard no_grad;
  // Make EOS (id 1) the only sensible output: a huge bias on its logit row.
  model->network()->logits_dense->weight[1].fill_(50.0);
  auto out = model->PredictBatchWithAux(Batch(), Greedy(6));
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(torch::equal(out->tokens.select(1, 0), torch::ones({3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(out->tokens.narrow(1, 1, 5), torch::zeros({3, 5}, torch::kLong)));
}

TEST(ModelTest, BadBatchesAreInvalidArgument) {
  auto model = TinyModel();
  T5Batch b = Batch();
  b.decoder_loss_weights = torch::ones({3, 5});
  EXPECT_THAT(model->LossFn(b, LossOptions(), at::Generator()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("decoder_loss_weights")));
  T5Batch no_targets;
  no_targets.encoder_input_tokens = Batch().encoder_input_tokens;
  EXPECT_THAT(model->ScoreBatch(no_targets).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("decoder_target_tokens")));
  EXPECT_TRUE(model->PredictBatchWithAux(no_targets, Greedy(3)).ok());
  DecodeOptions bad = Greedy(0);
  EXPECT_THAT(model->PredictBatchWithAux(no_targets, bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_decode_length")));
}

TEST(ModelTest, IncompleteConfigIsInvalidArgument) {
  ModelConfig config;
  config.set_vocab_size(100);
  EXPECT_THAT(EncoderDecoderModel::Create(config, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("incomplete")));
}

// `tiny` without dropout, its embedding tied to the logits or not.
ModelConfig UnitTestConfig(bool tied) {
  ModelConfig config = *PresetConfig("tiny");
  config.set_dropout_rate(0.0f);
  config.set_tie_embeddings(tied);
  return config;
}

std::unique_ptr<EncoderDecoderModel> UnitTestModel(const ModelConfig& config, uint64_t seed) {
  ModelOptions options;
  options.init_seed = seed;
  return std::move(EncoderDecoderModel::Create(config, options)).value();
}

// Every parameter is in one unit, and a teacher-forced pass announces each
// unit before it reads it: with every parameter poisoned (NaN) until its
// unit's hook restores it, the loss and the gradients are the model's own,
// bit for bit, and the hook sees the units in order. Both the untied (v1.1,
// logits_dense last) and the tied (v1.0) layouts.
TEST(ParameterUnitsTest, EachUnitIsAnnouncedBeforeItsFirstUse) {
  for (bool tied : {false, true}) {
    const ModelConfig config = UnitTestConfig(tied);
    std::unique_ptr<EncoderDecoderModel> model = UnitTestModel(config, /*seed=*/3);
    const std::vector<std::vector<size_t>> units = model->ParameterUnits();
    ASSERT_EQ(units.size(), 2 + config.num_encoder_layers() + 2 + config.num_decoder_layers() + 1 + (tied ? 0 : 1));
    std::vector<torch::Tensor> params;
    for (const auto& p : model->named_parameters()) params.push_back(p.value());
    std::vector<int> seen(params.size(), 0);
    for (const auto& unit : units) {
      for (size_t i : unit) seen.at(i)++;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<int64_t>(params.size()));
    const std::string last = model->named_parameters().keys()[units.back()[0]];
    EXPECT_EQ(last, tied ? "decoder_norm.scale" : "logits_dense.weight");

    LossOptions loss;
    absl::StatusOr<LossOutput> reference = model->LossFn(Batch(), loss, at::Generator());
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference->loss.backward();
    std::vector<torch::Tensor> values, grads;
    for (torch::Tensor& p : params) {
      values.push_back(p.detach().clone());
      grads.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }
    {
      torch::NoGradGuard no_grad;
      for (torch::Tensor& p : params) p.fill_(std::nanf(""));
    }
    std::vector<int> announced;
    Model::UnitHooks hooks;
    hooks.before = [&](int u) {
      announced.push_back(u);
      torch::NoGradGuard no_grad;
      for (size_t i : units.at(static_cast<size_t>(u))) params[i].copy_(values[i]);
    };
    model->SetUnitHooks(std::move(hooks));
    absl::StatusOr<LossOutput> hooked = model->LossFn(Batch(), loss, at::Generator());
    ASSERT_TRUE(hooked.ok()) << hooked.status();
    hooked->loss.backward();
    EXPECT_TRUE(torch::equal(hooked->loss, reference->loss)) << "tied " << tied;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i].grad(), grads[i])) << "tied " << tied << " " << i;
    }
    std::vector<int> in_order(units.size());
    std::iota(in_order.begin(), in_order.end(), 0);
    EXPECT_EQ(announced, in_order) << "tied " << tied;

    // An exception from the hook ends the pass with an error naming it.
    Model::UnitHooks failing;
    failing.before = [](int u) {
      if (u == 3) throw std::runtime_error("UNAVAILABLE: unit 3 could not be gathered");
    };
    model->SetUnitHooks(std::move(failing));
    absl::StatusOr<LossOutput> failed = model->LossFn(Batch(), loss, at::Generator());
    EXPECT_THAT(failed.status().message(), HasSubstr("unit 3 could not be gathered"));
    model->SetUnitHooks({});
    EXPECT_TRUE(model->LossFn(Batch(), loss, at::Generator()).ok());
  }
}

// The hooks of fully sharded training: every unit but the token embedding
// starts with its memory released; `before` restores it and copies the
// values in, `after` releases it again, and `before_backward` restores it
// once more for backward. The loss and every gradient are the model's own,
// bit for bit, so autograd's saved references read the restored memory
// (under ASan a read of released memory fails the test). The hooks run in
// forward order, after each unit, and in reverse order in backward.
TEST(ParameterUnitsTest, UnitsReleasedAfterForwardAreRestoredBeforeBackward) {
  for (bool tied : {false, true}) {
    std::unique_ptr<EncoderDecoderModel> model = UnitTestModel(UnitTestConfig(tied), /*seed=*/4);
    const std::vector<std::vector<size_t>> units = model->ParameterUnits();
    const int n = static_cast<int>(units.size());
    std::vector<torch::Tensor> params;
    for (const auto& p : model->named_parameters()) params.push_back(p.value());

    LossOptions loss;
    absl::StatusOr<LossOutput> reference = model->LossFn(Batch(), loss, at::Generator());
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference->loss.backward();
    std::vector<torch::Tensor> values, grads;
    std::vector<size_t> nbytes(params.size(), 0);
    for (torch::Tensor& p : params) {
      values.push_back(p.detach().clone());
      grads.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }
    auto release = [&](int u) {
      for (size_t i : units.at(static_cast<size_t>(u))) nbytes[i] = ReleaseStorage(params[i]);
    };
    auto restore = [&](int u) {
      for (size_t i : units.at(static_cast<size_t>(u))) {
        ASSERT_TRUE(StorageReleased(params[i])) << "unit " << u;
        ASSERT_THAT(RestoreStorage(params[i], nbytes[i]), IsOk()) << "unit " << u;
        params[i].data().copy_(values[i]);  // its own version counter: autograd sees no in-place change
      }
    };
    for (int u = 1; u < n; ++u) release(u);
    const size_t first = units[1][0];
    EXPECT_THAT(RestoreStorage(params[first], nbytes[first] - 1),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reads")));
    EXPECT_THAT(RestoreStorage(params[0], nbytes[0]),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("only a released one")));

    std::vector<int> before, after, before_backward;
    Model::UnitHooks hooks;
    hooks.before = [&](int u) {
      before.push_back(u);
      if (u != 0) restore(u);
    };
    hooks.after = [&](int u) {
      after.push_back(u);
      if (u != 0) release(u);
    };
    hooks.before_backward = [&](int u) {
      before_backward.push_back(u);
      restore(u);
    };
    model->SetUnitHooks(std::move(hooks));
    absl::StatusOr<LossOutput> hooked = model->LossFn(Batch(), loss, at::Generator());
    ASSERT_TRUE(hooked.ok()) << hooked.status();
    for (int u = 1; u < n; ++u) {
      for (size_t i : units[u]) EXPECT_TRUE(StorageReleased(params[i])) << "unit " << u << " after forward";
    }
    hooked->loss.backward();
    EXPECT_TRUE(torch::equal(hooked->loss, reference->loss)) << "tied " << tied;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i].grad(), grads[i])) << "tied " << tied << " " << i;
    }
    std::vector<int> forward_order(n), after_order, backward_order;
    std::iota(forward_order.begin(), forward_order.end(), 0);
    for (int u = 1; u < n; ++u) after_order.push_back(u);
    after_order.push_back(0);
    for (int u = n - 1; u >= 1; --u) backward_order.push_back(u);
    EXPECT_EQ(before, forward_order) << "tied " << tied;
    EXPECT_EQ(after, after_order) << "tied " << tied;
    EXPECT_EQ(before_backward, backward_order) << "tied " << tied;
    model->SetUnitHooks({});
  }
}

// A model built holding some parameters only: the held ones equal the whole
// model's bit for bit (the others' values were still drawn, in order), the
// others hold no memory and come back to the right size.
TEST(ModelTest, HoldingSomeParametersDrawsTheWholeModelsValues) {
  ModelConfig config = *PresetConfig("tiny");
  ModelOptions whole_options;
  whole_options.init_seed = 23;
  std::unique_ptr<EncoderDecoderModel> whole = std::move(EncoderDecoderModel::Create(config, whole_options)).value();
  std::vector<std::string> names;
  for (const auto& p : whole->named_parameters()) names.push_back(p.key());
  // Every other parameter, so held scales, embeddings and kernels all sit
  // after released ones.
  std::set<std::string> held;
  for (size_t i = 0; i < names.size(); i += 2) held.insert(names[i]);
  ModelOptions options = whole_options;
  options.hold_parameter = [&held](const std::string& name) { return held.count(name) > 0; };
  std::unique_ptr<EncoderDecoderModel> part = std::move(EncoderDecoderModel::Create(config, options)).value();
  auto whole_params = whole->named_parameters();
  size_t released = 0;
  for (const auto& p : part->named_parameters()) {
    const torch::Tensor& reference = whole_params[p.key()];
    EXPECT_EQ(p.value().sizes(), reference.sizes()) << p.key();
    if (held.count(p.key()) > 0) {
      EXPECT_FALSE(StorageReleased(p.value())) << p.key();
      EXPECT_TRUE(torch::equal(p.value(), reference)) << p.key();
    } else {
      ASSERT_TRUE(StorageReleased(p.value())) << p.key();
      ASSERT_THAT(RestoreStorage(p.value(), static_cast<size_t>(reference.numel()) * 4), IsOk()) << p.key();
      ++released;
    }
  }
  EXPECT_EQ(released, names.size() / 2);
}

}  // namespace
}  // namespace trainyard
