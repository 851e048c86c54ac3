#include "collective/fake_collective.h"

#include <thread>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

template <typename F>
void OnRanks(std::shared_ptr<FakeGroup> group, F body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < group->world_size(); ++r) {
    threads.emplace_back([&, r] {
      FakeCollective c(group, r);
      body(r, &c);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(FakeCollectiveTest, ReducesGathersAndBroadcastsLikeARealGroup) {
  auto group = std::make_shared<FakeGroup>(3, absl::Seconds(10));
  OnRanks(group, [](int rank, Collective* c) {
    std::vector<torch::Tensor> t = {torch::full({2}, static_cast<float>(rank + 1))};
    ASSERT_THAT(c->AllReduce(t, ReduceOp::kSum), IsOk());
    EXPECT_TRUE(torch::equal(t[0], torch::full({2}, 6.0f)));
    t = {torch::full({2}, static_cast<float>(rank))};
    ASSERT_THAT(c->AllReduce(t, ReduceOp::kMin), IsOk());
    EXPECT_TRUE(torch::equal(t[0], torch::zeros({2})));
    std::vector<torch::Tensor> gathered;
    ASSERT_THAT(c->AllGather(torch::full({1}, rank * 10L), &gathered), IsOk());
    ASSERT_EQ(gathered.size(), 3u);
    EXPECT_EQ(gathered[2].item<int64_t>(), 20);
    t = {torch::full({1}, static_cast<float>(rank))};
    ASSERT_THAT(c->Broadcast(t, 2), IsOk());
    EXPECT_EQ(t[0].item<float>(), 2.0f);
    EXPECT_THAT(c->Barrier(), IsOk());
    // The default BroadcastTo: rank 0 keeps its own.
    t = {torch::full({1}, static_cast<float>(rank))};
    ASSERT_THAT(c->BroadcastTo(t, 2, {1}), IsOk());
    EXPECT_EQ(t[0].item<float>(), rank == 0 ? 0.0f : 2.0f);
  });
}

TEST(FakeCollectiveTest, InjectedFailureAndMissingPeerTimeout) {
  auto group = std::make_shared<FakeGroup>(2, absl::Milliseconds(200));
  group->FailOperation(1, 0, absl::UnavailableError("link down"));
  OnRanks(group, [](int rank, Collective* c) {
    std::vector<torch::Tensor> t = {torch::ones({1})};
    absl::Status s = c->AllReduce(t, ReduceOp::kSum);
    if (rank == 1) {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable, testing::HasSubstr("link down")));
    } else {
      // Rank 0 waits for rank 1, which never arrives: bounded.
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded, testing::HasSubstr("1 of 2")));
    }
  });
}

TEST(FakeCollectiveTest, AbortEndsAWaitForAMissingPeer) {
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(60));
  FakeCollective rank0(group, 0);
  std::thread watchdog([&] {
    while (rank0.Progress().stalled < absl::Milliseconds(100)) absl::SleepFor(absl::Milliseconds(5));
    rank0.Abort("rank 1 stopped");
  });
  const absl::Time start = absl::Now();
  std::vector<torch::Tensor> t = {torch::ones({1})};
  EXPECT_THAT(rank0.AllReduce(t, ReduceOp::kSum),
              StatusIs(absl::StatusCode::kAborted, testing::HasSubstr("the collective was aborted: rank 1 stopped")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  watchdog.join();
  EXPECT_EQ(rank0.Progress().completed, 1);
  EXPECT_TRUE(rank0.Progress().aborted);
}

TEST(FakeCollectiveTest, DelayedRankStillMeets) {
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(10));
  group->DelayOperation(0, 0, absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  OnRanks(group, [](int, Collective* c) { EXPECT_THAT(c->Barrier(), IsOk()); });
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

}  // namespace
}  // namespace trainyard
