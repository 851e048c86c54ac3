// Evaluation metrics are those of the global batch whatever the number of
// ranks: W = 1, 2 and 3 ranks (threads, Gloo over loopback), each
// evaluating its share of the same global eval batches with the same
// parameters, report the same values, and those are T5X's aggregation of
// the batches' metrics over the whole evaluation.
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "collective/ranks_on_threads.h"
#include "gtest/gtest.h"
#include "trainer/testing/tiny_trainer.h"

namespace trainyard {
namespace {

// The global batch: 6 rows, so that 1, 2 and 3 ranks each take equal shares.
constexpr int64_t kRows = 6;
constexpr int64_t kInputsLength = 7;
constexpr int64_t kTargetsLength = 5;
constexpr int kBatches = 3;

// Fixed batches: rows [begin, begin + rows) of every global batch.
class SliceIterator : public BatchIterator {
 public:
  SliceIterator(std::vector<T5Batch> global, int64_t begin, int64_t rows)
      : global_(std::move(global)), begin_(begin), rows_(rows) {}
  absl::StatusOr<T5Batch> Next() override {
    if (next_ >= global_.size()) return absl::OutOfRangeError("end");
    return global_[next_++].Slice(begin_, rows_);
  }

 private:
  std::vector<T5Batch> global_;
  int64_t begin_, rows_;
  size_t next_ = 0;
};

// Real target tokens of row `row` of global batch `b`: 2 to 5, so that the
// ranks' shares hold different numbers; the last batch is short (rows 3 to 5
// are padding, as the data iterator pads a short last batch), so the last
// of 3 ranks holds no real token of it.
int64_t RealTokens(int b, int64_t row) {
  if (b == kBatches - 1 && row >= 3) return 0;
  return kTargetsLength - (row + b) % 4;
}

std::vector<T5Batch> GlobalEvalBatches() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  std::vector<T5Batch> out;
  for (int b = 0; b < kBatches; ++b) {
    T5Batch batch;
    batch.encoder_input_tokens = torch::randint(2, 500, {kRows, kInputsLength}, gen, torch::kLong);
    batch.decoder_target_tokens = torch::randint(2, 500, {kRows, kTargetsLength}, gen, torch::kLong);
    for (int64_t row = 0; row < kRows; ++row) {
      const int64_t real = RealTokens(b, row);
      batch.decoder_target_tokens[row].narrow(0, real, kTargetsLength - real).fill_(0);
      if (real == 0) batch.encoder_input_tokens[row].fill_(0);
    }
    batch.decoder_input_tokens = batch.decoder_target_tokens.roll(1, 1);
    batch.decoder_input_tokens.select(1, 0).fill_(0);
    batch.decoder_loss_weights = batch.decoder_target_tokens.gt(0).to(torch::kFloat);
    out.push_back(batch);
  }
  return out;
}

std::unique_ptr<TinyTrainer> MakeRank(Collective* collective) {
  TinyTrainerOptions options;
  options.init_seed = 3;  // the same parameters on every rank and every W
  options.collective = collective;
  return MakeTinyTrainer(options);
}

using Values = std::map<std::string, double>;

// One evaluation of `global` on rank `rank` of `world`: its share of every
// global batch.
Values EvalShare(Collective* collective, int rank, int world, const std::vector<T5Batch>& global) {
  std::unique_ptr<TinyTrainer> tiny = MakeRank(collective);
  const int64_t rows = kRows / world;
  SliceIterator share(global, rank * rows, rows);
  absl::StatusOr<MetricsByTask> metrics = tiny->trainer->Eval({{"eval", &share}});
  EXPECT_TRUE(metrics.ok()) << "rank " << rank << " of " << world << ": " << metrics.status();
  return metrics.ok() ? (*metrics)["eval"] : Values();
}

// The metrics of `global` evaluated on `world` ranks (one process for 1);
// every rank reports the same values.
Values EvalOnRanks(int world, const std::vector<T5Batch>& global) {
  if (world == 1) {
    LocalCollective local;
    return EvalShare(&local, 0, 1, global);
  }
  std::vector<Values> each(world);
  OnGlooRanks(world, [&](int rank, Collective* gloo) { each[rank] = EvalShare(gloo, rank, world, global); });
  for (int r = 1; r < world; ++r) EXPECT_EQ(each[r], each[0]) << "rank " << r << " of " << world;
  return each[0];
}

void ExpectNearRelative(double actual, double expected, double tolerance, const std::string& what) {
  EXPECT_NEAR(actual, expected, tolerance * std::max(std::abs(expected), 1e-12)) << what;
}

TEST(EvalWorldSizeTest, OneProcessAggregatesTheBatchesAsT5x) {
  const std::vector<T5Batch> global = GlobalEvalBatches();
  const Values all = EvalOnRanks(1, global);
  // Each global batch alone, and its real target tokens.
  std::vector<Values> batch(kBatches);
  std::vector<double> real(kBatches, 0.0);
  double real_total = 0;
  for (int b = 0; b < kBatches; ++b) {
    batch[b] = EvalOnRanks(1, {global[b]});
    for (int64_t row = 0; row < kRows; ++row) real[b] += static_cast<double>(RealTokens(b, row));
    real_total += real[b];
  }
  ASSERT_EQ(real_total, 23 + 21 + 10);
  const double all_tokens = static_cast<double>(kBatches * kRows * kTargetsLength);
  // loss, z_loss, cross_ent_loss: the mean over batches of each batch's loss
  // (its tokens' loss summed, over its real target tokens); the others, sums
  // over every batch of numerators over denominators.
  for (const char* k : {"loss", "z_loss", "cross_ent_loss"}) {
    double sum = 0;
    for (int b = 0; b < kBatches; ++b) sum += batch[b].at(k);
    ExpectNearRelative(all.at(k), sum / kBatches, 1e-12, k);
    const std::string per_all = std::string(k) + "_per_all_target_tokens";
    if (all.count(per_all)) ExpectNearRelative(all.at(per_all), sum / all_tokens, 1e-12, per_all);
  }
  double loss_sum = 0, correct = 0;
  for (int b = 0; b < kBatches; ++b) {
    loss_sum += batch[b].at("loss");
    correct += batch[b].at("accuracy") * real[b];
    ExpectNearRelative(batch[b].at("loss_per_nonpadding_target_token"), batch[b].at("loss") / real[b], 1e-12, "batch");
  }
  ExpectNearRelative(all.at("loss_per_nonpadding_target_token"), loss_sum / real_total, 1e-12, "per nonpadding");
  ExpectNearRelative(all.at("accuracy"), correct / real_total, 1e-12, "accuracy");
  EXPECT_DOUBLE_EQ(all.at("non_padding_fraction/loss_weights"), real_total / all_tokens);
  // An untrained tiny model over 512 tokens: about log(512) per token.
  EXPECT_GT(all.at("loss"), 4.0);
  EXPECT_LT(all.at("loss"), 9.0);
}

TEST(EvalWorldSizeTest, EveryMetricIsTheSameOnOneTwoAndThreeRanks) {
  const std::vector<T5Batch> global = GlobalEvalBatches();
  std::map<int, Values> by_world;
  for (int world : {1, 2, 3}) by_world[world] = EvalOnRanks(world, global);
  const Values& one = by_world[1];
  ASSERT_EQ(one.size(), 9u);
  for (const auto& [name, value] : one) {
    std::printf("%-40s W=1 %.9g  W=2 %.9g  W=3 %.9g\n", name.c_str(), value, by_world[2][name], by_world[3][name]);
  }
  for (int world : {2, 3}) {
    const Values& w = by_world[world];
    ASSERT_EQ(w.size(), one.size()) << "W=" << world;
    for (const auto& [name, value] : one) {
      ASSERT_EQ(w.count(name), 1u) << name << " at W=" << world;
      // Float32 sums of the same per-token values in another order.
      ExpectNearRelative(w.at(name), value, 1e-6, name + " at W=" + std::to_string(world));
    }
  }
}

}  // namespace
}  // namespace trainyard
