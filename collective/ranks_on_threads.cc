#include "collective/ranks_on_threads.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "collective/gloo_collective.h"
#include "collective/hybrid_collective.h"

namespace trainyard {

namespace {

void OnThreads(int world, const std::function<void(int)>& rank) {
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int r = 0; r < world; ++r) threads.emplace_back(rank, r);
  for (std::thread& t : threads) t.join();
}

}  // namespace

void OnFakeRanks(int world, const RankBody& body, absl::Duration timeout,
                 const std::function<void(FakeGroup*)>& faults) {
  auto group = std::make_shared<FakeGroup>(world, timeout);
  if (faults) faults(group.get());
  OnThreads(world, [&](int r) {
    FakeCollective collective(group, r);
    body(r, &collective);
  });
}

void OnFakeHybridRanks(int world, int group_size, const RankBody& body, absl::Duration timeout) {
  auto whole = std::make_shared<FakeGroup>(world, timeout);
  std::vector<std::shared_ptr<FakeGroup>> groups, replicas;
  for (int g = 0; g < world / group_size; ++g) groups.push_back(std::make_shared<FakeGroup>(group_size, timeout));
  for (int i = 0; i < group_size; ++i) replicas.push_back(std::make_shared<FakeGroup>(world / group_size, timeout));
  OnThreads(world, [&](int r) {
    const HybridPlace p = *PlaceInHybrid(r, world, group_size);
    HybridCollective collective(std::make_unique<FakeCollective>(whole, r),
                                std::make_unique<FakeCollective>(groups[p.group], p.group_rank),
                                std::make_unique<FakeCollective>(replicas[p.replica_set], p.replica_rank));
    body(r, &collective);
  });
}

void OnGlooRanks(int world, const RankBody& body, absl::Duration timeout) {
  std::shared_ptr<Store> store = GlooCollective::NewInProcessStore();
  OnThreads(world, [&](int r) {
    absl::StatusOr<std::unique_ptr<GlooCollective>> gloo =
        GlooCollective::Create(r, world, store, "127.0.0.1", timeout);
    if (!gloo.ok()) {
      ADD_FAILURE() << "rank " << r << " of " << world << ": " << gloo.status();
      return;
    }
    body(r, gloo->get());
  });
}

}  // namespace trainyard
