#include "trainer/parameter_gatherer.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collective/fake_collective.h"
#include "collective/gloo_collective.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/parameter_storage.h"
#include "trainer/sharded_optimizer.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// Seven parameters of uneven sizes; parameter i's true value is
// 1000 * i + 0, 1, 2, ...
const std::vector<std::vector<int64_t>> kShapes = {{5}, {3, 4}, {10}, {2}, {6, 2}, {1}, {9}};

torch::Tensor TrueValue(size_t i) {
  const std::vector<int64_t>& shape = kShapes[i];
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return (torch::arange(n, torch::kFloat) + 1000.0 * static_cast<double>(i)).view(shape);
}

// Rank `rank`'s parameters after its update: its shard true, every other
// parameter -1 (stale).
NamedTensors RankParams(const std::vector<size_t>& bounds, int rank) {
  NamedTensors params;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const bool mine = i >= bounds[rank] && i < bounds[rank + 1];
    params.emplace_back("p" + std::to_string(i), mine ? TrueValue(i) : torch::full(kShapes[i], -1.0f));
  }
  return params;
}

bool Whole(const NamedTensors& params, size_t i) { return torch::equal(params[i].second, TrueValue(i)); }

// Units out of the parameters' order, one spanning two ranks' shards.
const std::vector<std::vector<size_t>> kUnits = {{2, 0}, {1}, {3, 5, 4}, {6}};

void OnFakeRanks(int world, const std::function<void(int, Collective*, FakeGroup*)>& body) {
  auto group = std::make_shared<FakeGroup>(world, absl::Seconds(30));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      FakeCollective collective(group, r);
      body(r, &collective, group.get());
    });
  }
  for (auto& t : threads) t.join();
}

std::vector<size_t> Bounds(int world) {
  NamedTensors shapes;
  for (size_t i = 0; i < kShapes.size(); ++i) shapes.emplace_back("p", torch::empty(kShapes[i]));
  return ShardBoundaries(shapes, world);
}

TEST(ParameterGathererTest, EachUnitIsWholeOnlyOnceItsTurnComes) {
  for (int world : {2, 3}) {
    const std::vector<size_t> bounds = Bounds(world);
    OnFakeRanks(world, [&](int rank, Collective* collective, FakeGroup*) {
      NamedTensors params = RankParams(bounds, rank);
      auto gatherer = ParameterGatherer::Create(params, kUnits, bounds, collective, /*prefetch=*/2);
      ASSERT_TRUE(gatherer.ok()) << gatherer.status();
      ParameterGatherer& g = **gatherer;
      EXPECT_FALSE(g.pending());
      ASSERT_TRUE(g.Start().ok());
      EXPECT_TRUE(g.pending());
      g.Before(0);
      EXPECT_TRUE(Whole(params, 0) && Whole(params, 2)) << "rank " << rank;
      // Unit 3 (parameter 6, the last rank's) is not copied before its turn.
      if (rank != world - 1) {
        EXPECT_FALSE(Whole(params, 6)) << "rank " << rank;
      }
      g.Before(0);  // again: nothing to do
      g.Before(2);  // units 1 and 2 in order
      for (size_t i : {0, 1, 2, 3, 4, 5}) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
      ASSERT_TRUE(g.Finish().ok());
      EXPECT_FALSE(g.pending());
      for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
      // One all-gather per unit per step: a second step gathers again.
      const int64_t before = static_cast<FakeCollective*>(collective)->operations();
      for (size_t i = 0; i < kShapes.size(); ++i) {
        if (i < bounds[rank] || i >= bounds[rank + 1]) params[i].second.fill_(-1);
      }
      ASSERT_TRUE(g.Start().ok());
      g.Before(3);  // the last unit at once: every earlier one first
      EXPECT_EQ(static_cast<FakeCollective*>(collective)->operations() - before, 4);
      for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
      EXPECT_GT(g.TakeWaitSeconds(), 0.0);
      EXPECT_EQ(g.TakeWaitSeconds(), 0.0);
    });
  }
}

