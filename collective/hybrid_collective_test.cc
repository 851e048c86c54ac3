// HybridCollective on 4 ranks in shard groups of 2 ({0, 1}, {2, 3}; replica
// sets {0, 2}, {1, 3}), every collective a FakeGroup.
#include "collective/hybrid_collective.h"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "collective/ranks_on_threads.h"
#include "common/testing/status_matchers.h"

namespace trainyard {
namespace {

TEST(HybridCollectiveTest, PlacesFollowTheGroups) {
  const HybridPlace p = *PlaceInHybrid(5, 6, 2);
  EXPECT_EQ(p.group, 2);
  EXPECT_EQ(p.group_rank, 1);
  EXPECT_EQ(p.replica_set, 1);
  EXPECT_EQ(p.replica_rank, 2);
  EXPECT_THAT(PlaceInHybrid(0, 6, 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("must divide the world size")));
  EXPECT_THAT(PlaceInHybrid(6, 6, 2).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
}

// A reduce-scatter sums over all 4 ranks (the group's, then the replicas');
// everything else of the sharding group stays in the group; the job's
// collective spans all 4.
TEST(HybridCollectiveTest, ShardsSumOverEveryRankAndTheRestStaysInTheGroup) {
  std::mutex mu;
  std::vector<std::vector<float>> scattered(4), started(4), gathered(4);
  std::vector<float> in_group(4), in_world(4);
  OnFakeHybridRanks(4, 2, [&](int r, Collective* job) {
    Collective* shards = job->sharding_group();
    ASSERT_NE(shards, job);
    EXPECT_EQ(shards->rank(), r % 2);
    EXPECT_EQ(shards->world_size(), 2);
    EXPECT_EQ(job->rank(), r);
    EXPECT_EQ(job->world_size(), 4);
    const float f = static_cast<float>(r + 1);
    torch::Tensor input = torch::tensor({f, 10 * f, 100 * f, 1000 * f, 10000 * f});
    torch::Tensor out = torch::empty({r % 2 == 0 ? 2 : 3});
    ASSERT_THAT(shards->ReduceScatter(input.clone(), {2, 3}, out, ReduceOp::kSum), IsOk());
    torch::Tensor later = torch::empty({r % 2 == 0 ? 2 : 3});
    auto work = shards->StartReduceScatter(input.clone(), {2, 3}, later, ReduceOp::kSum);
    ASSERT_THAT(work.status(), IsOk());
    ASSERT_THAT((*work)->Wait(), IsOk());
    torch::Tensor all = torch::empty({3});
    ASSERT_THAT(shards->AllGatherV(torch::full({r % 2 == 0 ? 1 : 2}, f), {1, 2}, all), IsOk());
    std::vector<torch::Tensor> group_sum = {torch::tensor({f})}, world_sum = {torch::tensor({f})};
    ASSERT_THAT(shards->AllReduce(group_sum, ReduceOp::kSum), IsOk());
    ASSERT_THAT(job->AllReduce(world_sum, ReduceOp::kSum), IsOk());
    std::lock_guard<std::mutex> lock(mu);
    scattered[r] = std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
    started[r] = std::vector<float>(later.data_ptr<float>(), later.data_ptr<float>() + later.numel());
    gathered[r] = std::vector<float>(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
    in_group[r] = group_sum[0].item<float>();
    in_world[r] = world_sum[0].item<float>();
  });
  // 1 + 2 + 3 + 4 = 10 times each element.
  for (int r : {0, 2}) EXPECT_EQ(scattered[r], (std::vector<float>{10, 100})) << r;
  for (int r : {1, 3}) EXPECT_EQ(scattered[r], (std::vector<float>{1000, 10000, 100000})) << r;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(started[r], scattered[r]) << r;
  EXPECT_EQ(gathered[0], (std::vector<float>{1, 2, 2}));
  EXPECT_EQ(gathered[1], gathered[0]);
  EXPECT_EQ(gathered[2], (std::vector<float>{3, 4, 4}));
  EXPECT_EQ(gathered[3], gathered[2]);
  EXPECT_EQ(in_group, (std::vector<float>{3, 3, 7, 7}));
  EXPECT_EQ(in_world, (std::vector<float>{10, 10, 10, 10}));
}

TEST(HybridCollectiveTest, AnAbortReachesTheShardGroupsToo) {
  OnFakeHybridRanks(2, 1, [&](int, Collective* job) {
    job->Abort("test");
    EXPECT_TRUE(job->Progress().aborted);
    EXPECT_TRUE(job->sharding_group()->Progress().aborted);
  });
}

}  // namespace
}  // namespace trainyard
