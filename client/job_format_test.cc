// The straggler view: the rank the others wait for is found by its compute
// time, not by its wall time (which lock-step makes equal on every rank).
#include "client/job_format.h"

#include <array>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

// Ranks with these (wall, compute, collective) seconds per step.
JobInfo Ranks(const std::vector<std::array<double, 3>>& seconds) {
  JobInfo job;
  job.set_job_id("j");
  job.set_state(RUNNING);
  for (size_t i = 0; i < seconds.size(); ++i) {
    RankInfo* r = job.add_ranks();
    r->set_rank(static_cast<int>(i));
    r->set_worker_id("w" + std::to_string(i));
    r->set_last_step_seconds(seconds[i][0]);
    r->set_last_compute_seconds(seconds[i][1]);
    r->set_last_collective_seconds(seconds[i][2]);
  }
  return job;
}

TEST(StragglersTest, TheRankWithTheMostComputeInALockStepGang) {
  // Equal wall times: rank 2 computes 0.4 s, the others 0.1 s and wait 0.3.
  const JobInfo job = Ranks({{0.5, 0.1, 0.4}, {0.5, 0.11, 0.39}, {0.5, 0.4, 0.1}, {0.5, 0.1, 0.4}});
  EXPECT_EQ(Stragglers(job), std::vector<int>({2}));
  const nlohmann::json j = JobJson(job);
  EXPECT_EQ(j["ranks"][2]["straggler"], true);
  EXPECT_EQ(j["ranks"][1]["straggler"], false);
  EXPECT_EQ(j["ranks"][2]["last_compute_seconds"], 0.4);
  EXPECT_EQ(j["ranks"][2]["last_collective_seconds"], 0.1);
  const std::string text = FormatJob(job);
  EXPECT_NE(text.find("compute"), std::string::npos) << text;
  EXPECT_NE(text.find("0.4000     0.1000  (straggler)"), std::string::npos) << text;
  EXPECT_EQ(text.find("(straggler)"), text.rfind("(straggler)")) << text;
}

TEST(StragglersTest, NoneWhenComputeIsWithinAQuarterOfTheOthers) {
  EXPECT_TRUE(Stragglers(Ranks({{0.5, 0.1, 0.4}, {0.5, 0.124, 0.376}, {0.5, 0.11, 0.39}})).empty());
  // 30 % above, but 3 ms: timer noise on a tiny step, not a straggler.
  EXPECT_TRUE(Stragglers(Ranks({{0.02, 0.010, 0.01}, {0.02, 0.013, 0.007}})).empty());
  // Two ranks: each is compared with the other.
  EXPECT_EQ(Stragglers(Ranks({{0.5, 0.1, 0.4}, {0.5, 0.2, 0.3}})), std::vector<int>({1}));
  // One rank: nothing to compare with.
  EXPECT_TRUE(Stragglers(Ranks({{0.5, 0.5, 0.0}})).empty());
}

TEST(StragglersTest, WallTimeWhenComputeIsNotReported) {
  // A worker that does not report compute (0): wall time against the
  // fastest rank's.
  EXPECT_EQ(Stragglers(Ranks({{0.5, 0, 0}, {0.7, 0, 0}, {0.55, 0, 0}})), std::vector<int>({1}));
  EXPECT_TRUE(Stragglers(Ranks({{0.5, 0, 0}, {0.59, 0, 0}})).empty());
  // Before any chunk finished: nothing known, nothing flagged.
  EXPECT_TRUE(Stragglers(Ranks({{0, 0, 0}, {0, 0, 0}})).empty());
}

TEST(GoodputTest, StatusShowsTheRatioAndTheLargestLosses) {
  JobInfo job = Ranks({});
  Goodput* g = job.mutable_goodput();
  g->set_wall_seconds(100);
  g->set_productive_seconds(90);
  g->set_recovery_seconds(6);
  g->set_checkpoint_seconds(3);
  g->set_queued_seconds(1);
  g->set_other_seconds(0.01);
  g->set_ratio(0.9);
  EXPECT_EQ(GoodputLosses(*g, 2), (std::vector<std::string>{"recovery 6.0 s", "checkpoints 3.0 s"}));
  EXPECT_THAT(FormatJob(job), ::testing::HasSubstr("  goodput: 90.0 % (90.0 s productive of 100.0 s); largest "
                                                   "losses: recovery 6.0 s, checkpoints 3.0 s, queued 1.0 s\n"));
  EXPECT_DOUBLE_EQ(JobJson(job)["goodput"]["recovery_seconds"].get<double>(), 6.0);
}

}  // namespace
}  // namespace trainyard