// Units larger than keep_elements gather through buffers of their own,
// freed when the unit completes: between steps only the small units'
// buffers are held.
TEST(ParameterGathererTest, LargeUnitsBuffersAreNotKept) {
  const std::vector<size_t> bounds = Bounds(2);
  OnFakeRanks(2, [&](int rank, Collective* collective, FakeGroup*) {
    // Unit sizes: 15, 12, 15, 9 elements; slot k % 2 carries unit k.
    for (int64_t keep : {int64_t{12}, int64_t{1} << 20}) {
      NamedTensors params = RankParams(bounds, rank);
      auto g = ParameterGatherer::Create(params, kUnits, bounds, collective, /*prefetch=*/2,
                                         /*shard_parameters=*/false, keep);
      ASSERT_TRUE(g.ok()) << g.status();
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE((*g)->Start().ok());
        ASSERT_TRUE((*g)->Finish().ok());
        for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
      }
      if (keep == 12) {
        // Units 0 and 2 (slot 0) are larger: only slot 1's buffers, for
        // units 1 and 3 (receive 12, send at most 12).
        EXPECT_GE((*g)->buffer_elements(), 13) << "rank " << rank;
        EXPECT_LE((*g)->buffer_elements(), 24) << "rank " << rank;
      } else {
        EXPECT_GE((*g)->buffer_elements(), 15 + 12 + 2) << "rank " << rank;
      }
    }
  });
}

