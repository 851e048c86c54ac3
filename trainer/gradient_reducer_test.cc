#include "trainer/gradient_reducer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <functional>

#include "collective/ranks_on_threads.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

// Five parameters of a small chain y = tanh(tanh(x W0 + b0) W1 + b1) . w2,
// plus one parameter the loss never uses.
struct Net {
  // Own generators, never the global one: ranks build nets on threads.
  explicit Net(uint64_t seed) {
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
    params = {torch::randn({8, 16}, g), torch::randn({16}, g), torch::randn({16, 16}, g),
              torch::randn({16}, g),    torch::randn({16}, g), torch::randn({4}, g)};
    for (auto& p : params) p.set_requires_grad(true);
  }
  torch::Tensor Loss(const torch::Tensor& x) const {
    torch::Tensor h = torch::tanh(x.matmul(params[0]) + params[1]);
    h = torch::tanh(h.matmul(params[2]) + params[3]);
    return h.matmul(params[4]).pow(2).sum();
  }
  std::vector<torch::Tensor> params;
};

torch::Tensor Input(int rank, int microbatch) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(100 + 10 * rank + microbatch);
  return torch::randn({5, 8}, g);
}

// The gradients of one rank's microbatches computed alone, without a
// reducer: what the reduced gradients must sum.
std::vector<torch::Tensor> LocalGrads(int rank, int microbatches) {
  Net net(7);
  for (int m = 0; m < microbatches; ++m) net.Loss(Input(rank, m)).backward();
  std::vector<torch::Tensor> out;
  for (auto& p : net.params) out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return out;
}

TEST(GradientReducerTest, BucketsHoldParametersInReverseOrderWithinTheSizeLimit) {
  Net net(7);
  LocalCollective local;
  // Sizes in bytes: 512, 64, 1024, 64, 64, 16. A 1100-byte limit:
  // [5,4,3] = 144, + 1024 > 1100 -> [2,1] = 1088, [0] = 512.
  GradientReducer reducer(net.params, &local, 1100);
  EXPECT_EQ(reducer.bucket_members(), (std::vector<std::vector<int>>{{5, 4, 3}, {2, 1}, {0}}));
  // A parameter larger than the limit gets a bucket of its own.
  GradientReducer tiny_buckets(net.params, &local, 8);
  EXPECT_EQ(tiny_buckets.num_buckets(), 6);
  // Every grad is a zeroed view of a bucket.
  for (auto& p : net.params) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().sizes(), p.sizes());
    EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f);
  }
}

