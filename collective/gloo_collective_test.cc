#include "collective/gloo_collective.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

// Runs `body(rank, collective)` on `world` threads, each a rank of one group.
template <typename F>
void OnRanks(int world, F body, absl::Duration timeout = absl::Seconds(30)) {
  std::shared_ptr<GlooStore> store = GlooCollective::NewInProcessStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto collective = GlooCollective::Create(rank, world, store, "127.0.0.1", timeout);
      ASSERT_TRUE(collective.ok()) << collective.status();
      body(rank, collective->get());
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCollectiveTest, AllReduceSumMaxMinMatchClosedForms) {
  constexpr int kWorld = 3;
  for (int64_t n : {1, 1000, 1 << 20}) {
    OnRanks(kWorld, [&](int rank, Collective* c) {
      // Rank r holds r + 1 + i at position i, and a second tensor of doubles.
      std::vector<torch::Tensor> t = {torch::arange(n, torch::kFloat) + (rank + 1),
                                      torch::full({3}, static_cast<double>(rank), torch::kDouble)};
      ASSERT_THAT(c->AllReduce(t, ReduceOp::kSum), IsOk());
      // sum over r of (r + 1 + i) = 6 + 3 i
      EXPECT_TRUE(torch::equal(t[0], torch::arange(n, torch::kFloat) * kWorld + 6)) << n;
      EXPECT_TRUE(torch::equal(t[1], torch::full({3}, 3.0, torch::kDouble)));
      std::vector<torch::Tensor> m = {torch::full({5}, static_cast<float>(rank * 2 - 1))};
      ASSERT_THAT(c->AllReduce(m, ReduceOp::kMax), IsOk());
      EXPECT_TRUE(torch::equal(m[0], torch::full({5}, 3.0f)));
      m = {torch::full({5}, static_cast<float>(rank * 2 - 1))};
      ASSERT_THAT(c->AllReduce(m, ReduceOp::kMin), IsOk());
      EXPECT_TRUE(torch::equal(m[0], torch::full({5}, -1.0f)));
    });
  }
}

TEST(GlooCollectiveTest, BroadcastAndBarrier) {
  OnRanks(2, [](int rank, Collective* c) {
    std::vector<torch::Tensor> t = {torch::full({4}, static_cast<float>(rank + 10)), torch::zeros({2})};
    if (rank == 1) t[1] = torch::ones({2});
    ASSERT_THAT(c->Broadcast(t, /*root=*/1), IsOk());
    EXPECT_TRUE(torch::equal(t[0], torch::full({4}, 11.0f)));
    EXPECT_TRUE(torch::equal(t[1], torch::ones({2})));
    EXPECT_THAT(c->Barrier(), IsOk());
    EXPECT_THAT(c->Broadcast(t, 5), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  });
}

TEST(GlooCollectiveTest, MissingPeerTimesOutWithinTheBound) {
  // Rank 1 joins, then never calls AllReduce: rank 0 gives up after the
  // timeout instead of hanging.
  std::atomic<bool> done{false};
  OnRanks(2, [&](int rank, Collective* c) {
    if (rank == 1) {
      while (!done) absl::SleepFor(absl::Milliseconds(10));
      return;
    }
    std::vector<torch::Tensor> t = {torch::ones({4})};
    const absl::Time start = absl::Now();
    absl::Status status = c->AllReduce(t, ReduceOp::kSum);
    const absl::Duration took = absl::Now() - start;
    done = true;
    EXPECT_FALSE(status.ok());
    EXPECT_TRUE(absl::IsDeadlineExceeded(status) || absl::IsUnavailable(status)) << status;
    EXPECT_LT(took, absl::Seconds(15));
  }, absl::Seconds(2));
}

TEST(GlooCollectiveTest, BadRank) {
  EXPECT_THAT(GlooCollective::Create(2, 2, GlooCollective::NewInProcessStore(), "127.0.0.1",
                                     absl::Seconds(1)).status(),
              StatusCodeIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace trainyard
