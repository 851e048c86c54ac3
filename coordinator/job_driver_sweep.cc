// JobDriver's continuous evaluation (restore { mode: ALL }): every
// checkpoint of a directory evaluated once, in step order, waiting for new
// ones.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/job_driver.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::Status JobDriver::RunEveryCheckpoint(std::string* final_reason) {
  const JobSpec& spec = plan_.spec;
  const std::string& path = spec.restore().path().empty() ? spec.output_dir() : spec.restore().path();
  const absl::Duration wait = absl::Seconds(spec.restore().wait_seconds());
  spdlog::info("job {}: {} of every checkpoint under {} on {} split {}{}", plan_.job_id, JobKind_Name(spec.kind()),
               path, spec.task(), spec.inference().split(),
               wait > absl::ZeroDuration()
                   ? absl::StrCat(", waiting up to ", absl::FormatDuration(wait), " for each new one")
                   : "");
  std::vector<int64_t> evaluated;
  std::set<std::string> passed_over;
  int64_t after = -1, resumed_after = -1, examples = 0;
  std::string output;
  absl::Time idle_since = clock_->Now();
  for (;;) {
    std::vector<InferResponse> inferred;
    TY_RETURN_IF_ERROR(InferOnEveryRank(after, &inferred));
    if (evaluated.empty()) resumed_after = inferred[0].after_step();
    passed_over.insert(inferred[0].passed_over().begin(), inferred[0].passed_over().end());
    const int64_t step = inferred[0].checkpoint_step();
    if (step >= 0) {
      examples = RecordInference(step, inferred);
      output = inferred[0].output();
      evaluated.push_back(step);
      after = step;
      idle_since = clock_->Now();
      continue;
    }
    // None left: look again, about every second, until none has come for
    // `wait` (the training job writing `path` has ended, or stalled).
    const absl::Duration idle = clock_->Now() - idle_since;
    if (idle >= wait) break;
    TY_RETURN_IF_ERROR(PauseUnlessStopped(std::min(kCheckpointPollInterval, wait - idle)));
  }
  if (evaluated.empty() && resumed_after < 0) {
    return absl::FailedPreconditionError(absl::StrCat("restore: no checkpoint to evaluate was found under ", path,
                                                      " (mode ALL", wait > absl::ZeroDuration() ? ", waited " : "",
                                                      wait > absl::ZeroDuration() ? absl::FormatDuration(wait) : "",
                                                      ")"));
  }
  *final_reason = absl::StrCat(evaluated.size(), " checkpoint(s) of ", path, " evaluated",
                               evaluated.empty() ? "" : absl::StrCat(": steps ", absl::StrJoin(evaluated, ", ")));
  if (resumed_after >= 0) absl::StrAppend(final_reason, " (up to step ", resumed_after, " by earlier attempts)");
  if (!evaluated.empty()) {
    absl::StrAppend(final_reason, "; ", examples, " example(s) decoded each; the last predictions in ", output);
  }
  if (!passed_over.empty()) absl::StrAppend(final_reason, "; ", absl::StrJoin(passed_over, "; "));
  return absl::OkStatus();
}

}  // namespace trainyard
