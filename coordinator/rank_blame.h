// The one rule for which rank a group call's failure is blamed on, used by
// jobs (JobDriver) and interactive sessions (SessionManager) alike: when
// one worker dies, its peers fail too (their collective reports the lost
// peer), and the error a user sees must name the rank that caused it.
//
// Thread-safety: pure functions.
#ifndef TRAINYARD_COORDINATOR_RANK_BLAME_H_
#define TRAINYARD_COORDINATOR_RANK_BLAME_H_

#include <vector>

#include "absl/status/status.h"

namespace trainyard {

// How much a failed rank's error explains the group's failure:
//   3  a transport error (kUnavailable, kDeadlineExceeded): its worker could
//      not be reached or vanished;
//   2  an error of its own (anything else);
//   1  kAborted: a peer's report that another rank failed
//      (CollectiveFailure, AgreeOnOutcome);
//   0  kCancelled: the coordinator cancelled the call after another failed.
// -1 for OK.
inline constexpr int kBlameTransport = 3;
inline constexpr int kBlameOwnError = 2;
int Blame(const absl::Status& status);

// The rank to blame among the ranks' statuses (index = rank): the highest
// Blame, the lowest rank among equals; -1 when every status is OK.
int CulpritRank(const std::vector<absl::Status>& statuses);

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_RANK_BLAME_H_
