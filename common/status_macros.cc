#include "common/status_macros.h"

#include "absl/strings/str_cat.h"

namespace trainyard {

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok() || context.empty()) return status;
  absl::Status annotated(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&annotated](absl::string_view url, const absl::Cord& payload) { annotated.SetPayload(url, payload); });
  return annotated;
}

}  // namespace trainyard
