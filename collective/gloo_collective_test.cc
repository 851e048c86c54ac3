#include "collective/gloo_collective.h"

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// Runs `body(rank, collective)` on `world` threads, each a rank of one group.
template <typename F>
void OnRanks(int world, F body, absl::Duration timeout = absl::Seconds(30), int64_t bucket_bytes = 25 << 20) {
  std::shared_ptr<Store> store = GlooCollective::NewInProcessStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.timeout = timeout;
      options.bucket_bytes = bucket_bytes;
      auto collective = GlooCollective::Create(rank, world, store, options);
      ASSERT_TRUE(collective.ok()) << collective.status();
      body(rank, collective->get());
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCollectiveTest, AllReduceSumMaxMinMatchClosedForms) {
  constexpr int kWorld = 3;
  // 1 element to 64 MB of float32.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20, int64_t{16} << 20}) {
    OnRanks(kWorld, [&](int rank, Collective* c) {
      // Rank r holds r + 1 + (i mod 4096) at position i (sums stay exact in
      // float32), and a second tensor of doubles.
      const torch::Tensor base = torch::arange(n, torch::kFloat).remainder(4096);
      std::vector<torch::Tensor> t = {base + (rank + 1), torch::full({3}, static_cast<double>(rank), torch::kDouble)};
      ASSERT_THAT(c->AllReduce(t, ReduceOp::kSum), IsOk());
      // sum over r of (r + 1 + b) = 6 + 3 b
      EXPECT_TRUE(torch::equal(t[0], base * kWorld + 6)) << n;
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

TEST(GlooCollectiveTest, SmallBucketsGiveTheSameSums) {
  // 64-byte buckets: 16 floats per bucket, so the 40-element tensor is its
  // own bucket, the small ones share, and dtypes never mix.
  OnRanks(
      2,
      [](int rank, Collective* c) {
        std::vector<torch::Tensor> t = {
            torch::full({3}, rank + 1.0f),    torch::full({2, 2}, rank + 2.0f),
            torch::arange(40, torch::kFloat), torch::full({5}, static_cast<int64_t>(rank + 7)),
            torch::full({9}, rank * 0.5f),    torch::ones({6, 4}).t()};  // not contiguous
        ASSERT_THAT(c->AllReduce(t, ReduceOp::kSum), IsOk());
        EXPECT_TRUE(torch::equal(t[0], torch::full({3}, 3.0f)));
        EXPECT_TRUE(torch::equal(t[1], torch::full({2, 2}, 5.0f)));
        EXPECT_TRUE(torch::equal(t[2], torch::arange(40, torch::kFloat) * 2));
        EXPECT_TRUE(torch::equal(t[3], torch::full({5}, int64_t{15})));
        EXPECT_TRUE(torch::equal(t[4], torch::full({9}, 0.5f)));
        EXPECT_TRUE(torch::equal(t[5], torch::full({4, 6}, 2.0f)));
      },
      absl::Seconds(30), /*bucket_bytes=*/64);
}

TEST(GlooCollectiveTest, AllGatherInRankOrder) {
  OnRanks(3, [](int rank, Collective* c) {
    std::vector<torch::Tensor> out;
    ASSERT_THAT(c->AllGather(torch::full({2}, static_cast<double>(rank * rank)), &out), IsOk());
    ASSERT_EQ(out.size(), 3u);
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(torch::equal(out[r], torch::full({2}, r * r * 1.0))) << r;
  });
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

// The root's tensors reach the receivers only; the other ranks keep
// theirs, and every rank can go on with the group (the sequence of ring
// operations stays aligned).
TEST(GlooCollectiveTest, BroadcastToReachesTheReceiversOnly) {
  OnRanks(4, [](int rank, Collective* c) {
    std::vector<torch::Tensor> t = {torch::full({5}, static_cast<float>(rank)), torch::full({3}, rank * 10.0)};
    ASSERT_THAT(c->BroadcastTo(t, /*root=*/1, {3, 0}), IsOk());
    const float from = rank == 2 ? 2.0f : 1.0f;
    EXPECT_TRUE(torch::equal(t[0], torch::full({5}, from))) << rank;
    EXPECT_TRUE(torch::equal(t[1], torch::full({3}, from * 10.0))) << rank;
    torch::Tensor out = torch::empty({4});
    ASSERT_THAT(c->AllGatherV(torch::full({1}, static_cast<float>(rank)), {1, 1, 1, 1}, out), IsOk());
    EXPECT_TRUE(torch::equal(out, torch::arange(4, torch::kFloat)));
    EXPECT_THAT(c->BroadcastTo(t, 1, {1}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the root (1)")));
    EXPECT_THAT(c->BroadcastTo(t, 0, {2, 2}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("named twice")));
    EXPECT_THAT(c->BroadcastTo(t, 4, {}), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  });
}

TEST(GlooCollectiveTest, MissingPeerTimesOutWithinTheBound) {
  // Rank 1 joins, then never calls AllReduce: rank 0 gives up after the
  // timeout instead of hanging.
  std::atomic<bool> done{false};
  OnRanks(
      2,
      [&](int rank, Collective* c) {
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
      },
      absl::Seconds(2));
}

// Rank 0 runs `blocked` while rank 1 never arrives; a watchdog thread sees
// rank 0 waiting with nothing completing for 200 ms, then aborts rank 0's
// collective. Returns `blocked`'s status and how long it took.
template <typename F>
std::pair<absl::Status, absl::Duration> AbortWhileBlocked(F blocked, CollectiveProgress* seen) {
  std::atomic<bool> done{false};
  absl::Status status;
  absl::Duration took;
  OnRanks(
      2,
      [&](int rank, Collective* c) {
        if (rank == 1) {
          while (!done) absl::SleepFor(absl::Milliseconds(10));
          return;
        }
        EXPECT_FALSE(c->Progress().waiting);
        std::atomic<bool> returned{false};
        std::thread watchdog([&] {
          while (!returned && !(c->Progress().waiting && c->Progress().stalled >= absl::Milliseconds(200))) {
            absl::SleepFor(absl::Milliseconds(5));
          }
          *seen = c->Progress();
          c->Abort("rank 1 is unreachable");
        });
        const absl::Time start = absl::Now();
        status = blocked(c);
        took = absl::Now() - start;
        returned = true;
        watchdog.join();
        EXPECT_TRUE(seen->waiting) << "returned before the abort: " << status;
        done = true;
        // Aborted for good: later operations fail at once.
        std::vector<torch::Tensor> t = {torch::ones({4})};
        EXPECT_THAT(c->AllReduce(t, ReduceOp::kSum), StatusCodeIs(absl::StatusCode::kAborted));
        EXPECT_THAT(c->StartAllReduce(torch::ones({4}), ReduceOp::kSum).status(),
                    StatusCodeIs(absl::StatusCode::kAborted));
        EXPECT_THAT(c->Barrier(), StatusCodeIs(absl::StatusCode::kAborted));
        const CollectiveProgress after = c->Progress();
        EXPECT_TRUE(after.aborted);
        EXPECT_FALSE(after.waiting);
        EXPECT_EQ(after.stalled, absl::ZeroDuration());
      },
      absl::Seconds(60));
  return {status, took};
}

TEST(GlooCollectiveTest, AbortEndsABlockedAllReduceAtOnce) {
  CollectiveProgress seen;
  auto [status, took] = AbortWhileBlocked(
      [](Collective* c) {
        std::vector<torch::Tensor> t = {torch::ones({4})};
        return c->AllReduce(t, ReduceOp::kSum);
      },
      &seen);
  EXPECT_THAT(status, StatusCodeIs(absl::StatusCode::kAborted));
  EXPECT_NE(status.message().find("all-reduce: the collective was aborted: rank 1 is unreachable"),
            absl::string_view::npos)
      << status;
  EXPECT_TRUE(seen.waiting);
  EXPECT_EQ(seen.completed, 0);
  EXPECT_GE(seen.stalled, absl::Milliseconds(200));
  // Not the 60 s timeout: the stall plus at most a few poll intervals.
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(GlooCollectiveTest, AbortEndsAStartedAllReduceAndARingOperation) {
  CollectiveProgress seen;
  auto [status, took] = AbortWhileBlocked(
      [](Collective* c) {
        absl::StatusOr<std::unique_ptr<CollectiveWork>> work = c->StartAllReduce(torch::ones({8}), ReduceOp::kSum);
        if (!work.ok()) return work.status();
        return (*work)->Wait();
      },
      &seen);
  EXPECT_THAT(status, StatusCodeIs(absl::StatusCode::kAborted));
  EXPECT_LT(took, absl::Seconds(5));
  auto [ring, ring_took] = AbortWhileBlocked(
      [](Collective* c) {
        torch::Tensor input = torch::ones({6});
        return c->ReduceScatter(input, {3, 3}, torch::empty({3}), ReduceOp::kSum);
      },
      &seen);
  EXPECT_THAT(ring, StatusCodeIs(absl::StatusCode::kAborted));
  EXPECT_NE(ring.message().find("rank 1 is unreachable"), absl::string_view::npos) << ring;
  EXPECT_LT(ring_took, absl::Seconds(5));
}

TEST(GlooCollectiveTest, ProgressCountsCompletedWaits) {
  OnRanks(2, [](int rank, Collective* c) {
    std::vector<torch::Tensor> t = {torch::ones({4})};
    ASSERT_THAT(c->AllReduce(t, ReduceOp::kSum), IsOk());
    ASSERT_THAT(c->Barrier(), IsOk());
    const CollectiveProgress p = c->Progress();
    EXPECT_EQ(p.completed, 2) << rank;
    EXPECT_FALSE(p.waiting);
    EXPECT_FALSE(p.aborted);
  });
}

TEST(GlooCollectiveTest, BadRank) {
  EXPECT_THAT(GlooCollective::Create(2, 2, GlooCollective::NewInProcessStore(), "127.0.0.1", absl::Seconds(1)).status(),
              StatusCodeIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace trainyard
