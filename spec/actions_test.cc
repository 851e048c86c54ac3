#include "spec/actions.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

MetricsByTask Loss(double v) { return {{"eval", {{"loss", v}}}}; }

TEST(EarlyStoppingTest, MinModeHaltsAfterPatienceStalls) {
  EarlyStoppingAction action("eval", "loss", EarlyStopping::MIN, /*patience=*/2);
  EXPECT_FALSE(action.Run(1, Loss(5.0)));
  EXPECT_FALSE(action.Run(2, Loss(4.0)));  // improved
  EXPECT_FALSE(action.Run(3, Loss(4.5)));  // stall 1
  EXPECT_FALSE(action.Run(4, Loss(3.9)));  // improved: counter resets
  EXPECT_FALSE(action.Run(5, Loss(3.9)));  // stall 1 (equal is no improvement)
  EXPECT_TRUE(action.Run(6, Loss(4.2)));   // stall 2
  EXPECT_THAT(action.reason(), ::testing::HasSubstr("eval/loss has not improved on 3.9 for 2"));
}

TEST(EarlyStoppingTest, MaxModeAndTolerances) {
  EarlyStoppingAction max("eval", "accuracy", EarlyStopping::MAX, 1);
  EXPECT_FALSE(max.Run(1, {{"eval", {{"accuracy", 0.5}}}}));
  EXPECT_FALSE(max.Run(2, {{"eval", {{"accuracy", 0.6}}}}));
  EXPECT_TRUE(max.Run(3, {{"eval", {{"accuracy", 0.55}}}}));
  // atol: an improvement of 0.05 is not more than atol 0.1.
  EarlyStoppingAction atol("eval", "loss", EarlyStopping::MIN, 1, /*atol=*/0.1);
  EXPECT_FALSE(atol.Run(1, Loss(1.0)));
  EXPECT_TRUE(atol.Run(2, Loss(0.95)));
  // rtol: 10% of the best (2.0) is 0.2; 0.3 is enough, 0.1 is not.
  EarlyStoppingAction rtol("eval", "loss", EarlyStopping::MIN, 1, 0.0, /*rtol=*/0.1);
  EXPECT_FALSE(rtol.Run(1, Loss(2.0)));
  EXPECT_FALSE(rtol.Run(2, Loss(1.7)));
  EXPECT_TRUE(rtol.Run(3, Loss(1.6)));
}

TEST(EarlyStoppingTest, MissingTaskOrMetricIsSkipped) {
  EarlyStoppingAction action("eval", "loss", EarlyStopping::MIN, 1);
  EXPECT_FALSE(action.Run(1, {{"train", {{"loss", 1.0}}}}));
  EXPECT_FALSE(action.Run(2, {{"eval", {{"accuracy", 1.0}}}}));
  EXPECT_FALSE(action.Run(3, Loss(1.0)));  // first real value: no history yet
}

TEST(TerminateOnNanTest, NanAndInfHaltFiniteDoesNot) {
  TerminateOnNanAction action("train");
  EXPECT_FALSE(action.Run(1, {{"train", {{"loss", 1.0}}}}));
  EXPECT_TRUE(action.Run(2, {{"train", {{"loss", std::nan("")}}}}));
  EXPECT_THAT(action.reason(), ::testing::HasSubstr("train/loss is nan at step 2"));
  EXPECT_TRUE(action.Run(3, {{"train", {{"loss", std::numeric_limits<double>::infinity()}}}}));
  EXPECT_TRUE(action.Run(4, {{"train", {{"loss", -std::numeric_limits<double>::infinity()}}}}));
  EXPECT_FALSE(action.Run(5, {{"eval", {{"loss", std::nan("")}}}}));  // other task
}

TEST(CreateActionsTest, GroupsByMode) {
  JobSpec spec;
  ActionConfig* a = spec.add_actions();
  a->set_on(ACTION_TRAIN);
  a->mutable_terminate_on_nan()->set_task("train");
  ActionConfig* b = spec.add_actions();
  b->set_on(ACTION_TRAIN_EVAL);
  b->mutable_early_stopping()->set_task("eval");
  b->mutable_early_stopping()->set_metric("loss");
  b->mutable_early_stopping()->set_mode(EarlyStopping::MIN);
  auto actions = CreateActions(spec);
  ASSERT_TRUE(actions.ok()) << actions.status();
  EXPECT_EQ(actions->at(ActionModeKind::kTrain).size(), 1u);
  EXPECT_EQ(actions->at(ActionModeKind::kTrainEval).size(), 1u);
  // A NaN fails the job; early stopping ends it successfully.
  EXPECT_TRUE(actions->at(ActionModeKind::kTrain)[0]->halts_as_failure());
  EXPECT_FALSE(actions->at(ActionModeKind::kTrainEval)[0]->halts_as_failure());
}

TEST(RunEveryActionTest, EveryActionRunsAfterOneHaltsAndEachReasonIsKept) {
  std::vector<std::unique_ptr<BaseAction>> actions;
  actions.push_back(std::make_unique<EarlyStoppingAction>("eval", "loss", EarlyStopping::MIN, 1));
  actions.push_back(std::make_unique<EarlyStoppingAction>("eval", "accuracy", EarlyStopping::MAX, 2));
  actions.push_back(std::make_unique<TerminateOnNanAction>("eval"));
  auto run = [&](int64_t step, double loss, double accuracy) {
    ActionsOutcome outcome;
    RunEveryAction(actions, step, {{"eval", {{"loss", loss}, {"accuracy", accuracy}}}}, &outcome);
    return outcome;
  };
  ActionsOutcome first = run(1, 2.0, 0.5);
  EXPECT_FALSE(first.halt);
  EXPECT_EQ(first.reason(), "");
  // The loss stalls: the first halts; the second still counts its stall.
  ActionsOutcome second = run(2, 3.0, 0.4);
  EXPECT_TRUE(second.halt);
  EXPECT_FALSE(second.failure);
  EXPECT_EQ(second.reasons,
            std::vector<std::string>{"early stopping at step 2: eval/loss has not improved on 2 for 1 evaluations"});
  // All three halt; the NaN fails the job.
  ActionsOutcome third = run(3, std::nan(""), 0.4);
  EXPECT_TRUE(third.halt);
  EXPECT_TRUE(third.failure);
  EXPECT_EQ(third.reason(),
            "early stopping at step 3: eval/loss has not improved on 2 for 2 evaluations; "
            "early stopping at step 3: eval/accuracy has not improved on 0.5 for 2 evaluations; "
            "eval/loss is nan at step 3");
}

}  // namespace
}  // namespace trainyard
