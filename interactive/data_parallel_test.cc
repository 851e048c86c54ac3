// The interactive model's data-parallel partitioner: two ranks (threads
// joined by Gloo over loopback) against this process alone.
#include <atomic>
#include <filesystem>
#include <functional>

#include "collective/ranks_on_threads.h"
#include "common/testing/status_matchers.h"
#include "data/bundled.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "interactive/interactive_model.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::string(std::getenv("TEST_TMPDIR")) + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    ASSERT_THAT(RegisterBundledTasks(&registry_), IsOk());
  }

  InteractiveModelOptions Options(const std::string& output_dir, int batch_size = 4) {
    InteractiveModelOptions o;
    o.batch_size = batch_size;
    o.task_feature_lengths.set_inputs(16);
    o.task_feature_lengths.set_targets(32);
    o.output_dir = output_dir;
    o.model.set_preset("tiny");
    o.model.set_dropout_rate(0.0f);
    return o;
  }

  std::vector<NaturalExample> Validation(int n) {
    return std::move(GetBatchesFromTask(registry_, "digits_to_words", "validation", n, 1)).value()[0];
  }

  std::string dir_;
  TaskRegistry registry_;
};

TEST_F(DataParallelTest, TwoRanksTrainAsOneProcessDoes) {
  const std::vector<NaturalExample> batch = Validation(8);
  auto alone = InteractiveModel::Create(Options(dir_ + "/alone", 8));
  ASSERT_THAT(alone.status(), IsOk());
  std::vector<double> losses;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<MetricResults> m = (*alone)->TrainStep(batch);
    ASSERT_THAT(m.status(), IsOk());
    losses.push_back(m->at("loss"));
  }
  std::vector<std::vector<double>> rank_losses(2);
  std::vector<MetricResults> rank_last(2);
  std::vector<std::vector<torch::Tensor>> rank_params(2);
  OnGlooRanks(2, [&](int rank, Collective* collective) {
    InteractiveModelOptions o = Options(dir_ + "/parallel", 8);
    o.collective = collective;
    auto m = InteractiveModel::Create(o);
    ASSERT_THAT(m.status(), IsOk());
    EXPECT_EQ((*m)->job_spec().num_workers(), 2);
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<MetricResults> step = (*m)->TrainStep(batch);
      ASSERT_THAT(step.status(), IsOk());
      rank_losses[rank].push_back(step->at("loss"));
      rank_last[rank] = *step;
    }
    for (const auto& p : (*m)->model().named_parameters()) rank_params[rank].push_back(p.value().detach().clone());
  });
  ASSERT_EQ(rank_losses[0].size(), 3u);
  ASSERT_EQ(rank_losses[1].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    // The same global loss, the batch split 4 + 4 (sums in another order).
    EXPECT_NEAR(rank_losses[0][i], losses[i], 1e-5 * losses[i]) << i;
    EXPECT_EQ(rank_losses[1][i], rank_losses[0][i]) << i;
  }
  EXPECT_EQ(rank_last[0].at("data/examples"), 8.0);
  EXPECT_EQ(rank_last[1].at("data/examples"), 8.0);
  EXPECT_EQ(rank_last[0].count("timing/seconds"), 1u);  // rank 0 writes the summary
  EXPECT_EQ(rank_last[1].count("timing/seconds"), 0u);
  size_t i = 0;
  for (const auto& p : (*alone)->model().named_parameters()) {
    ASSERT_LT(i, rank_params[0].size());
    EXPECT_TRUE(torch::equal(rank_params[0][i], rank_params[1][i])) << p.key();  // identical replicas
    EXPECT_TRUE(torch::allclose(rank_params[0][i], p.value(), /*rtol=*/1e-4, /*atol=*/1e-5)) << p.key();
    ++i;
  }
  // Summaries are rank 0's only.
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/parallel/train"));
}

