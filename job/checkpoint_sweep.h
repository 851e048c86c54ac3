// restore { mode: ALL } (T5X's RestoreCheckpointConfig mode 'all'): an
// EVALUATION or INFERENCE job goes through every good checkpoint of a
// directory in ascending step order, one checkpoint per InferNext call (the
// coordinator's driver asks again, and waits for new checkpoints, between
// calls). Each checkpoint's outputs are named by its step
// (SplitOutputName) and its metrics written at its step.
//
// Rank 0 records the steps the job has evaluated in
// output_dir/evaluated_checkpoints.json ({"job": id, "path": directory
// swept, "steps": [...]}, replaced atomically once a checkpoint's outputs
// are written), so that a restarted attempt of the same job goes on after
// them; another job's record (or another directory's) is ignored.
//
// Thread-safety: as TrainingJob (one thread drives a job).
#ifndef TRAINYARD_JOB_CHECKPOINT_SWEEP_H_
#define TRAINYARD_JOB_CHECKPOINT_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job/components.h"
#include "job/job_checkpoints.h"
#include "job/split_inference.h"

namespace trainyard {

constexpr char kEvaluatedCheckpointsFile[] = "evaluated_checkpoints.json";

// The steps `job_id` recorded as evaluated in `output_dir` for checkpoints
// under `path`, in the order evaluated; empty when there is no record, it
// is another job's or directory's, or it does not parse.
std::vector<int64_t> ReadEvaluatedSteps(const std::string& output_dir, const std::string& job_id,
                                        const std::string& path);
// Adds `step` to the record (a record of another job or directory is
// replaced).
absl::Status RecordEvaluatedStep(const std::string& output_dir, const std::string& job_id, const std::string& path,
                                 int64_t step);

// TrainingJob::InferNext: restores the oldest good checkpoint above
// `after_step` and above every step the job recorded (JobCheckpoints::
// RestoreNext), infers the split with it (InferSplit) and records its step.
// checkpoint_step is -1 (nothing inferred) when no checkpoint is left.
absl::StatusOr<InferOutcome> InferNextCheckpoint(JobComponents* job, JobCheckpoints* checkpoints, int64_t after_step);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_CHECKPOINT_SWEEP_H_
