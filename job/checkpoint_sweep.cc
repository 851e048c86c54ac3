#include "job/checkpoint_sweep.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace trainyard {

namespace {

std::string RecordPath(const std::string& output_dir) { return output_dir + "/" + kEvaluatedCheckpointsFile; }

}  // namespace

std::vector<int64_t> ReadEvaluatedSteps(const std::string& output_dir, const std::string& job_id,
                                        const std::string& path) {
  std::ifstream in(RecordPath(output_dir));
  if (!in) return {};
  try {
    const nlohmann::json record = nlohmann::json::parse(in);
    if (record.value("job", "") != job_id || record.value("path", "") != path) return {};
    return record.at("steps").get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception&) {
    return {};  // unreadable: evaluated again
  }
}

absl::Status RecordEvaluatedStep(const std::string& output_dir, const std::string& job_id, const std::string& path,
                                 int64_t step) {
  std::vector<int64_t> steps = ReadEvaluatedSteps(output_dir, job_id, path);
  steps.push_back(step);
  const nlohmann::ordered_json record = {{"job", job_id}, {"path", path}, {"steps", steps}};
  return WriteFileAtomically(RecordPath(output_dir), record.dump() + "\n");
}

absl::StatusOr<InferOutcome> InferNextCheckpoint(JobComponents* job, JobCheckpoints* checkpoints, int64_t after_step) {
  const JobSpec& spec = job->spec;
  const std::string& path = spec.restore().path().empty() ? spec.output_dir() : spec.restore().path();
  // A restarted attempt goes on after what the job recorded: rank 0 reads
  // the record, and every rank takes the highest step any rank knows (the
  // lowest of the negated steps).
  int64_t mine = after_step;
  if (job->rank() == 0) {
    for (int64_t step : ReadEvaluatedSteps(spec.output_dir(), job->id(), path)) mine = std::max(mine, step);
  }
  absl::StatusOr<int64_t> lowest = LowestValue(job->collective, -mine);
  TY_RETURN_IF_ERROR(CollectiveFailure(lowest.status()));
  if (-*lowest > after_step) {
    spdlog::info("job {}: checkpoints up to step {} were evaluated by an earlier attempt", job->id(), -*lowest);
  }
  TY_ASSIGN_OR_RETURN(RestoreOutcome restored, checkpoints->RestoreNext(-*lowest));
  InferOutcome out;
  if (!restored.checkpoint.empty()) {
    TY_ASSIGN_OR_RETURN(out, InferSplit(*job, restored.step));
    if (job->rank() == 0) {
      TY_RETURN_IF_ERROR(RecordEvaluatedStep(spec.output_dir(), job->id(), path, restored.step));
    }
    out.checkpoint_step = restored.step;
    spdlog::info("job {}: {} of {} done", job->id(), JobKind_Name(spec.kind()), restored.checkpoint);
  }
  out.passed_over = std::move(restored.passed_over);
  out.after_step = -*lowest;
  return out;
}

}  // namespace trainyard