TEST_F(DataParallelTest, PredictionsAndScoresAreGatheredInOrder) {
  // A checkpoint trained a little, then predicted from by one process and
  // by two ranks. 10 examples in batches of 4: the last batch of 2 leaves
  // rank 1 nothing but stand-in rows.
  std::string checkpoint;
  {
    auto trainer = InteractiveModel::Create(Options(dir_ + "/train", 8));
    ASSERT_THAT(trainer.status(), IsOk());
    const std::vector<NaturalExample> batch = Validation(8);
    for (int i = 0; i < 30; ++i) ASSERT_THAT((*trainer)->TrainStep(batch).status(), IsOk());
    absl::StatusOr<std::string> saved = (*trainer)->SaveCheckpoint();
    ASSERT_THAT(saved.status(), IsOk());
    checkpoint = *saved;
  }
  auto options = [&](const std::string& out) {
    InteractiveModelOptions o = Options(out, 4);
    o.model.Clear();
    o.restore.set_mode(RestoreConfig::SPECIFIC);
    o.restore.set_path(checkpoint);
    return o;
  };
  const std::vector<NaturalExample> examples = Validation(10);
  auto alone = InteractiveModel::Create(options(dir_ + "/alone"));
  ASSERT_THAT(alone.status(), IsOk());
  absl::StatusOr<Inference> expected = (*alone)->PredictWithAux(examples);
  ASSERT_THAT(expected.status(), IsOk());
  absl::StatusOr<std::vector<double>> expected_scores = (*alone)->Score(examples);
  ASSERT_THAT(expected_scores.status(), IsOk());
  absl::StatusOr<MetricResults> expected_metrics =
      (*alone)->Evaluate(examples, {*BuiltinMetricFn("sequence_accuracy"), *BuiltinMetricFn("mean_log_likelihood")});
  ASSERT_THAT(expected_metrics.status(), IsOk());

  std::vector<Inference> predicted(2);
  std::vector<std::vector<double>> scored(2);
  std::vector<MetricResults> evaluated(2);
  std::vector<std::string> saved(2);
  OnGlooRanks(2, [&](int rank, Collective* collective) {
    InteractiveModelOptions o = options(dir_ + "/parallel");
    o.collective = collective;
    auto m = InteractiveModel::Create(o);
    ASSERT_THAT(m.status(), IsOk());
    EXPECT_EQ((*m)->step(), 30);
    absl::StatusOr<Inference> p = (*m)->PredictWithAux(examples);
    ASSERT_THAT(p.status(), IsOk());
    predicted[rank] = *p;
    absl::StatusOr<std::vector<double>> s = (*m)->Score(examples);
    ASSERT_THAT(s.status(), IsOk());
    scored[rank] = *s;
    absl::StatusOr<MetricResults> e =
        (*m)->Evaluate(examples, {*BuiltinMetricFn("sequence_accuracy"), *BuiltinMetricFn("mean_log_likelihood")});
    ASSERT_THAT(e.status(), IsOk());
    evaluated[rank] = *e;
    absl::StatusOr<std::string> path = (*m)->SaveCheckpoint();
    ASSERT_THAT(path.status(), IsOk());
    saved[rank] = *path;
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(predicted[rank].predictions.size(), 10u) << rank;
    EXPECT_EQ(predicted[rank].predictions, expected->predictions) << rank;  // token for token
    ASSERT_EQ(scored[rank].size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_NEAR(scored[rank][i], (*expected_scores)[i], 1e-4) << rank << " " << i;
      EXPECT_NEAR(predicted[rank].aux["scores"][i], expected->aux["scores"][i], 1e-4) << rank << " " << i;
    }
    EXPECT_EQ(evaluated[rank].at("sequence_accuracy"), expected_metrics->at("sequence_accuracy"));
    EXPECT_NEAR(evaluated[rank].at("mean_log_likelihood"), expected_metrics->at("mean_log_likelihood"), 1e-4);
  }
  // Rank 0 wrote the checkpoint; both ranks name it.
  EXPECT_EQ(saved[0], dir_ + "/parallel/checkpoint_30");
  EXPECT_EQ(saved[1], saved[0]);
  EXPECT_TRUE(std::filesystem::exists(saved[0] + "/MANIFEST.json"));
}

TEST_F(DataParallelTest, CreateFailsOnEveryRankWhenOneRankFails) {
  std::vector<absl::Status> status(2);
  OnGlooRanks(2, [&](int rank, Collective* collective) {
    InteractiveModelOptions o = Options(dir_);
    o.collective = collective;
    if (rank == 1) {
      o.restore.set_mode(RestoreConfig::SPECIFIC);
      o.restore.set_path(dir_ + "/no_such_checkpoint");
    }
    status[rank] = InteractiveModel::Create(o).status();
  });
  EXPECT_THAT(status[0], StatusIs(absl::StatusCode::kAborted, HasSubstr("failed on rank(s) 1")));
  EXPECT_THAT(status[1], StatusIs(absl::StatusCode::kNotFound, HasSubstr("no_such_checkpoint")));

  OnGlooRanks(2, [&](int rank, Collective* collective) {
    InteractiveModelOptions o = Options(dir_, /*batch_size=*/3);
    o.collective = collective;
    status[rank] = InteractiveModel::Create(o).status();
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(status[rank], StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("batch_size: 3 is not a multiple of num_workers 2")));
  }
}

TEST_F(DataParallelTest, APreemptionOnOneRankStopsBothAtTheSameStep) {
  std::atomic<bool> stop_rank1{false};
  std::vector<absl::Status> status(2);
  std::vector<int64_t> steps(2);
  const std::vector<NaturalExample> batch = Validation(8);
  OnGlooRanks(2, [&](int rank, Collective* collective) {
    InteractiveModelOptions o = Options(dir_, 8);
    o.collective = collective;
    static const std::atomic<bool> never{false};
    o.preemption_requested = rank == 1 ? &stop_rank1 : &never;
    auto m = InteractiveModel::Create(o);
    ASSERT_THAT(m.status(), IsOk());
    for (int i = 0; i < 2; ++i) ASSERT_THAT((*m)->TrainStep(batch).status(), IsOk());
    if (rank == 1) stop_rank1 = true;
    status[rank] = (*m)->TrainStep(batch).status();
    steps[rank] = (*m)->step();
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(status[rank],
                StatusIs(absl::StatusCode::kAborted,
                         HasSubstr("preempted at step 2; emergency checkpoint " + dir_ + "/checkpoint_2")));
    EXPECT_EQ(steps[rank], 2);
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/checkpoint_2/MANIFEST.json"));
}

}  // namespace
}  // namespace trainyard
