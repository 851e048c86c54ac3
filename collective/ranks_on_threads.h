// Tests: the ranks of a group as threads of this process, one per rank,
// each given its own Collective, joined before the call returns.
#ifndef TRAINYARD_COLLECTIVE_RANKS_ON_THREADS_H_
#define TRAINYARD_COLLECTIVE_RANKS_ON_THREADS_H_

#include <functional>

#include "absl/time/time.h"
#include "collective/collective.h"
#include "collective/fake_collective.h"

namespace trainyard {

using RankBody = std::function<void(int rank, Collective* collective)>;

// `body` on `world` ranks over one FakeGroup (in memory, no sockets);
// `faults` (optional) arms the group's failures and delays first.
void OnFakeRanks(int world, const RankBody& body, absl::Duration timeout = absl::Seconds(30),
                 const std::function<void(FakeGroup*)>& faults = nullptr);

// `body` on `world` ranks, each given a HybridCollective
// (hybrid_collective.h) of shard groups of `group_size` ranks, all three of
// its collectives over FakeGroups.
void OnFakeHybridRanks(int world, int group_size, const RankBody& body, absl::Duration timeout = absl::Seconds(30));

// `body` on `world` ranks of a Gloo group over loopback (an in-process
// store). A rank whose group cannot be made fails the test (ADD_FAILURE)
// and does not run `body`.
void OnGlooRanks(int world, const RankBody& body, absl::Duration timeout = absl::Seconds(60));

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_RANKS_ON_THREADS_H_