TEST(ParameterGathererTest, GlooRanksGatherWithPrefetchOfOne) {
  const std::vector<size_t> bounds = Bounds(2);
  std::shared_ptr<Store> store = GlooCollective::NewInProcessStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto gloo = GlooCollective::Create(rank, 2, store, "127.0.0.1", absl::Seconds(30));
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      NamedTensors params = RankParams(bounds, rank);
      auto g = ParameterGatherer::Create(params, kUnits, bounds, gloo->get(), /*prefetch=*/1);
      ASSERT_TRUE(g.ok()) << g.status();
      for (int step = 0; step < 3; ++step) {
        ASSERT_TRUE((*g)->Start().ok());
        // A collective of the caller's between the started gathers, as the
        // trainer's token count is.
        std::vector<torch::Tensor> count = {torch::ones({1})};
        ASSERT_TRUE((*gloo)->AllReduce(count, ReduceOp::kSum).ok());
        EXPECT_EQ(count[0].item<float>(), 2.0f);
        for (int u = 0; u < 4; ++u) (*g)->Before(u);
        ASSERT_TRUE((*g)->Finish().ok());
        for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(ParameterGathererTest, AFailedGatherThrowsFromBeforeAndLeavesTheParametersStale) {
  const std::vector<size_t> bounds = Bounds(2);
  OnFakeRanks(2, [&](int rank, Collective* collective, FakeGroup* group) {
    NamedTensors params = RankParams(bounds, rank);
    auto g = ParameterGatherer::Create(params, kUnits, bounds, collective, /*prefetch=*/1);
    ASSERT_TRUE(g.ok()) << g.status();
    // Each rank's third operation, unit 2's gather, started (prefetched)
    // once unit 1 is whole, fails; Before(2) waits for it.
    group->FailOperation(rank, 2, absl::UnavailableError("peer 1 is gone"));
    ASSERT_TRUE((*g)->Start().ok());
    (*g)->Before(1);
    try {
      (*g)->Before(2);
      ADD_FAILURE() << "Before(2) did not throw";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("all-gather of parameter unit 2"));
      EXPECT_THAT(e.what(), HasSubstr("peer 1 is gone"));
    }
    EXPECT_EQ((*g)->status().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE((*g)->stale());
    EXPECT_FALSE((*g)->pending());
    EXPECT_THROW((*g)->Before(3), std::runtime_error);
    EXPECT_EQ((*g)->Finish().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ((*g)->Start().code(), absl::StatusCode::kUnavailable);
  });
}

TEST(ParameterGathererTest, AbandonedGathersAreMadeWholeByTheNextStartAndFinish) {
  const std::vector<size_t> bounds = Bounds(2);
  OnFakeRanks(2, [&](int rank, Collective* collective, FakeGroup*) {
    NamedTensors params = RankParams(bounds, rank);
    auto g = ParameterGatherer::Create(params, kUnits, bounds, collective);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE((*g)->Start().ok());
    (*g)->Abandon();
    EXPECT_TRUE((*g)->stale());
    ASSERT_TRUE((*g)->Start().ok());
    ASSERT_TRUE((*g)->Finish().ok());
    EXPECT_FALSE((*g)->stale());
    for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
  });
}

// PARAMETERS mode: parameters that require grad, as a model's do.
NamedTensors ShardedRankParams(const std::vector<size_t>& bounds, int rank) {
  NamedTensors params = RankParams(bounds, rank);
  for (auto& [name, p] : params) p.requires_grad_(true);
  return params;
}

bool Released(const NamedTensors& params, size_t i) { return StorageReleased(params[i].second); }

// One pass along the schedule: forward gathers each unit not whole and
// releases it after (but the first and the last), backward gathers units
// n-2 .. 1 again; ReleaseAll leaves each rank its own parameters only, and
// GatherAll makes everything whole, with the owners' values.
TEST(ParameterGathererTest, ParametersModeGathersAndReleasesAlongThePass) {
  const int world = 3;
  const std::vector<size_t> bounds = Bounds(world);
  OnFakeRanks(world, [&](int rank, Collective* collective, FakeGroup*) {
    auto* counting = static_cast<FakeCollective*>(collective);
    NamedTensors params = ShardedRankParams(bounds, rank);
    auto created = ParameterGatherer::Create(params, kUnits, bounds, collective, /*prefetch=*/2,
                                             /*shard_parameters=*/true);
    ASSERT_TRUE(created.ok()) << created.status();
    ParameterGatherer& g = **created;
    auto mine = [&](size_t i) { return i >= bounds[rank] && i < bounds[rank + 1]; };
    EXPECT_EQ(g.gathered_elements(), g.others_elements());
    g.ReleaseAll();
    EXPECT_EQ(g.gathered_elements(), 0);
    for (size_t i = 0; i < kShapes.size(); ++i)
      EXPECT_EQ(Released(params, i), !mine(i)) << "rank " << rank << " p" << i;
    // Outside a pass a released unit is refused, not read.
    EXPECT_THROW(g.Before(1), std::runtime_error);
    g.TakePeakGatheredElements();

    const int64_t before = counting->operations();
    ASSERT_TRUE(g.BeginPass().ok());
    g.Before(0);
    EXPECT_TRUE(Whole(params, 0) && Whole(params, 2)) << "rank " << rank;
    g.After(0);  // the embedding stays
    EXPECT_TRUE(g.whole(0));
    g.Before(1);
    EXPECT_TRUE(Whole(params, 1));
    g.After(1);
    EXPECT_FALSE(g.whole(1));
    EXPECT_EQ(Released(params, 1), !mine(1));
    g.Before(2);
    g.After(2);
    g.Before(3);
    g.After(3);  // the last unit: backward reads it next
    EXPECT_TRUE(g.whole(3) && Whole(params, 6));
    // The most held at once in forward: the embedding's unit and one other.
    auto others = [&](int u) {
      int64_t n = 0;
      for (size_t i : kUnits[u]) n += mine(i) ? 0 : params[i].second.numel();
      return n;
    };
    EXPECT_EQ(g.TakePeakGatheredElements(), others(0) + std::max({others(1), others(2), others(3)})) << "rank " << rank;
    g.BeforeBackward(3);
    g.BeforeBackward(2);
    for (size_t i : {3, 4, 5}) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
    g.BeforeBackward(1);
    EXPECT_TRUE(Whole(params, 1));
    // 4 units forward, units 2 and 1 again in backward.
    EXPECT_EQ(counting->operations() - before, 6);
    g.ReleaseAll();
    EXPECT_EQ(g.gathered_elements(), 0);
    for (size_t i = 0; i < kShapes.size(); ++i)
      EXPECT_EQ(Released(params, i), !mine(i)) << "rank " << rank << " p" << i;

    ASSERT_TRUE(g.GatherAll().ok());
    EXPECT_EQ(counting->operations() - before, 10);
    EXPECT_EQ(g.gathered_elements(), g.others_elements());
    for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
    ASSERT_TRUE(g.GatherAll().ok());  // whole already: no collective
    EXPECT_EQ(counting->operations() - before, 10);
  });
}

// A unit is released once autograd has accumulated the gradients of all
// of its parameters (the embedding, unit 0, stays whole), and the values
// autograd saved in forward read back gathered in backward.
TEST(ParameterGathererTest, ParametersModeReleasesAUnitOnceItsGradientsAreMade) {
  const std::vector<size_t> bounds = Bounds(2);
  OnFakeRanks(2, [&](int rank, Collective* collective, FakeGroup*) {
    NamedTensors params = ShardedRankParams(bounds, rank);
    auto created = ParameterGatherer::Create(params, kUnits, bounds, collective, /*prefetch=*/1,
                                             /*shard_parameters=*/true);
    ASSERT_TRUE(created.ok()) << created.status();
    ParameterGatherer& g = **created;
    g.ReleaseAll();
    ASSERT_TRUE(g.BeginPass().ok());
    torch::Tensor loss = torch::zeros({});
    for (int u = 0; u < 4; ++u) {
      g.Before(u);
      // Each parameter squared: backward reads the saved parameter.
      for (size_t i : kUnits[u]) loss = loss + params[i].second.pow(2).sum();
    }
    for (int u = 3; u >= 1; --u) g.BeforeBackward(u);
    loss.backward();
    EXPECT_TRUE(g.whole(0));
    for (int u = 1; u < 4; ++u) EXPECT_FALSE(g.whole(u)) << "rank " << rank << " unit " << u;
    for (size_t i = 0; i < kShapes.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i].second.grad(), 2 * TrueValue(i))) << "rank " << rank << " p" << i;
    }
    g.ReleaseAll();
  });
}

