#include "collective/store.h"

#include <thread>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(InMemoryStoreTest, SetGetAddCheck) {
  InMemoryStore store;
  ASSERT_THAT(store.Set("a", std::string("x\0y", 3)), IsOk());
  auto a = store.Get("a", absl::Milliseconds(1));
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(*a, std::string("x\0y", 3));  // bytes, not C strings
  EXPECT_EQ(*store.Add("n", 5), 5);
  EXPECT_EQ(*store.Add("n", -7), -2);
  EXPECT_THAT(store.Add("a", 1).status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(*store.Check({"a", "n"}), true);
  EXPECT_EQ(*store.Check({"a", "missing"}), false);
}

TEST(InMemoryStoreTest, GetAndWaitBlockUntilSetOrTimeout) {
  InMemoryStore store;
  const absl::Time start = absl::Now();
  EXPECT_THAT(store.Get("late", absl::Milliseconds(50)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, testing::HasSubstr("'late'")));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_THAT(store.Wait({"p", "q"}, absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, testing::HasSubstr("[p, q]")));

  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(30));
    ASSERT_THAT(store.Set("p", "1"), IsOk());
    ASSERT_THAT(store.Set("late", "v"), IsOk());
    ASSERT_THAT(store.Set("q", "2"), IsOk());
  });
  EXPECT_THAT(store.Wait({"p", "q"}, absl::Seconds(10)), IsOk());
  EXPECT_EQ(*store.Get("late", absl::Seconds(10)), "v");
  setter.join();
}

TEST(PrefixStoreTest, ScopesKeysAndErasesByPrefix) {
  InMemoryStore base;
  PrefixStore job1("job1/0/", &base), job2("job2/0/", &base);
  ASSERT_THAT(job1.Set("k", "one"), IsOk());
  ASSERT_THAT(job2.Set("k", "two"), IsOk());
  EXPECT_EQ(*job1.Get("k", absl::ZeroDuration()), "one");
  EXPECT_EQ(*job2.Get("k", absl::ZeroDuration()), "two");
  EXPECT_EQ(*base.Get("job1/0/k", absl::ZeroDuration()), "one");
  base.ErasePrefix("job1/");
  EXPECT_EQ(base.size(), 1u);
  EXPECT_EQ(*job1.Check({"k"}), false);
  EXPECT_EQ(*job2.Check({"k"}), true);
}

// A closed scope fails its waiters at once (kAborted, with the reason),
// and later calls too; keys of other scopes, the next generation's
// included, are untouched; erasing the job forgets the closed scope.
TEST(InMemoryStoreTest, AClosedScopeFailsItsWaitersAtOnce) {
  InMemoryStore store;
  EXPECT_EQ(GroupScope("job-1", 0, 1), "job-1/0/g1");
  const std::string scope = GroupScope("job-1", 0, 1);
  absl::Status waited;
  const absl::Time start = absl::Now();
  std::thread waiter([&] { waited = store.Wait({scope + "/rank-1"}, absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(50));
  store.CloseScope(scope, "rank 1 (worker b) was lost");
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(waited, StatusIs(absl::StatusCode::kAborted,
                               HasSubstr("the rendezvous job-1/0/g1 was closed: rank 1 (worker b) was lost")));
  EXPECT_THAT(store.Get(scope + "/shard-group-0/rank-0", absl::Seconds(30)).status(),
              StatusCodeIs(absl::StatusCode::kAborted));
  ASSERT_THAT(store.Set(GroupScope("job-1", 0, 10) + "/k", "v"), IsOk());
  EXPECT_THAT(store.Get(GroupScope("job-1", 0, 10) + "/k", absl::ZeroDuration()), IsOk());
  EXPECT_THAT(store.Wait({GroupScope("job-1", 0, 2) + "/k"}, absl::ZeroDuration()),
              StatusCodeIs(absl::StatusCode::kDeadlineExceeded));
  store.ErasePrefix("job-1/");
  EXPECT_THAT(store.Wait({scope + "/rank-1"}, absl::ZeroDuration()), StatusCodeIs(absl::StatusCode::kDeadlineExceeded));
}

}  // namespace
}  // namespace trainyard
