// The one policy for what follows a job attempt that ended without
// finishing the job, used wherever an attempt ends: the driver of a running
// attempt (JobDriver) and a coordinator that restarts while attempts were
// running (Coordinator::Load).
//
// Thread-safety: pure functions.
#ifndef TRAINYARD_COORDINATOR_ATTEMPT_POLICY_H_
#define TRAINYARD_COORDINATOR_ATTEMPT_POLICY_H_

#include <string>

#include "absl/status/status.h"
#include "proto/job_service.pb.h"

namespace trainyard {

// Whether another attempt may succeed where this status ended one: a lost
// worker or a broken collective (kUnavailable, kDeadlineExceeded,
// kAborted) may; a bad spec, divergence or a NaN loss (anything else) would
// fail again.
bool IsRetryable(const absl::Status& status);

struct NextAttempt {
  JobState state;      // RESTARTING or FAILED
  std::string reason;  // `why`, then what follows
  int restarts;        // the job's restarts after this decision
};

// After an attempt that ended for `why`, retryably: RESTARTING ("<why>;
// restart <k> of <max> from <checkpoint or scratch>") while fewer than
// `max_restarts` restarts were made, else FAILED ("<why> (no restarts left:
// max_restarts <max>)").
NextAttempt AfterRetryableEnd(const std::string& why, int restarts, int max_restarts,
                              const std::string& latest_checkpoint);

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_ATTEMPT_POLICY_H_
