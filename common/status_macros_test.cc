#include "common/status_macros.h"

#include "absl/strings/cord.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::Eq;

absl::Status FailIf(bool fail) { return fail ? absl::UnavailableError("worker gone") : absl::OkStatus(); }

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Chain(bool fail, int* out) {
  TY_RETURN_IF_ERROR(FailIf(fail));
  TY_ASSIGN_OR_RETURN(int h, Half(*out));
  TY_ASSIGN_OR_RETURN(*out, Half(h));
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorPropagatesCodeAndMessage) {
  int x = 8;
  EXPECT_THAT(Chain(true, &x), StatusIs(absl::StatusCode::kUnavailable, Eq("worker gone")));
  EXPECT_EQ(x, 8);
}

TEST(StatusMacrosTest, AssignOrReturnAssignsOrPropagates) {
  int x = 8;
  EXPECT_THAT(Chain(false, &x), IsOk());
  EXPECT_EQ(x, 2);
  int y = 6;  // 6 -> 3 -> odd
  EXPECT_THAT(Chain(false, &y), StatusIs(absl::StatusCode::kInvalidArgument, Eq("odd")));
}

TEST(AnnotateTest, PrependsContextKeepsCodeAndPayload) {
  absl::Status s = absl::NotFoundError("no such file");
  s.SetPayload("type.trainyard/detail", absl::Cord("x"));
  absl::Status a = Annotate(s, "job.textproto");
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kNotFound, Eq("job.textproto: no such file")));
  ASSERT_TRUE(a.GetPayload("type.trainyard/detail").has_value());
  EXPECT_EQ(std::string(*a.GetPayload("type.trainyard/detail")), "x");
}

TEST(AnnotateTest, OkStaysOk) { EXPECT_THAT(Annotate(absl::OkStatus(), "ctx"), IsOk()); }

}  // namespace
}  // namespace trainyard