TEST(GradientReducerTest, SumsOverRanksAndStartsBucketsDuringBackward) {
  constexpr int kMicrobatches = 3;
  const std::vector<torch::Tensor> g0 = LocalGrads(0, kMicrobatches), g1 = LocalGrads(1, kMicrobatches);
  std::vector<std::vector<torch::Tensor>> reduced(2);
  std::vector<int> during(2), buckets(2);
  OnGlooRanks(2, [&](int rank, Collective* collective) {
    Net net(7);
    GradientReducer reducer(net.params, collective, /*bucket_bytes=*/100);
    for (int step = 0; step < 2; ++step) {  // the second step starts from zero again
      for (int m = 0; m < kMicrobatches; ++m) {
        if (m == kMicrobatches - 1) reducer.Arm();
        net.Loss(Input(rank, m)).backward();
      }
      ASSERT_TRUE(reducer.Finish().ok());
      if (step == 0) reducer.ZeroGrads();
    }
    for (auto& p : net.params) reduced[rank].push_back(p.grad().clone());
    during[rank] = reducer.started_during_backward();
    buckets[rank] = reducer.num_buckets();
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(reduced[rank].size(), g0.size());
    for (size_t i = 0; i < g0.size(); ++i) {
      EXPECT_TRUE(torch::allclose(reduced[rank][i], g0[i] + g1[i], 1e-6, 1e-6)) << "rank " << rank << " param " << i;
    }
    // Buckets [5,4],[3],[2],[1],[0]: the unused parameter 5 keeps bucket 0
    // from filling, so no bucket can start before Finish: the ones after it
    // wait for it, keeping the order every rank issues them in.
    EXPECT_EQ(buckets[rank], 5);
    EXPECT_EQ(during[rank], 0);
  }
  EXPECT_EQ(reduced[0][5].abs().sum().item<float>(), 0.0f);
}

// With shards, each rank receives the sums of its own parameters'
// gradients: parameters 0-1 are rank 0's, 2 rank 1's, 3-5 rank 2's, in
// buckets one of which cuts across shards ([5,4,3], [2,1], [0] at 1100
// bytes) and in one bucket per parameter, overlapped with backward and
// after it.
TEST(GradientReducerTest, ShardedBucketsAreReduceScatteredToTheirOwners) {
  constexpr int kWorld = 3, kMicrobatches = 2;
  const std::vector<size_t> bounds = {0, 2, 3, 6};
  std::vector<std::vector<torch::Tensor>> local;
  for (int r = 0; r < kWorld; ++r) local.push_back(LocalGrads(r, kMicrobatches));
  for (int64_t bucket_bytes : {1100, 8}) {
    for (bool overlap : {true, false}) {
      std::vector<std::vector<torch::Tensor>> reduced(kWorld);
      std::vector<std::vector<std::vector<int>>> members(kWorld);
      OnFakeRanks(kWorld, [&](int rank, Collective* collective) {
        Net net(7);
        GradientReducer reducer(net.params, collective, bucket_bytes, bounds);
        EXPECT_TRUE(reducer.reduce_scatters());
        for (int m = 0; m < kMicrobatches; ++m) {
          if (overlap && m == kMicrobatches - 1) reducer.Arm();
          net.Loss(Input(rank, m)).backward();
        }
        ASSERT_TRUE(reducer.Finish().ok());
        for (auto& p : net.params) reduced[rank].push_back(p.grad().clone());
        members[rank] = reducer.bucket_members();
      });
      if (bucket_bytes == 1100) {
        EXPECT_EQ(members[0], (std::vector<std::vector<int>>{{5, 4, 3}, {2, 1}, {0}}));
      }
      for (int rank = 0; rank < kWorld; ++rank) {
        ASSERT_EQ(reduced[rank].size(), 6u);
        for (size_t i = bounds[rank]; i < bounds[rank + 1]; ++i) {
          // The fake collective sums in rank order, as its all-reduce does.
          const torch::Tensor want = local[0][i] + local[1][i] + local[2][i];
          EXPECT_TRUE(torch::equal(reduced[rank][i], want))
              << "rank " << rank << " param " << i << " bucket_bytes " << bucket_bytes << " overlap " << overlap;
        }
      }
    }
  }
}

// One microbatch's gradients on one rank, alone.
std::vector<torch::Tensor> MicrobatchGrads(int rank, int microbatch) {
  Net net(7);
  net.Loss(Input(rank, microbatch)).backward();
  std::vector<torch::Tensor> out;
  for (auto& p : net.params) out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return out;
}

// keep_only_shard: between passes no parameter has a gradient, at most two
// buckets exist during a pass, and the shard holds each microbatch's sums
// over ranks added up.
TEST(GradientReducerTest, KeepingOnlyTheShardHoldsTheSumsOfEveryMicrobatch) {
  constexpr int kWorld = 3, kMicrobatches = 2;
  std::vector<std::vector<std::vector<torch::Tensor>>> local(kWorld);  // rank, microbatch, param
  for (int r = 0; r < kWorld; ++r) {
    for (int m = 0; m < kMicrobatches; ++m) local[r].push_back(MicrobatchGrads(r, m));
  }
  for (bool overlap : {true, false}) {
    std::vector<std::vector<torch::Tensor>> shard(kWorld);
    std::vector<int> peak(kWorld), undefined_after(kWorld);
    OnFakeRanks(kWorld, [&](int rank, Collective* collective) {
      Net net(7);
      net.params.pop_back();  // every parameter used: buckets can start during backward
      GradientReducer reducer(net.params, collective, /*bucket_bytes=*/8, {0, 2, 3, 5},
                              /*keep_only_shard=*/true);
      EXPECT_TRUE(reducer.keeps_only_shard());
      for (auto& p : net.params) EXPECT_FALSE(p.grad().defined());
      for (int step = 0; step < 2; ++step) {  // the second starts from zero again
        for (int m = 0; m < kMicrobatches; ++m) {
          if (overlap) reducer.Arm();
          net.Loss(Input(rank, m)).backward();
          ASSERT_TRUE(reducer.Finish().ok());
          if (overlap) peak[rank] = std::max(peak[rank], reducer.peak_buckets());
        }
        if (step == 0) reducer.ZeroGrads();
      }
      for (auto& p : net.params) undefined_after[rank] += !p.grad().defined();
      for (const torch::Tensor& g : reducer.ShardGradients()) shard[rank].push_back(g.defined() ? g.clone() : g);
    });
    const std::vector<size_t> used_bounds = {0, 2, 3, 5};
    for (int rank = 0; rank < kWorld; ++rank) {
      EXPECT_EQ(undefined_after[rank], 5) << rank;
      if (overlap) {
        EXPECT_GE(peak[rank], 1) << rank;
        EXPECT_LE(peak[rank], 2) << rank;  // of 5 buckets
      }
      ASSERT_EQ(shard[rank].size(), 5u);
      for (size_t i = 0; i < 5; ++i) {
        const bool own = i >= used_bounds[rank] && i < used_bounds[rank + 1];
        ASSERT_EQ(shard[rank][i].defined(), own) << "rank " << rank << " param " << i;
        if (!own) continue;
        // Sums over ranks in rank order (the fake collective's), then over
        // microbatches.
        torch::Tensor want;
        for (int m = 0; m < kMicrobatches; ++m) {
          const torch::Tensor s = local[0][m][i] + local[1][m][i] + local[2][m][i];
          want = m == 0 ? s : want + s;
        }
        EXPECT_TRUE(torch::equal(shard[rank][i], want)) << "rank " << rank << " param " << i << " overlap " << overlap;
      }
    }
  }
}

// A warm-up pass keeping only the shard: every gradient is dropped as it is
// made, nothing is sent (a lone rank of a world of 2 would wait forever),
// and the shard stays zero.
TEST(GradientReducerTest, AWarmUpPassDropsItsGradients) {
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(1));
  FakeCollective collective(group, 0);
  Net net(7);
  net.params.pop_back();
  GradientReducer reducer(net.params, &collective, /*bucket_bytes=*/8, {0, 2, 5}, /*keep_only_shard=*/true);
  reducer.ArmToDiscard();
  net.Loss(Input(0, 0)).backward();
  for (auto& p : net.params) EXPECT_FALSE(p.grad().defined());
  reducer.Abandon();
  for (const torch::Tensor& g : reducer.ShardGradients()) {
    if (g.defined()) {
      EXPECT_EQ(g.abs().sum().item<float>(), 0.0f);
    }
  }
}

