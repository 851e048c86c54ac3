// DecodeAndGather with its ranks as threads (FakeCollective) over a model
// whose outputs are closed forms of its inputs.
#include "job/distributed_decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "collective/fake_collective.h"
#include "collective/ranks_on_threads.h"
#include "common/testing/status_matchers.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;

// Predicts each input token + 100 (as many columns as it likes); scores a
// row as the sum of its targets (predicted scores: minus the sum of its
// inputs).
class ClosedFormModel : public Model {
 public:
  absl::StatusOr<LossOutput> LossFn(const T5Batch&, const LossOptions&, at::Generator) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<Metrics> EvalFn(const T5Batch&, const LossOptions&) override { return absl::UnimplementedError(""); }
  absl::StatusOr<Predictions> PredictBatchWithAux(const T5Batch& batch, const DecodeOptions&) override {
    ++decoded_rows;
    return Predictions{batch.encoder_input_tokens + 100, -batch.encoder_input_tokens.sum(1).to(torch::kDouble)};
  }
  absl::StatusOr<torch::Tensor> ScoreBatch(const T5Batch& batch) override {
    return batch.decoder_target_tokens.sum(1).to(torch::kDouble);
  }
  std::vector<torch::Tensor> parameters() override { return {}; }
  torch::OrderedDict<std::string, torch::Tensor> named_parameters() override {
    return torch::OrderedDict<std::string, torch::Tensor>();
  }
  int decoded_rows = 0;
};

T5Batch Rows(std::vector<std::vector<int64_t>> inputs, std::vector<std::vector<int64_t>> targets) {
  T5Batch b;
  std::vector<torch::Tensor> in, tg;
  for (auto& r : inputs) in.push_back(torch::tensor(r, torch::kLong));
  for (auto& r : targets) tg.push_back(torch::tensor(r, torch::kLong));
  b.encoder_input_tokens = torch::stack(in);
  b.decoder_target_tokens = torch::stack(tg);
  return b;
}

TEST(DistributedDecodeTest, EveryRankGetsEveryRanksOwnRowsInRankOrder) {
  DistributedDecodeOptions options;
  options.predict = true;
  options.score = true;
  options.decode.max_decode_length = 4;  // predictions of 3 columns padded to 4
  options.inputs_length = 2;             // inputs of 3 columns cut to 2
  options.targets_length = 2;
  options.rows_per_rank = 2;
  // Rank 0: two rows; rank 1: one (a short batch); rank 2: none this round.
  const std::vector<std::optional<T5Batch>> batches = {Rows({{1, 2, 3}, {4, 5, 6}}, {{1, 1}, {2, 2}}),
                                                       Rows({{7, 8, 9}}, {{3, 3}}), std::nullopt};
  std::vector<absl::StatusOr<DecodedRows>> results(3, absl::UnknownError("not run"));
  std::vector<ClosedFormModel> models(3);
  OnFakeRanks(3, [&](int r, Collective* collective) {
    results[r] = DecodeAndGather(&models[r], batches[r] ? &*batches[r] : nullptr, options, collective);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status();
    const DecodedRows& rows = *results[r];
    EXPECT_THAT(rows.rank, ElementsAre(0, 0, 1));
    EXPECT_THAT(rows.row, ElementsAre(0, 1, 0));
    EXPECT_TRUE(torch::equal(rows.inputs, torch::tensor({{1, 2}, {4, 5}, {7, 8}}, torch::kLong)));
    EXPECT_TRUE(torch::equal(rows.targets, torch::tensor({{1, 1}, {2, 2}, {3, 3}}, torch::kLong)));
    EXPECT_TRUE(torch::equal(
        rows.predictions, torch::tensor({{101, 102, 103, 0}, {104, 105, 106, 0}, {107, 108, 109, 0}}, torch::kLong)));
    EXPECT_TRUE(torch::equal(rows.prediction_scores, torch::tensor({-6.0, -15.0, -24.0}, torch::kDouble)));
    EXPECT_TRUE(torch::equal(rows.target_scores, torch::tensor({2.0, 4.0, 6.0}, torch::kDouble)));
  }
  // A rank without rows does not run the model.
  EXPECT_EQ(models[0].decoded_rows, 1);
  EXPECT_EQ(models[2].decoded_rows, 0);
}

TEST(DistributedDecodeTest, ABatchLargerThanARanksShareIsRefused) {
  auto group = std::make_shared<FakeGroup>(1, absl::Seconds(10));
  FakeCollective collective(group, 0);
  ClosedFormModel model;
  DistributedDecodeOptions options;
  options.score = true;
  options.rows_per_rank = 1;
  const T5Batch batch = Rows({{1}, {2}}, {{1}, {2}});
  EXPECT_THAT(DecodeAndGather(&model, &batch, options, &collective).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("a batch of 2 rows")));
}

}  // namespace
}  // namespace trainyard
