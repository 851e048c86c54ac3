// EVALUATION and INFERENCE jobs: a split decoded and scored by every rank,
// merged by rank 0 into JSON lines, and for EVALUATION the task's metric
// functions over every example.
#ifndef TRAINYARD_JOB_SPLIT_INFERENCE_H_
#define TRAINYARD_JOB_SPLIT_INFERENCE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "job/components.h"

namespace trainyard {

// An inference over a split (Infer).
struct InferOutcome {
  int64_t examples = 0;                   // this rank's
  std::string output;                     // rank 0: the merged JSON lines
  std::map<std::string, double> metrics;  // rank 0, EVALUATION: "<task>/<metric>"
};

// TrainingJob::Infer on `job`, whose parameters are those of the
// checkpoint of `checkpoint_step` (the step the metrics are written at).
absl::StatusOr<InferOutcome> InferSplit(const JobComponents& job, int64_t checkpoint_step);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_SPLIT_INFERENCE_H_
