// Reduce-scatter and uneven all-gather against closed forms, on every
// backend that runs here: Gloo's rings (2, 3 and 4 ranks, uneven and empty
// shards, synchronous and started, interleaved with all-reduces), the
// default implementations (FakeCollective) and a single rank
// (LocalCollective), into a separate output and in place; bad shard counts
// and overlapping outputs are refused before anything is sent.
#include <vector>

#include "collective/collective.h"
#include "collective/ranks_on_threads.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// Shards of `total` elements for `world` ranks: uneven, with an empty one
// from three ranks on.
std::vector<int64_t> Counts(int world, int64_t total) {
  std::vector<int64_t> counts(world, 0);
  int64_t left = total;
  for (int r = 0; r < world; ++r) {
    if (world >= 3 && r == 1) continue;  // empty
    counts[r] = r == world - 1 ? left : std::min(left, total / world + r + 1);
    left -= counts[r];
  }
  return counts;
}

// Rank r holds (r + 1) * (i + 1) at i: the sum over ranks is
// (i + 1) * W (W + 1) / 2; the max (r = W - 1) W (i + 1); the min i + 1.
void CheckShardOps(int rank, int world, Collective* c, int64_t total) {
  const std::vector<int64_t> counts = Counts(world, total);
  const std::vector<int64_t> offsets = ShardOffsets(counts);
  const torch::Tensor i1 = torch::arange(1, total + 1, torch::kFloat);
  const torch::Tensor mine = i1.narrow(0, offsets[rank], counts[rank]);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    torch::Tensor input = i1 * static_cast<float>(rank + 1);
    torch::Tensor output = torch::full({counts[rank]}, -7.0f);
    ASSERT_THAT(c->ReduceScatter(input, counts, output, op), IsOk());
    const float factor = op == ReduceOp::kSum ? world * (world + 1) / 2.0f : op == ReduceOp::kMax ? world : 1.0f;
    EXPECT_TRUE(torch::equal(output, mine * factor)) << "rank " << rank << " of " << world << ", op " << int(op);
    // In place: the output is this rank's shard of the input.
    torch::Tensor in_place = i1 * static_cast<float>(rank + 1);
    ASSERT_THAT(c->ReduceScatter(in_place, counts, in_place.narrow(0, offsets[rank], counts[rank]), op), IsOk());
    EXPECT_TRUE(torch::equal(in_place.narrow(0, offsets[rank], counts[rank]), mine * factor))
        << "in place, rank " << rank << " of " << world << ", op " << int(op);
  }
  // Rank r contributes 1000 r + j for its counts[r] elements.
  torch::Tensor part = torch::arange(counts[rank], torch::kFloat) + 1000.0f * rank;
  torch::Tensor gathered = torch::full({total}, -7.0f);
  ASSERT_THAT(c->AllGatherV(part, counts, gathered), IsOk());
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(
        torch::equal(gathered.narrow(0, offsets[r], counts[r]), torch::arange(counts[r], torch::kFloat) + 1000.0f * r));
  }
}

TEST(ShardOpsTest, GlooRingsMatchClosedForms) {
  for (int world : {2, 3, 4}) {
    for (int64_t total : {int64_t{10}, int64_t{100003}}) {
      OnGlooRanks(
          world, [&](int rank, Collective* c) { CheckShardOps(rank, world, c, total); }, absl::Seconds(30));
    }
  }
}

// Started operations run in order on the collective's thread while the
// caller's all-reduces go on.
TEST(ShardOpsTest, GlooStartedOperationsOverlapWithAllReduce) {
  constexpr int kWorld = 3;
  OnGlooRanks(kWorld, [&](int rank, Collective* c) {
    const std::vector<int64_t> counts = {3, 4, 5};
    torch::Tensor a = torch::ones({12}) * (rank + 1), a_out = torch::empty({counts[rank]});
    torch::Tensor b = torch::ones({12}) * 10, b_out = torch::empty({counts[rank]});
    torch::Tensor g_in = torch::full({counts[rank]}, static_cast<float>(rank)), g_out = torch::empty({12});
    auto w1 = c->StartReduceScatter(a, counts, a_out, ReduceOp::kSum);
    auto w2 = c->StartAllGatherV(g_in, counts, g_out);
    std::vector<torch::Tensor> flag = {torch::ones({1}) * rank};
    ASSERT_THAT(c->AllReduce(flag, ReduceOp::kMax), IsOk());
    auto w3 = c->StartReduceScatter(b, counts, b_out, ReduceOp::kSum);
    ASSERT_THAT(w1.status(), IsOk());
    ASSERT_THAT(w2.status(), IsOk());
    ASSERT_THAT(w3.status(), IsOk());
    ASSERT_THAT((*w1)->Wait(), IsOk());
    ASSERT_THAT((*w2)->Wait(), IsOk());
    ASSERT_THAT((*w3)->Wait(), IsOk());
    EXPECT_TRUE(torch::equal(a_out, torch::full({counts[rank]}, 6.0f)));
    EXPECT_TRUE(torch::equal(b_out, torch::full({counts[rank]}, 30.0f)));
    EXPECT_TRUE(torch::equal(g_out, torch::tensor({0.f, 0.f, 0.f, 1.f, 1.f, 1.f, 1.f, 2.f, 2.f, 2.f, 2.f, 2.f})));
    EXPECT_EQ(flag[0].item<float>(), 2.0f);
  });
}

TEST(ShardOpsTest, DefaultImplementationsMatchClosedForms) {
  constexpr int kWorld = 3;
  OnFakeRanks(kWorld, [&](int rank, Collective* c) { CheckShardOps(rank, kWorld, c, 101); });
  LocalCollective local;
  CheckShardOps(0, 1, &local, 9);
}

TEST(ShardOpsTest, RefusesShardsThatDoNotFit) {
  LocalCollective c;
  torch::Tensor out = torch::empty({4});
  EXPECT_THAT(c.ReduceScatter(torch::ones({4}), {2, 2}, out, ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 shard counts for 1 ranks")));
  EXPECT_THAT(c.ReduceScatter(torch::ones({5}), {4}, out, ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input must be a contiguous 1-D tensor of 4")));
  EXPECT_THAT(c.ReduceScatter(torch::ones({4}), {-1}, out, ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a negative shard count")));
  // Overlapping the input other than as this rank's shard.
  torch::Tensor buffer = torch::ones({8});
  LocalCollective one;
  EXPECT_THAT(one.ReduceScatter(buffer.narrow(0, 0, 4), {4}, buffer.narrow(0, 2, 4), ReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output overlaps input")));
  EXPECT_THAT(c.AllGatherV(torch::ones({2, 2}), {4}, out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input must be a contiguous 1-D tensor")));
  EXPECT_THAT(c.AllGatherV(torch::ones({4}, torch::kDouble), {4}, out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("differ in dtype")));
}

}  // namespace
}  // namespace trainyard
