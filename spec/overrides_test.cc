#include "spec/overrides.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/job.pb.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(OverridesTest, ScalarsOfEveryKind) {
  JobSpec spec;
  ASSERT_THAT(ApplyOverrides({"batch_size=64", "total_steps=100000", "seed=7", "learning_rate.base_learning_rate=0.5",
                              "learning_rate.factors=\"constant * rsqrt_decay\"", "data.pack=false", "dtype=bfloat16",
                              "name=my-job"},
                             &spec),
              IsOk());
  EXPECT_EQ(spec.batch_size(), 64);
  EXPECT_EQ(spec.total_steps(), 100000);
  EXPECT_TRUE(spec.has_seed());
  EXPECT_EQ(spec.seed(), 7);
  EXPECT_FLOAT_EQ(spec.learning_rate().base_learning_rate(), 0.5f);
  EXPECT_EQ(spec.learning_rate().factors(), "constant * rsqrt_decay");
  EXPECT_FALSE(spec.data().pack());
  EXPECT_EQ(spec.dtype(), BFLOAT16);
  EXPECT_EQ(spec.name(), "my-job");
}

TEST(OverridesTest, OneofMemberReplacesTheOther) {
  JobSpec spec;
  spec.mutable_model()->mutable_config()->set_d_model(128);
  ASSERT_THAT(ApplyOverride("model.preset=t5_1_1_small", &spec), IsOk());
  EXPECT_EQ(spec.model().preset(), "t5_1_1_small");
  EXPECT_FALSE(spec.model().has_config());
}

TEST(OverridesTest, RepeatedMessageByIndexAndAppend) {
  JobSpec spec;
  ASSERT_THAT(ApplyOverride("actions[0].early_stopping.patience=5", &spec), IsOk());
  ASSERT_THAT(ApplyOverride("actions[1].terminate_on_nan.task=train", &spec), IsOk());
  ASSERT_THAT(ApplyOverride("actions[0].early_stopping.metric=loss", &spec), IsOk());
  ASSERT_EQ(spec.actions_size(), 2);
  EXPECT_EQ(spec.actions(0).early_stopping().patience(), 5);
  EXPECT_EQ(spec.actions(0).early_stopping().metric(), "loss");
  EXPECT_EQ(spec.actions(1).terminate_on_nan().task(), "train");
}

TEST(OverridesTest, IndexBeyondAppendIsRejected) {
  JobSpec spec;
  EXPECT_THAT(ApplyOverride("actions[2].terminate_on_nan.task=train", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("actions[2]: index out of range; actions has 0 element(s), "
                                 "so i may be 0..0")));
}

TEST(OverridesTest, RepeatedScalarTakesCommaList) {
  JobSpec spec;
  spec.mutable_eval()->add_tasks("old");
  ASSERT_THAT(ApplyOverride("eval.tasks=a,b", &spec), IsOk());
  ASSERT_EQ(spec.eval().tasks_size(), 2);
  EXPECT_EQ(spec.eval().tasks(1), "b");
}

TEST(OverridesTest, MessageValueInBraces) {
  JobSpec spec;
  ASSERT_THAT(ApplyOverride("model={preset: \"tiny\" dropout_rate: 0.2}", &spec), IsOk());
  EXPECT_EQ(spec.model().preset(), "tiny");
  EXPECT_FLOAT_EQ(spec.model().dropout_rate(), 0.2f);
}

TEST(OverridesTest, UnknownFieldListsAllowedFields) {
  JobSpec spec;
  EXPECT_THAT(ApplyOverride("optimizer.adafactor.decay=0.9", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--set optimizer.adafactor.decay=0.9: optimizer.adafactor.decay: "
                                 "no such field in Adafactor; allowed: decay_rate, ")));
}

TEST(OverridesTest, BadValuesNameTheExpectedType) {
  JobSpec spec;
  EXPECT_THAT(
      ApplyOverride("batch_size=lots", &spec),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size expects an integer (int32), got \"lots\"")));
  EXPECT_THAT(ApplyOverride("batch_size=99999999999", &spec), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ApplyOverride("data.pack=maybe", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("true or false")));
  EXPECT_THAT(ApplyOverride("learning_rate.base_learning_rate=nan", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a finite number")));
  EXPECT_THAT(ApplyOverride("dtype=float16", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"float16\" is not one of FLOAT32, BFLOAT16")));
}

TEST(OverridesTest, MalformedAssignments) {
  JobSpec spec;
  EXPECT_THAT(ApplyOverride("batch_size", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected path.to.field=value")));
  EXPECT_THAT(ApplyOverride("batch_size.x=1", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a message")));
  EXPECT_THAT(ApplyOverride("actions.on=ACTION_TRAIN", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("use actions[i].FIELD")));
  EXPECT_THAT(ApplyOverride("name[0]=x", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a repeated field")));
  EXPECT_THAT(ApplyOverride("actions[-1].on=ACTION_TRAIN", &spec), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ApplyOverride("model=preset", &spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inside braces")));
}

TEST(OverridesTest, LaterOverrideWins) {
  JobSpec spec;
  ASSERT_THAT(ApplyOverrides({"batch_size=8", "batch_size=16"}, &spec), IsOk());
  EXPECT_EQ(spec.batch_size(), 16);
}

}  // namespace
}  // namespace trainyard
