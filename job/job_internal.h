// Small helpers shared by the files of TrainingJob (internal to job/).
#ifndef TRAINYARD_JOB_JOB_INTERNAL_H_
#define TRAINYARD_JOB_JOB_INTERNAL_H_

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainyard {
namespace job_internal {

// A collective's failure seen by a live rank is a consequence (a peer died
// or stalled), not a reason to blame this rank's transport.
inline absl::Status CollectiveFailure(const absl::Status& s) {
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
    return absl::AbortedError(absl::StrCat("collective failed (a peer left or stalled): ", s.message()));
  }
  return s;
}

inline bool Raised(const std::atomic<bool>* flag) { return flag != nullptr && flag->load(); }

}  // namespace job_internal
}  // namespace trainyard

#endif  // TRAINYARD_JOB_JOB_INTERNAL_H_
