#include "coordinator/rank_blame.h"

namespace trainyard {

int Blame(const absl::Status& status) {
  if (status.ok()) return -1;
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) return kBlameTransport;
  if (absl::IsCancelled(status)) return 0;
  if (absl::IsAborted(status)) return 1;
  return kBlameOwnError;
}

int CulpritRank(const std::vector<absl::Status>& statuses) {
  int culprit = -1;
  for (int r = 0; r < static_cast<int>(statuses.size()); ++r) {
    if (statuses[r].ok()) continue;
    if (culprit < 0 || Blame(statuses[r]) > Blame(statuses[culprit])) culprit = r;
  }
  return culprit;
}

}  // namespace trainyard
