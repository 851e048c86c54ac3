// EVALUATION and INFERENCE jobs: a split decoded and scored by every rank,
// merged by rank 0 into JSON lines, and for EVALUATION the task's metric
// functions over every example.
#ifndef TRAINYARD_JOB_SPLIT_INFERENCE_H_
#define TRAINYARD_JOB_SPLIT_INFERENCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "job/components.h"

namespace trainyard {

// An inference over a split (Infer).
struct InferOutcome {
  int64_t examples = 0;                   // this rank's
  std::string output;                     // rank 0: the merged JSON lines
  std::map<std::string, double> metrics;  // rank 0, EVALUATION: "<task>/<metric>"
  // restore { mode: ALL } (InferNext): the step of the checkpoint inferred,
  // -1 when none was left; the checkpoints passed over, with the reason.
  int64_t checkpoint_step = -1;
  std::vector<std::string> passed_over;
  int64_t after_step = -1;  // the step looked above (an earlier attempt's last, if higher)
};

// The name of a split's output files (inference/<name>.jsonl, for
// EVALUATION also inference_eval/<name>.json): "<task>-<split>", and with
// restore { mode: ALL } "<task>-<split>-<checkpoint step>", so that every
// checkpoint's outputs stay side by side.
std::string SplitOutputName(const JobSpec& spec, int64_t checkpoint_step);

// TrainingJob::Infer on `job`, whose parameters are those of the
// checkpoint of `checkpoint_step` (the step the metrics are written at).
absl::StatusOr<InferOutcome> InferSplit(const JobComponents& job, int64_t checkpoint_step);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_SPLIT_INFERENCE_H_