TEST(GradientReducerTest, BucketsStartAsTheyFillWhenEveryParameterIsUsed) {
  std::vector<int> during(2), buckets(2);
  std::vector<std::vector<torch::Tensor>> reduced(2);
  OnGlooRanks(2, [&](int rank, Collective* collective) {
    Net net(7);
    net.params.pop_back();  // drop the unused parameter
    GradientReducer reducer(net.params, collective, /*bucket_bytes=*/100);
    reducer.Arm();
    net.Loss(Input(rank, 0)).backward();
    ASSERT_TRUE(reducer.Finish().ok());
    during[rank] = reducer.started_during_backward();
    buckets[rank] = reducer.num_buckets();
    for (auto& p : net.params) reduced[rank].push_back(p.grad().clone());
  });
  const std::vector<torch::Tensor> g0 = LocalGrads(0, 1), g1 = LocalGrads(1, 1);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(buckets[rank], 5);
    EXPECT_EQ(during[rank], 5);  // all started by hooks, none left to Finish
    for (size_t i = 0; i < reduced[rank].size(); ++i) {
      EXPECT_TRUE(torch::allclose(reduced[rank][i], g0[i] + g1[i], 1e-6, 1e-6)) << i;
    }
  }
}

TEST(GradientReducerTest, ReplacedGradientIsPutBackIntoItsBucketWithItsValue) {
  Net net(7);
  LocalCollective local;
  GradientReducer reducer(net.params, &local, 1 << 20);
  net.params[2].mutable_grad() = torch::full({16, 16}, 3.0f);
  net.params[1].mutable_grad() = torch::Tensor();
  reducer.Arm();
  net.Loss(Input(0, 0)).backward();
  ASSERT_TRUE(reducer.Finish().ok());
  const std::vector<torch::Tensor> g = LocalGrads(0, 1);
  EXPECT_TRUE(torch::allclose(net.params[2].grad(), g[2] + 3.0f, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(net.params[1].grad(), g[1], 1e-6, 1e-6));
  reducer.ZeroGrads();
  // Back in the bucket: zeroing the buckets zeroes them.
  EXPECT_EQ(net.params[2].grad().abs().sum().item<float>(), 0.0f);
}

TEST(GradientReducerTest, AFailedBucketFailsFinishWithItsStatus) {
  std::vector<absl::Status> statuses(2);
  OnFakeRanks(
      2,
      [&](int rank, Collective* collective) {
        Net net(7);
        net.params.pop_back();
        GradientReducer reducer(net.params, collective, /*bucket_bytes=*/100);
        reducer.Arm();
        net.Loss(Input(rank, 0)).backward();
        statuses[rank] = reducer.Finish();
        // A failed step leaves zeroed gradients behind once abandoned.
        reducer.Abandon();
        for (auto& p : net.params) EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f);
      },
      absl::Seconds(1), [](FakeGroup* group) { group->FailOperation(1, 1, absl::UnavailableError("link down")); });
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kUnavailable) << statuses[1];
  EXPECT_EQ(statuses[1].message(), "link down");
  // Rank 0 met rank 1's other operations; the one rank 1 skipped times out.
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
}

}  // namespace
}  // namespace trainyard