TEST(ParameterGathererTest, ParametersModeRefusesSharedStorage) {
  const std::vector<size_t> bounds = Bounds(2);
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(1));
  FakeCollective collective(group, 0);
  NamedTensors params = ShardedRankParams(bounds, 0);
  params[3].second = params[0].second.detach().narrow(0, 0, 2).requires_grad_(true);
  auto shared = ParameterGatherer::Create(params, kUnits, bounds, &collective, 2, /*shard_parameters=*/true);
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shared.status().message(), HasSubstr("parameter p3 does not require grad or shares another's storage"));
}

// Parameters released before the gatherer is made (a model built holding
// only this rank's): counted as not gathered, every unit as not whole (as
// after ReleaseAll, so the ranks' gathers pair up), and GatherAll brings
// them back at their full size with the owners' values. Released memory of this
// rank's own, or without PARAMETERS, is refused.
TEST(ParameterGathererTest, ParametersReleasedBeforehandAreGatheredAtTheirSize) {
  const int world = 3;
  const std::vector<size_t> bounds = Bounds(world);
  OnFakeRanks(world, [&](int rank, Collective* collective, FakeGroup*) {
    auto mine = [&](size_t i) { return i >= bounds[rank] && i < bounds[rank + 1]; };
    NamedTensors params = ShardedRankParams(bounds, rank);
    for (size_t i = 0; i < kShapes.size(); ++i) {
      if (!mine(i)) ReleaseStorage(params[i].second);
    }
    auto created = ParameterGatherer::Create(params, kUnits, bounds, collective, /*prefetch=*/2,
                                             /*shard_parameters=*/true);
    ASSERT_TRUE(created.ok()) << created.status();
    ParameterGatherer& g = **created;
    EXPECT_EQ(g.gathered_elements(), 0) << "rank " << rank;
    EXPECT_EQ(g.TakePeakGatheredElements(), 0) << "rank " << rank;
    for (size_t u = 0; u < kUnits.size(); ++u) EXPECT_FALSE(g.whole(static_cast<int>(u))) << "rank " << rank;
    ASSERT_TRUE(g.GatherAll().ok());
    EXPECT_EQ(g.gathered_elements(), g.others_elements());
    for (size_t i = 0; i < kShapes.size(); ++i) EXPECT_TRUE(Whole(params, i)) << "rank " << rank << " p" << i;
    g.ReleaseAll();
  });
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(1));
  FakeCollective collective(group, 0);
  const std::vector<size_t> two = Bounds(2);
  NamedTensors own = ShardedRankParams(two, 0);
  ReleaseStorage(own[0].second);
  EXPECT_THAT(ParameterGatherer::Create(own, kUnits, two, &collective, 2, /*shard_parameters=*/true).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p0 holds no memory, and it is this rank's own")));
  NamedTensors other = ShardedRankParams(two, 0);
  ReleaseStorage(other[6].second);
  EXPECT_THAT(ParameterGatherer::Create(other, kUnits, two, &collective, 2, /*shard_parameters=*/false).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only PARAMETERS sharding gathers it")));
}

TEST(ParameterGathererTest, UnitsMustCoverEveryParameterOnce) {
  const std::vector<size_t> bounds = Bounds(2);
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(1));
  FakeCollective collective(group, 0);
  NamedTensors params = RankParams(bounds, 0);
  auto missing = ParameterGatherer::Create(params, {{0, 1, 2}, {3, 4, 5}}, bounds, &collective);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("parameter p6 is in no unit"));
  auto twice = ParameterGatherer::Create(params, {{0, 1, 2}, {2, 3, 4, 5, 6}}, bounds, &collective);
  EXPECT_THAT(twice.status().message(), HasSubstr("parameter p2 is in more than one unit"));
  auto beyond = ParameterGatherer::Create(params, {{0, 1, 2, 3, 4, 5, 6, 7}}, bounds, &collective);
  EXPECT_THAT(beyond.status().message(), HasSubstr("names parameter 7 of 7"));
  auto bad_bounds = ParameterGatherer::Create(params, kUnits, {0, 7}, &collective);
  EXPECT_THAT(bad_bounds.status().message(), HasSubstr("2 shard bounds for 2 ranks"));
}

}  // namespace
}  // namespace trainyard
