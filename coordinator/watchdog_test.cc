#include "coordinator/watchdog.h"

#include "gtest/gtest.h"

namespace trainyard {
namespace {

// A rank's answer: blocked (or not) for `stalled` seconds; reaches the
// ranks whose entry in `reach` is '1'.
absl::StatusOr<ProbeResponse> Answer(bool waiting, double stalled, const std::string& reach) {
  ProbeResponse p;
  p.set_collective_waiting(waiting);
  p.set_stalled_seconds(stalled);
  for (char c : reach) p.add_reachable(c == '1');
  return p;
}

const absl::Duration kStall = absl::Seconds(3);

TEST(WatchdogTest, ASilentRankOfAStalledGroupIsDropped) {
  const WatchdogVerdict v =
      Examine({Answer(true, 3.5, "111"), absl::DeadlineExceededError("probe"), Answer(true, 4.0, "111")}, kStall);
  EXPECT_EQ(v.drop, std::vector<int>({1}));
  EXPECT_EQ(v.reason,
            "rank 1 did not answer the watchdog's probe (the other ranks were blocked in a collective for 3.5 s)");
}

TEST(WatchdogTest, NothingWhileARankComputesOrTheStallIsShort) {
  // Rank 2 is not in a collective: it computes (a straggler), the others
  // wait for it.
  EXPECT_TRUE(Examine({Answer(true, 9, "111"), absl::DeadlineExceededError("probe"), Answer(false, 0, "111")}, kStall)
                  .drop.empty());
  // Blocked, but not for long enough.
  EXPECT_TRUE(Examine({Answer(true, 2.9, "11"), absl::DeadlineExceededError("probe")}, kStall).drop.empty());
  // Nobody answered: the coordinator's own link, not the group's.
  EXPECT_TRUE(Examine({absl::DeadlineExceededError("probe"), absl::UnavailableError("probe")}, kStall).drop.empty());
  // Stalled, every rank answers and reaches every other: a slow transfer,
  // left to the collective's timeout.
  EXPECT_TRUE(
      Examine({Answer(true, 30, "111"), Answer(true, 30, "111"), Answer(true, 30, "111")}, kStall).drop.empty());
}

// Ranks 1 and 3 answered their calls (one failed on an error of its own,
// its connections still open); ranks 0 and 2, blocked for 4 s, wait for
// them.
TEST(WatchdogTest, RanksBlockedOnRanksWhoseCallsEndedAreAborted) {
  const std::vector<bool> answered = {false, true, false, true};
  const std::vector<absl::StatusOr<ProbeResponse>> stalled = {Answer(true, 4, "1111"), Answer(false, 0, "1111"),
                                                              Answer(true, 3.5, "1111"),
                                                              absl::UnavailableError("the worker is gone")};
  EXPECT_EQ(BlockedOnAnsweredRanks(stalled, answered, kStall), std::vector<int>({0, 2}));
  // One of them computes, or its stall is short, or it did not answer:
  // nothing.
  for (const absl::StatusOr<ProbeResponse>& rank2 :
       {absl::StatusOr<ProbeResponse>(Answer(false, 0, "1111")), absl::StatusOr<ProbeResponse>(Answer(true, 2, "1111")),
        absl::StatusOr<ProbeResponse>(absl::DeadlineExceededError("probe"))}) {
    std::vector<absl::StatusOr<ProbeResponse>> probes = stalled;
    probes[2] = rank2;
    EXPECT_TRUE(BlockedOnAnsweredRanks(probes, answered, kStall).empty());
  }
  // Every call still running: Examine's case.
  EXPECT_TRUE(BlockedOnAnsweredRanks({Answer(true, 9, "11"), Answer(true, 9, "11")}, {false, false}, kStall).empty());
}

TEST(WatchdogTest, ACutLinkDropsTheHigherRankOfThePair) {
  // Ranks 1 and 3 cannot reach each other (both directions); 0 and 2 reach
  // everyone.
  const WatchdogVerdict v = Examine(
      {Answer(true, 5, "1111"), Answer(true, 5, "1110"), Answer(true, 5, "1111"), Answer(true, 5, "1011")}, kStall);
  EXPECT_EQ(v.drop, std::vector<int>({3}));
  EXPECT_EQ(v.reason,
            "rank 3 and rank 1 cannot reach each other (the other ranks were blocked in a collective for 5.0 s)");
  // One direction is enough.
  EXPECT_EQ(Examine({Answer(true, 5, "10"), Answer(true, 5, "11")}, kStall).drop, std::vector<int>({1}));
}

TEST(WatchdogTest, AHostCutOffFromSeveralGoesFirst) {
  // Rank 0 reaches nobody; the others reach each other: only rank 0 goes.
  const WatchdogVerdict v = Examine(
      {Answer(true, 4, "1000"), Answer(true, 4, "0111"), Answer(true, 4, "0111"), Answer(true, 4, "0111")}, kStall);
  EXPECT_EQ(v.drop, std::vector<int>({0}));
  EXPECT_EQ(
      v.reason,
      "rank 0 and ranks 1, 2, 3 cannot reach each other (the other ranks were blocked in a collective for 4.0 s)");
}

TEST(WatchdogTest, SilentAndCutTogether) {
  const WatchdogVerdict v = Examine(
      {Answer(true, 4, "1101"), Answer(true, 4, "1111"), absl::DeadlineExceededError("probe"), Answer(true, 4, "0111")},
      kStall);
  EXPECT_EQ(v.drop, std::vector<int>({2, 3}));
  EXPECT_EQ(v.reason,
            "rank 2 did not answer the watchdog's probe; rank 3 and rank 0 cannot reach each other (the other ranks "
            "were blocked in a collective for 4.0 s)");
}

TEST(WatchdogTest, ASuspectIsASilentRankOrACutPairWhileSomeoneAnswers) {
  // A rank silent, others answering (whatever their stall): suspect.
  EXPECT_TRUE(Suspect({Answer(true, 0.1, "111"), absl::DeadlineExceededError("probe"), Answer(false, 0, "111")}));
  // A pair that cannot reach each other, one direction: suspect.
  EXPECT_TRUE(Suspect({Answer(false, 0, "11"), Answer(false, 0, "01")}));
  // Everyone answers and reaches everyone: not.
  EXPECT_FALSE(Suspect({Answer(true, 30, "111"), Answer(true, 30, "111"), Answer(true, 30, "111")}));
  // Nobody answered: the coordinator's own link, not a rank.
  EXPECT_FALSE(Suspect({absl::DeadlineExceededError("probe"), absl::UnavailableError("probe")}));
}

// A rank whose call has completed (it regrouped; its peers still move state
// on a rank that hung) is neither progress nor stall: the silent rank is
// dropped once the ranks still in their calls have stalled long enough.
TEST(WatchdogTest, ARankWhoseCallCompletedNeitherKeepsAliveNorStalls) {
  const std::vector<absl::StatusOr<ProbeResponse>> probes = {Answer(true, 3.5, "1111"),
                                                             absl::DeadlineExceededError("probe"),
                                                             Answer(false, 0, "1111"), Answer(true, 4.0, "1111")};
  // Without knowing that rank 2 is done, it looks like a rank computing.
  EXPECT_TRUE(Examine(probes, kStall).drop.empty());
  const WatchdogVerdict v = Examine(probes, kStall, {false, false, true, false});
  EXPECT_EQ(v.drop, std::vector<int>({1}));
  EXPECT_EQ(v.reason,
            "rank 1 did not answer the watchdog's probe (the other ranks were blocked in a collective for 3.5 s)");
  // Every rank that answered is done: no stall to judge by.
  EXPECT_TRUE(
      Examine({Answer(false, 0, "11"), absl::DeadlineExceededError("probe")}, kStall, {true, false}).drop.empty());
  // ... and the next round's wait is the ranks' still in their calls.
  EXPECT_EQ(UntilStalled(probes, absl::Seconds(4), {false, false, true, false}), absl::Milliseconds(500));
}

// After a suspect round, the next comes when every rank that answered has
// been blocked for the stall: the least blocked one decides; one that
// computed counts from now; silent ranks do not count.
TEST(WatchdogTest, TheNextRoundAfterASuspectComesWhenTheOthersHaveStalledLongEnough) {
  const absl::Duration stall = absl::Milliseconds(500);
  EXPECT_EQ(
      UntilStalled({Answer(true, 0.2, "111"), absl::DeadlineExceededError("probe"), Answer(true, 0.35, "111")}, stall),
      absl::Milliseconds(300));
  // Blocked long enough already: at once.
  EXPECT_EQ(UntilStalled({Answer(true, 0.7, "11"), absl::DeadlineExceededError("probe")}, stall), absl::ZeroDuration());
  // A rank that computes: the whole stall.
  EXPECT_EQ(UntilStalled({Answer(true, 0.7, "111"), Answer(false, 0, "111"), absl::UnavailableError("gone")}, stall),
            stall);
  // No rank in its call answered: nothing to judge a stall by; the whole
  // stall (not a round at once, again and again).
  EXPECT_EQ(UntilStalled({absl::DeadlineExceededError("probe")}, stall), stall);
  EXPECT_EQ(UntilStalled({Answer(false, 0, "11"), absl::DeadlineExceededError("probe")}, stall, {true, false}), stall);
}

// The driver judges an ELASTIC chunk against elastic_stall: the same
// answers that are no verdict at 3 s drop the silent rank at 0.5 s.
TEST(WatchdogTest, TheElasticStallDropsASilentRankSooner) {
  const WatchdogOptions defaults;
  EXPECT_EQ(defaults.stall, absl::Seconds(3));
  EXPECT_EQ(defaults.elastic_stall, absl::Milliseconds(500));
  const std::vector<absl::StatusOr<ProbeResponse>> probes = {
      Answer(true, 0.6, "111"), absl::DeadlineExceededError("probe"), Answer(true, 0.7, "111")};
  EXPECT_TRUE(Examine(probes, defaults.stall).drop.empty());
  const WatchdogVerdict v = Examine(probes, defaults.elastic_stall);
  EXPECT_EQ(v.drop, std::vector<int>({1}));
  EXPECT_EQ(v.reason,
            "rank 1 did not answer the watchdog's probe (the other ranks were blocked in a collective for 0.6 s)");
}

// An ELASTIC chunk's rounds are paced by elastic_stall (half of it apart,
// its probes due within it), capped by the period and probe deadline that
// pace everything else.
TEST(WatchdogTest, AnElasticChunkIsProbedAtThePaceOfTheElasticStall) {
  WatchdogOptions o;
  EXPECT_EQ(o.RoundPeriod(false), absl::Seconds(1));
  EXPECT_EQ(o.RoundDeadline(false), absl::Seconds(1));
  EXPECT_EQ(o.RoundPeriod(true), absl::Milliseconds(250));
  EXPECT_EQ(o.RoundDeadline(true), absl::Milliseconds(500));
  o.elastic_stall = absl::Seconds(3);
  EXPECT_EQ(o.RoundPeriod(true), absl::Seconds(1));
  EXPECT_EQ(o.RoundDeadline(true), absl::Seconds(1));
  o.elastic_stall = absl::Milliseconds(100);
  o.period = absl::Seconds(2);
  EXPECT_EQ(o.RoundPeriod(true), absl::Milliseconds(50));
  EXPECT_EQ(o.RoundDeadline(true), absl::Milliseconds(100));
  EXPECT_EQ(o.RoundPeriod(false), absl::Seconds(2));
}

}  // namespace
}  // namespace trainyard
