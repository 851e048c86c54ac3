// RankCalls with calls the test completes by hand, in any order, from any
// thread.
#include "coordinator/fan_out.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/testing/status_matchers.h"

namespace trainyard {
namespace {

using Done = WorkerClient::Done<int>;

TEST(FanOutTest, AnswersAreInRankOrderWhateverOrderTheyCome) {
  std::atomic<int> woken{0};
  RankCalls<int> calls(3, [&] { ++woken; });
  std::vector<Done> pending(3);
  std::vector<int> started;
  calls.StartAll([&](int rank, Done done) {
    started.push_back(rank);
    pending[rank] = std::move(done);
  });
  EXPECT_EQ(started, (std::vector<int>{0, 1, 2}));
  pending[2](20);
  pending[0](0);
  EXPECT_EQ(calls.done(), 2);
  EXPECT_EQ(woken.load(), 0);  // neither a failure nor the last answer
  EXPECT_FALSE(calls.WaitAll(absl::Now() + absl::Milliseconds(20)));
  std::thread last([&] { pending[1](10); });
  EXPECT_TRUE(calls.WaitAll());
  last.join();
  EXPECT_EQ(woken.load(), 1);
  std::vector<absl::StatusOr<int>> results = calls.TakeResults();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(*results[0], 0);
  EXPECT_EQ(*results[1], 10);
  EXPECT_EQ(*results[2], 20);
  EXPECT_FALSE(calls.failed());
}

TEST(FanOutTest, AFailureWakesAtOnceAndIsKept) {
  std::atomic<int> woken{0};
  RankCalls<int> calls(2, [&] { ++woken; });
  std::vector<Done> pending(2);
  calls.StartAll([&](int rank, Done done) { pending[rank] = std::move(done); });
  pending[1](absl::UnavailableError("gone"));
  EXPECT_EQ(woken.load(), 1);
  EXPECT_TRUE(calls.failed());
  std::vector<absl::StatusOr<int>> results = calls.TakeResults();
  EXPECT_THAT(results[0].status(), StatusIs(absl::StatusCode::kUnknown, ::testing::HasSubstr("has not ended")));
  EXPECT_THAT(results[1].status(), StatusIs(absl::StatusCode::kUnavailable, ::testing::HasSubstr("gone")));
  pending[0](5);
  EXPECT_EQ(woken.load(), 2);  // the last answer
  EXPECT_TRUE(calls.WaitAll());
}

TEST(FanOutTest, AnAnswerInsideStartAndAnAnswerAfterTheCallsObjectIsGone) {
  Done late;
  {
    RankCalls<int> calls(2);
    calls.StartAll([&](int rank, Done done) {
      if (rank == 0) {
        done(1);  // a call that ends at once answers inside StartAll
      } else {
        late = std::move(done);
      }
    });
    EXPECT_EQ(calls.done(), 1);
  }
  late(2);  // the state outlives the RankCalls: nothing dangles
}

TEST(FanOutTest, CallEveryRankWaitsForEveryAnswer) {
  std::vector<std::thread> threads;
  std::vector<absl::StatusOr<int>> results = CallEveryRank<int>(4, [&](int rank, Done done) {
    threads.emplace_back([rank, done = std::move(done)] {
      absl::SleepFor(absl::Milliseconds(5 * (4 - rank)));
      done(rank * rank);
    });
  });
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(results.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(*results[r], r * r);
}

}  // namespace
}  // namespace trainyard
