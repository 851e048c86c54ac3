// The coordinator's watchdog over a training job's running calls: while a
// chunk (or any fan-out of a training attempt) runs, every `period` the
// driver probes each rank (WorkerService.Probe: its collective's progress,
// and which other ranks' hosts it reaches by TCP). Examine decides from
// the answers whether the group is stuck on a rank that cannot take part:
// a stopped process (SIGSTOP, a hung host: its probe is not answered) or a
// link cut between two ranks that both still reach the coordinator (their
// probes say they cannot reach each other). The driver then drops those
// ranks and aborts the others' collective (ELASTIC), or ends the attempt
// for a restart (RESTART), instead of waiting for the heartbeat or the
// collective timeout. An ELASTIC chunk is judged against a shorter stall
// (WatchdogOptions::elastic_stall).
//
// The order of the timeouts (docs/architecture.md, "Failures"): probe
// answer (1 s) < stall (3 s; ELASTIC's may be shorter) < heartbeat timeout
// (10 s) < collective timeout (60 s).
#ifndef TRAINYARD_COORDINATOR_WATCHDOG_H_
#define TRAINYARD_COORDINATOR_WATCHDOG_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace trainyard {

struct WatchdogOptions {
  // How often the ranks of a running call are probed; zero: never (a silent
  // peer is then found by heartbeats or the collective timeout).
  absl::Duration period = absl::Seconds(1);
  // Every rank that answers must have been blocked in a collective, with
  // nothing completing, for at least this long.
  absl::Duration stall = absl::Seconds(3);
  // The same for an ELASTIC chunk, where a false drop costs a regroup
  // (the dropped worker joins again once it reaches every rank), not a
  // restart, and a silent rank has also not answered for `probe_timeout`:
  // shorter, so that a hang is found in 1 to 2.5 s.
  absl::Duration elastic_stall = absl::Milliseconds(500);
  // A probe's deadline; its TCP connection attempts get half of it.
  absl::Duration probe_timeout = absl::Seconds(1);

  // The rounds of an ELASTIC chunk come every elastic_stall / 2 (at most
  // `period`), each probe with a deadline of elastic_stall (at most
  // `probe_timeout`). The round after the one that first finds a rank
  // silent comes once its peers have been blocked for the stall
  // (UntilStalled; at once when the silent rank's deadline took that
  // long) and does not wait for the silent rank again, so at the 0.5 s
  // default a hang is acted on 0.5 to 0.8 s after it began
  // (docs/reliability.md). Anything else: `period` and `probe_timeout`.
  absl::Duration RoundPeriod(bool elastic_chunk) const {
    return elastic_chunk ? std::min(period, elastic_stall / 2) : period;
  }
  absl::Duration RoundDeadline(bool elastic_chunk) const {
    return elastic_chunk ? std::min(probe_timeout, elastic_stall) : probe_timeout;
  }
};

struct WatchdogVerdict {
  std::vector<int> drop;  // ranks to drop, ascending; empty: nothing to do
  std::string reason;     // why, naming ranks by number
};

// `probes[r]`: rank r's answer (any error: it did not answer in time), its
// `reachable` in rank order. `finished[r]` (when given): rank r's call has
// completed; it takes no part in the others' collective any more and is
// neither evidence of progress nor of a stall. The verdict: nothing unless
// at least one rank still in its call answered and every such rank is
// blocked in a collective stalled for `stall` or more (a rank that
// computes, or progress, means the group is alive). Then the ranks that
// did not answer are dropped, and among the others, while some pair cannot
// reach each other (either direction), the rank with the most unreachable
// peers (the highest among equals). A group that is stalled with every
// rank answering and reaching every other is left to the collective's
// timeout (a slow transfer is not a fault).
WatchdogVerdict Examine(const std::vector<absl::StatusOr<ProbeResponse>>& probes, absl::Duration stall,
                        const std::vector<bool>& finished = {});

// After some ranks' calls have answered (`answered[r]`), one with a
// failure: the ranks still in theirs, when every one of them answered the
// probe blocked in a collective stalled for `stall` or more. They wait for
// ranks that have left the operation (a rank whose step failed on an error
// of its own keeps its connections open, so its peers would wait for the
// collective timeout), and their collective is to be aborted. Empty
// otherwise (one of them computes, progresses or did not answer: Examine's
// case).
// Whether the probes show a rank that did not answer, or a pair of ranks
// that cannot reach each other, while at least one rank answered: what
// Examine would act on once the stall is long enough (the driver then
// probes again at once instead of after its period).
bool Suspect(const std::vector<absl::StatusOr<ProbeResponse>>& probes);

// After a round that found a suspect but no verdict yet: how long until
// every rank that answered has been blocked in a collective for `stall`
// (the probes' stalls as of now; zero: they have). A rank that answered
// while it computed counts as blocking now. The next round comes then:
// its verdict rests on a fresh answer from each of these ranks, not on an
// extrapolation of this one's.
// Ranks marked in `finished` (their calls completed) do not count; with no
// other rank answering, the whole stall.
absl::Duration UntilStalled(const std::vector<absl::StatusOr<ProbeResponse>>& probes, absl::Duration stall,
                            const std::vector<bool>& finished = {});

std::vector<int> BlockedOnAnsweredRanks(const std::vector<absl::StatusOr<ProbeResponse>>& probes,
                                        const std::vector<bool>& answered, absl::Duration stall);

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_WATCHDOG_H_
