// TimedCollective forwards every operation unchanged and counts the time
// its caller was blocked: the rank that arrives first at an all-reduce
// waits for the last, and an asynchronous operation's wait counts when its
// work is waited for, not when it is started.
#include "collective/timed_collective.h"

#include <chrono>
#include <thread>

#include "collective/fake_collective.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(TimedCollectiveTest, TheEarlyRankCountsItsWaitForTheLateOne) {
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(20));
  double blocked[2] = {0, 0};
  double sums[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      FakeCollective raw(group, r);
      TimedCollective timed(&raw);
      EXPECT_EQ(timed.rank(), r);
      EXPECT_EQ(timed.world_size(), 2);
      // Both leave the barrier together (not timed: it goes to the raw
      // collective); then rank 1 computes for 300 ms before the all-reduce.
      ASSERT_THAT(raw.Barrier(), IsOk());
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::vector<torch::Tensor> t = {torch::tensor({r + 1.0}, torch::kDouble)};
      ASSERT_THAT(timed.AllReduce(t, ReduceOp::kSum), IsOk());
      sums[r] = t[0].item<double>();
      blocked[r] = timed.blocked_seconds();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sums[0], 3.0);
  EXPECT_EQ(sums[1], 3.0);
  // Rank 0 waited about the 300 ms rank 1 computed; rank 1 hardly waited.
  EXPECT_GE(blocked[0], 0.25);
  EXPECT_LT(blocked[1], blocked[0]);
}

// An operation whose work finishes only when waited for, 200 ms later.
class SlowWork : public CollectiveWork {
 public:
  absl::Status Wait() override {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return absl::UnavailableError("peer 1 left");
  }
};

class AsyncCollective : public LocalCollective {
 public:
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllReduce(torch::Tensor, ReduceOp) override {
    return std::unique_ptr<CollectiveWork>(new SlowWork);
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllGatherV(torch::Tensor, std::vector<int64_t>,
                                                                  torch::Tensor) override {
    return absl::InvalidArgumentError("counts do not fit");
  }
};

TEST(TimedCollectiveTest, AnAsynchronousOperationCountsWhenWaitedFor) {
  AsyncCollective raw;
  TimedCollective timed(&raw);
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work = timed.StartAllReduce(torch::zeros({4}), ReduceOp::kSum);
  ASSERT_THAT(work.status(), IsOk());
  EXPECT_LT(timed.blocked_seconds(), 0.1);
  // The work's status comes through unchanged.
  absl::Status waited = (*work)->Wait();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(waited.message(), "peer 1 left");
  EXPECT_GE(timed.blocked_seconds(), 0.19);
  // A refused start's status too.
  absl::StatusOr<std::unique_ptr<CollectiveWork>> refused =
      timed.StartAllGatherV(torch::zeros({1}), {1}, torch::zeros({1}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TimedCollectiveTest, AFailedOperationsStatusComesThroughUnchanged) {
  auto group = std::make_shared<FakeGroup>(1, absl::Seconds(5));
  group->FailOperation(0, 1, absl::AbortedError("injected"));
  FakeCollective raw(group, 0);
  TimedCollective timed(&raw);
  std::vector<torch::Tensor> t = {torch::ones({2})};
  ASSERT_THAT(timed.Broadcast(t, 0), IsOk());
  absl::Status failed = timed.AllReduce(t, ReduceOp::kMax);
  EXPECT_EQ(failed.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(failed.message(), "injected");
}

}  // namespace
}  // namespace trainyard
