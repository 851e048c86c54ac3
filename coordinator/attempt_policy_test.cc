#include "coordinator/attempt_policy.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(AttemptPolicyTest, WhatMayBeRetried) {
  EXPECT_TRUE(IsRetryable(absl::UnavailableError("worker gone")));
  EXPECT_TRUE(IsRetryable(absl::DeadlineExceededError("no answer")));
  EXPECT_TRUE(IsRetryable(absl::AbortedError("collective failed")));
  EXPECT_FALSE(IsRetryable(absl::InvalidArgumentError("bad spec")));
  EXPECT_FALSE(IsRetryable(absl::InternalError("the ranks' parameters differ")));
  EXPECT_FALSE(IsRetryable(absl::FailedPreconditionError("NaN loss")));
}

TEST(AttemptPolicyTest, RestartsWhileRestartsAreLeftThenFails) {
  NextAttempt next = AfterRetryableEnd("rank 1 (worker w2-b): gone", 0, 3, "/out/checkpoint_40");
  EXPECT_EQ(next.state, RESTARTING);
  EXPECT_EQ(next.reason, "rank 1 (worker w2-b): gone; restart 1 of 3 from /out/checkpoint_40");
  EXPECT_EQ(next.restarts, 1);
  next = AfterRetryableEnd("preempted", 2, 3, "");
  EXPECT_EQ(next.state, RESTARTING);
  EXPECT_EQ(next.reason, "preempted; restart 3 of 3 from scratch");
  EXPECT_EQ(next.restarts, 3);
  next = AfterRetryableEnd("preempted", 3, 3, "/out/checkpoint_80");
  EXPECT_EQ(next.state, FAILED);
  EXPECT_EQ(next.reason, "preempted (no restarts left: max_restarts 3)");
  EXPECT_EQ(next.restarts, 3);
  EXPECT_EQ(AfterRetryableEnd("gone", 0, 0, "").state, FAILED);
}

}  // namespace
}  // namespace trainyard
