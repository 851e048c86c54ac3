// The agreement protocols with ranks as threads: over FakeCollective (and
// its injected failures) and over Gloo on loopback, every rank gets the same
// answer.
#include "collective/agreement.h"

#include <functional>
#include <limits>

#include "collective/ranks_on_threads.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(AgreementTest, AnyRankSeesOneRanksFlagEverywhere) {
  OnFakeRanks(4, [](int rank, Collective* c) {
    EXPECT_EQ(*AnyRank(c, rank == 2), true) << rank;
    EXPECT_EQ(*AnyRank(c, false), false) << rank;
    // Several flags in one all-reduce: a stop on rank 0, a batch left on
    // rank 3 only.
    absl::StatusOr<std::vector<bool>> flags = AnyRank(c, {rank == 0, rank == 3, false});
    ASSERT_THAT(flags.status(), IsOk());
    EXPECT_EQ(*flags, (std::vector<bool>{true, true, false})) << rank;
  });
}

TEST(AgreementTest, AgreeOnOutcomeNamesTheRanksThatFailed) {
  OnFakeRanks(4, [](int rank, Collective* c) {
    EXPECT_THAT(AgreeOnOutcome(c, absl::OkStatus(), "saving"), IsOk());
    const absl::Status mine =
        rank == 1 || rank == 3 ? absl::DataLossError(absl::StrCat("rank ", rank, "'s disk")) : absl::OkStatus();
    const absl::Status agreed = AgreeOnOutcome(c, mine, "saving checkpoint_10");
    if (rank == 1 || rank == 3) {
      EXPECT_EQ(agreed, mine);  // its own error
    } else {
      EXPECT_THAT(agreed, StatusIs(absl::StatusCode::kAborted,
                                   HasSubstr("saving checkpoint_10 failed on rank(s) 1, 3 (their errors are in their "
                                             "logs)")));
    }
  });
}

TEST(AgreementTest, AgreeOnValueRefusesDifferentValuesOnEveryRank) {
  OnFakeRanks(3, [](int rank, Collective* c) {
    EXPECT_THAT(AgreeOnValue(c, 20, "restored step"), IsOkAndHolds(20));
    EXPECT_THAT(AgreeOnValue(c, rank == 0 ? 10 : 20, "restore").status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("restore: the ranks hold different values (10 to 20)")));
    // -1 (no checkpoint) against a step.
    EXPECT_THAT(AgreeOnValue(c, rank == 2 ? -1 : 30, "restore").status(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("(-1 to 30)")));
  });
}

TEST(AgreementTest, LowestValueIsTheSmallestOnEveryRank) {
  OnFakeRanks(3, [](int rank, Collective* c) {
    // A rank that found nothing (the largest value) against steps.
    const int64_t none = std::numeric_limits<int64_t>::max();
    EXPECT_THAT(LowestValue(c, rank == 0 ? none : 100 * (rank + 1)), IsOkAndHolds(200));
    EXPECT_THAT(LowestValue(c, none), IsOkAndHolds(none));
  });
}

TEST(AgreementTest, FindDisagreementNamesTheElementThatDiffersMost) {
  OnFakeRanks(3, [](int rank, Collective* c) {
    torch::Tensor same = torch::arange(6, torch::kDouble) * 0.1;
    absl::StatusOr<std::optional<Disagreement>> none = FindDisagreement(c, same);
    ASSERT_THAT(none.status(), IsOk());
    EXPECT_FALSE(none->has_value());
    torch::Tensor mine = same.clone();
    if (rank == 1) mine[4] = 7.5;   // the largest difference
    if (rank == 2) mine[1] = 0.11;  // a smaller one
    absl::StatusOr<std::optional<Disagreement>> d = FindDisagreement(c, mine);
    ASSERT_THAT(d.status(), IsOk());
    ASSERT_TRUE(d->has_value()) << rank;
    EXPECT_EQ((*d)->index, 4);
    EXPECT_DOUBLE_EQ((*d)->lowest, 0.4);
    EXPECT_DOUBLE_EQ((*d)->highest, 7.5);
    // Float sums compared as doubles: one ulp of a float is a difference.
    torch::Tensor f = torch::full({2}, 1.0f);
    if (rank == 0) f[0] = std::nextafter(1.0f, 2.0f);
    ASSERT_TRUE(FindDisagreement(c, f)->has_value());
  });
}

TEST(AgreementTest, ACollectiveFailureIsReturnedAsIs) {
  OnFakeRanks(
      2,
      [](int rank, Collective* c) {
        absl::StatusOr<bool> any = AnyRank(c, true);
        if (rank == 1) {
          EXPECT_THAT(any.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer gone")));
        }
      },
      absl::Seconds(20), [](FakeGroup* g) { g->FailOperation(1, 0, absl::UnavailableError("peer gone")); });
}

TEST(AgreementTest, WorldOfOneNeedsNoCollective) {
  LocalCollective local;
  EXPECT_THAT(AnyRank(&local, true), IsOkAndHolds(true));
  EXPECT_THAT(AgreeOnOutcome(&local, absl::NotFoundError("x"), "w"), StatusCodeIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(AgreeOnValue(&local, 5, "w"), IsOkAndHolds(5));
  EXPECT_FALSE(FindDisagreement(&local, torch::ones({3}))->has_value());
}

TEST(AgreementTest, OverGlooOnLoopback) {
  constexpr int kWorld = 3;
  OnGlooRanks(
      kWorld,
      [&](int r, Collective* c) {
        EXPECT_THAT(AnyRank(c, r == kWorld - 1), IsOkAndHolds(true));
        EXPECT_THAT(AgreeOnValue(c, 42, "step"), IsOkAndHolds(42));
        EXPECT_THAT(AgreeOnValue(c, r, "step").status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
        const absl::Status agreed = AgreeOnOutcome(c, r == 0 ? absl::InternalError("no") : absl::OkStatus(), "x");
        EXPECT_EQ(agreed.code(), r == 0 ? absl::StatusCode::kInternal : absl::StatusCode::kAborted);
        torch::Tensor v = torch::ones({4}, torch::kDouble);
        if (r == 1) v[2] = 3;
        absl::StatusOr<std::optional<Disagreement>> d = FindDisagreement(c, v);
        ASSERT_THAT(d.status(), IsOk());
        ASSERT_TRUE(d->has_value());
        EXPECT_EQ((*d)->index, 2);
      },
      absl::Seconds(30));
}

}  // namespace
}  // namespace trainyard
