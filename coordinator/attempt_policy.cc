#include "coordinator/attempt_policy.h"

#include "absl/strings/str_cat.h"

namespace trainyard {

bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsAborted(status);
}

NextAttempt AfterRetryableEnd(const std::string& why, int restarts, int max_restarts,
                              const std::string& latest_checkpoint) {
  if (restarts < max_restarts) {
    return {RESTARTING,
            absl::StrCat(why, "; restart ", restarts + 1, " of ", max_restarts, " from ",
                         latest_checkpoint.empty() ? "scratch" : latest_checkpoint),
            restarts + 1};
  }
  return {FAILED, absl::StrCat(why, " (no restarts left: max_restarts ", max_restarts, ")"), restarts};
}

}  // namespace trainyard
