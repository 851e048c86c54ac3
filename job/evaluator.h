// A training job's evaluations: the spec's eval tasks scored by the
// Trainer (training_eval/), with eval.infer_metrics the same batches
// decoded and their metric functions (inference_eval/), and the keep-best
// record of this step's checkpoint.
#ifndef TRAINYARD_JOB_EVALUATOR_H_
#define TRAINYARD_JOB_EVALUATOR_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "evaluation/metric_fns.h"
#include "job/components.h"
#include "job/job_checkpoints.h"
#include "trainer/metrics_manager.h"

namespace trainyard {

// An evaluation (Evaluate).
struct EvalOutcome {
  std::map<std::string, double> metrics;  // rank 0: "<task>/<metric>"
  // rank 0, with eval.infer_metrics: the tasks' metric functions over
  // decoded predictions, "<task>/<metric>".
  std::map<std::string, double> infer_metrics;
  bool preempted = false;
  bool asked_to_stop = false;
  std::string emergency_checkpoint;  // rank 0
};

class Evaluator {
 public:
  // Neither is owned; both outlive this.
  Evaluator(JobComponents* job, JobCheckpoints* checkpoints) : job_(job), checkpoints_(checkpoints) {}

  // TrainingJob::Evaluate.
  absl::StatusOr<EvalOutcome> Evaluate();

 private:
  // This rank's eval batches of `task`: its shard of eval.split, at most
  // eval.num_batches (then a fixed random sample of the split); `global`:
  // the global batches of the split read whole, this rank's share of each
  // (GlobalBatchShare), the same batches on any number of ranks.
  absl::StatusOr<std::unique_ptr<BatchIterator>> EvalBatches(const Task& task, bool global) const;
  // Every eval task decoded (InferEval), by task; rank 0 gets the values.
  absl::StatusOr<std::map<std::string, MetricResults>> InferEvalTasks();
  // Rank 0: the keep-best metric of this step's checkpoint, and retention.
  void RecordBest(const EvalOutcome& out) const;
  // Rank 0: one inference evaluation's values of `task`, to TensorBoard and
  // JSON lines.
  void WriteInferEval(const std::string& task, const MetricResults& values);

  JobComponents* job_;
  JobCheckpoints* checkpoints_;
  // rank 0: one TensorBoard writer per task for inference evaluation.
  std::map<std::string, std::unique_ptr<MetricsManager>> infer_eval_writers_;
};

}  // namespace trainyard

#endif  // TRAINYARD_JOB_EVALUATOR_H_
