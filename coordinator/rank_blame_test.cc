#include "coordinator/rank_blame.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

TEST(RankBlameTest, TheOrderOfBlame) {
  EXPECT_EQ(Blame(absl::OkStatus()), -1);
  EXPECT_EQ(Blame(absl::CancelledError("")), 0);
  EXPECT_EQ(Blame(absl::AbortedError("")), 1);
  EXPECT_EQ(Blame(absl::InvalidArgumentError("")), 2);
  EXPECT_EQ(Blame(absl::DataLossError("")), 2);
  EXPECT_EQ(Blame(absl::UnavailableError("")), 3);
  EXPECT_EQ(Blame(absl::DeadlineExceededError("")), 3);
}

TEST(RankBlameTest, TheWorkerThatVanishedIsBlamedBeforeAnErrorOfItsOwnAndAPeersReport) {
  // Rank 0 reports its peer's failure, rank 1 fails on its own, rank 2's
  // worker is gone: rank 2 caused it.
  EXPECT_EQ(CulpritRank({absl::AbortedError("peer"), absl::InvalidArgumentError("own"), absl::UnavailableError("gone"),
                         absl::OkStatus()}),
            2);
  EXPECT_EQ(CulpritRank({absl::AbortedError("peer"), absl::InvalidArgumentError("own"), absl::OkStatus()}), 1);
  EXPECT_EQ(CulpritRank({absl::CancelledError("cancelled"), absl::AbortedError("peer")}), 1);
}

TEST(RankBlameTest, TheLowestRankAmongEqualsAndNoneWhenAllSucceeded) {
  EXPECT_EQ(CulpritRank({absl::OkStatus(), absl::InternalError("a"), absl::InternalError("b")}), 1);
  EXPECT_EQ(CulpritRank({absl::CancelledError(""), absl::CancelledError("")}), 0);
  EXPECT_EQ(CulpritRank({absl::OkStatus(), absl::OkStatus()}), -1);
  EXPECT_EQ(CulpritRank({}), -1);
}

}  // namespace
}  // namespace trainyard
