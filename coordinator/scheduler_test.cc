#include "coordinator/scheduler.h"

#include "common/testing/status_matchers.h"
#include "coordinator/worker_registry.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;

TEST(AssignGangsTest, OldestFirstOnDisjointGangsWithoutBackfill) {
  const std::vector<std::string> idle = {"w1", "w2", "w3", "w4", "w5"};
  // 2 + 2 fit; the 3-worker job waits and blocks the 1-worker job behind it.
  auto gangs = AssignGangs({{"a", 2}, {"b", 2}, {"c", 3}, {"d", 1}}, idle);
  ASSERT_EQ(gangs.size(), 2u);
  EXPECT_EQ(gangs[0].job_id, "a");
  EXPECT_THAT(gangs[0].worker_ids, ElementsAre("w1", "w2"));
  EXPECT_EQ(gangs[1].job_id, "b");
  EXPECT_THAT(gangs[1].worker_ids, ElementsAre("w3", "w4"));
  EXPECT_TRUE(AssignGangs({{"big", 6}, {"small", 1}}, idle).empty());
  EXPECT_TRUE(AssignGangs({{"x", 1}}, {}).empty());
  // num_workers 0 is one worker.
  EXPECT_EQ(AssignGangs({{"x", 0}}, idle)[0].worker_ids.size(), 1u);
}

TEST(NextChunkTest, StopsAtEveryBoundary) {
  ChunkPeriods p;
  p.total_steps = 300;
  p.summary_period = 20;
  p.eval_period = 100;
  p.checkpoint_period = 50;
  std::vector<int64_t> ends;
  for (int64_t step = 0; step < 300; step += NextChunk(step, p)) ends.push_back(step + NextChunk(step, p));
  // Every multiple of 20 and 50 up to 300.
  std::vector<int64_t> want;
  for (int64_t s = 1; s <= 300; ++s) {
    if (s % 20 == 0 || s % 50 == 0 || s == 300) want.push_back(s);
  }
  EXPECT_EQ(ends, want);
  ChunkPeriods only_total;
  only_total.total_steps = 7;
  EXPECT_EQ(NextChunk(0, only_total), 7);
  EXPECT_EQ(NextChunk(5, only_total), 2);
  p.summary_period = 1000;  // larger than the job
  p.eval_period = 0;
  p.checkpoint_period = 0;
  EXPECT_EQ(NextChunk(0, p), 300);
  EXPECT_TRUE(AtBoundary(100, 50));
  EXPECT_FALSE(AtBoundary(100, 0));
}

TEST(WorkerRegistryTest, HeartbeatExpiryAndDraining) {
  SimulatedClock clock;
  WorkerRegistry registry(&clock, absl::Seconds(10));
  auto a = registry.Register("hostA", "10.0.0.1:5000", "cpu", 11);
  auto b = registry.Register("hostB", "10.0.0.2:5000", "", 12);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(*a, "w1-hostA");
  EXPECT_EQ(registry.Get(*b)->device, "cpu");
  EXPECT_THAT(registry.Register("h", "", "cpu", 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, testing::HasSubstr("address")));
  EXPECT_THAT(registry.Idle(), ElementsAre(*a, *b));

  ASSERT_THAT(registry.Assign({*a}, "job-1"), IsOk());
  EXPECT_THAT(registry.Assign({*a, *b}, "job-2"), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(registry.Idle(), ElementsAre(*b));
  bool let_go = false;
  ASSERT_THAT(registry.Heartbeat(*a, "job-1", &let_go), IsOk());
  EXPECT_FALSE(let_go);  // its job
  registry.Release({*a});
  EXPECT_EQ(registry.Get(*a)->state, WorkerRecord::State::kDraining);
  ASSERT_THAT(registry.Heartbeat(*a, "job-1", &let_go), IsOk());  // still tearing down
  EXPECT_TRUE(let_go);                                            // no longer its job: told again to let go
  EXPECT_THAT(registry.Idle(), ElementsAre(*b));
  ASSERT_THAT(registry.Heartbeat(*a, ""), IsOk());
  EXPECT_THAT(registry.Idle(), ElementsAre(*a, *b));

  // b stays silent: expired after more than 10 s, a keeps beating.
  clock.AdvanceTime(absl::Seconds(6));
  ASSERT_THAT(registry.Heartbeat(*a, ""), IsOk());
  clock.AdvanceTime(absl::Seconds(4));
  EXPECT_TRUE(registry.Expire().empty());  // exactly 10 s: not yet
  clock.AdvanceTime(absl::Milliseconds(1));
  std::vector<WorkerRecord> expired = registry.Expire();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].worker_id, *b);
  EXPECT_THAT(registry.Heartbeat(*b, ""), StatusCodeIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(registry.Idle(), ElementsAre(*a));

  // A worker that registers (or heartbeats) while still holding a job is
  // not handed a new one until it lets go.
  auto c = registry.Register("hostC", "10.0.0.3:5000", "cpu", 13, "old-job");
  EXPECT_EQ(registry.Get(*c)->state, WorkerRecord::State::kDraining);
  ASSERT_THAT(registry.Heartbeat(*a, "stale-job", &let_go), IsOk());
  EXPECT_TRUE(let_go);
  EXPECT_TRUE(registry.Idle().empty());
  ASSERT_THAT(registry.Heartbeat(*c, ""), IsOk());
  ASSERT_THAT(registry.Heartbeat(*a, ""), IsOk());
  EXPECT_THAT(registry.Idle(), ElementsAre(*a, *c));
}

}  // namespace
}  // namespace trainyard
