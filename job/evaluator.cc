#include "job/evaluator.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "job/infer_eval.h"
#include "job/job_internal.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "trainer/restore.h"

namespace trainyard {

using job_internal::Raised;

namespace {

// At most `limit` batches of `base` (0 = all).
class LimitedIterator : public BatchIterator {
 public:
  LimitedIterator(std::unique_ptr<BatchIterator> base, int64_t limit) : base_(std::move(base)), limit_(limit) {}
  absl::StatusOr<T5Batch> Next() override {
    if (limit_ > 0 && taken_ >= limit_) return absl::OutOfRangeError("batch limit reached");
    ++taken_;
    return base_->Next();
  }

 private:
  std::unique_ptr<BatchIterator> base_;
  int64_t limit_;
  int64_t taken_ = 0;
};

// data_parallel.reproducible: this rank's share of each global batch
// (JobComponents::GlobalBatchShare), whole eval units of microbatch rows.
class ShareIterator : public BatchIterator {
 public:
  ShareIterator(std::unique_ptr<BatchIterator> base, const JobComponents* job) : base_(std::move(base)), job_(job) {}
  absl::StatusOr<T5Batch> Next() override {
    absl::StatusOr<T5Batch> batch = base_->Next();
    if (!batch.ok()) return batch;
    const auto [first, rows] = job_->GlobalBatchShare(batch->batch_size());
    return batch->Slice(first, rows);
  }

 private:
  std::unique_ptr<BatchIterator> base_;
  const JobComponents* job_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchIterator>> Evaluator::EvalBatches(const Task& task, bool global) const {
  const JobSpec& spec = job_->spec;
  IteratorOptions data;
  data.split = spec.eval().split();
  data.rows = global ? spec.batch_size() : spec.batch_size() / job_->world_size();
  data.inputs_length = spec.feature_lengths().inputs();
  data.targets_length = spec.feature_lengths().targets();
  data.pack = false;
  // With num_batches, a fixed random sample of the split (the same at
  // every eval of the job), not its first rows, which may be atypical.
  data.shuffle = spec.eval().num_batches() > 0;
  data.seed = static_cast<uint64_t>(spec.seed());
  data.repeat = false;
  data.rank = global ? 0 : job_->rank();
  data.world_size = global ? 1 : job_->world_size();
  TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(task, data));
  auto limited =
      std::make_unique<LimitedIterator>(std::make_unique<TaskBatchIterator>(std::move(it)), spec.eval().num_batches());
  if (!global) return std::unique_ptr<BatchIterator>(std::move(limited));
  return std::unique_ptr<BatchIterator>(std::make_unique<ShareIterator>(std::move(limited), job_));
}

absl::StatusOr<std::map<std::string, MetricResults>> Evaluator::InferEvalTasks() {
  std::map<std::string, MetricResults> inferred;
  for (const std::string& name : job_->spec.eval().tasks()) {
    TY_ASSIGN_OR_RETURN(const Task* task, job_->registry->Get(name));
    TY_ASSIGN_OR_RETURN(std::unique_ptr<BatchIterator> batches, EvalBatches(*task, /*global=*/false));
    TY_ASSIGN_OR_RETURN(std::vector<MetricFn> fns, InferEvalMetricFns(*task));
    InferEvalOptions infer;
    infer.decode = DecodeOptionsFromSpec(job_->spec);
    infer.rows = job_->spec.batch_size() / job_->world_size();
    infer.targets_length = job_->spec.feature_lengths().targets();
    infer.preempted = job_->options.preempted;
    infer.step = job_->trainer->step();
    TY_ASSIGN_OR_RETURN(inferred[name],
                        InferEval(job_->model.get(), batches.get(), *task->vocabulary, fns, infer, job_->collective));
  }
  return inferred;
}

absl::StatusOr<EvalOutcome> Evaluator::Evaluate() {
  Trainer* trainer = job_->trainer.get();
  if (trainer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_->id(), " is an ", JobKind_Name(job_->spec.kind()),
                                                      " job: it runs Infer, not Evaluate"));
  }
  const EvalConfig& eval = job_->spec.eval();
  spdlog::info("job {}: evaluating step {} on {} task(s)", job_->id(), trainer->step(), eval.tasks_size());
  EvalOutcome out;
  try {
    std::map<std::string, std::unique_ptr<BatchIterator>> owned;
    std::map<std::string, BatchIterator*> iterators;
    for (const std::string& name : eval.tasks()) {
      TY_ASSIGN_OR_RETURN(const Task* task, job_->registry->Get(name));
      // Reproducible: every rank reads the global batches and takes its
      // share, so the batches and their eval units are the same on any W.
      TY_ASSIGN_OR_RETURN(owned[name], EvalBatches(*task, IsReproducibleTraining(job_->spec)));
      iterators[name] = owned[name].get();
    }
    // Before this trainer's first evaluation.
    if (absl::Status warmed = job_->WarmUpEval(); !warmed.ok()) return CollectiveFailure(warmed);
    absl::StatusOr<MetricsByTask> metrics = trainer->Eval(iterators);
    // Inference evaluation: the same batches, decoded. PARAMETERS: decoding
    // reads every parameter (it calls no unit hooks).
    absl::StatusOr<std::map<std::string, MetricResults>> inferred;
    if (metrics.ok() && eval.infer_metrics()) {
      if (absl::Status gathered = trainer->GatherParameters(); !gathered.ok()) metrics = gathered;
    }
    if (metrics.ok() && eval.infer_metrics()) {
      inferred = InferEvalTasks();
      if (!inferred.ok()) metrics = inferred.status();
    }
    trainer->ReleaseParameters();
    if (IsPreemptionError(metrics.status())) {
      double seconds = 0;
      TY_ASSIGN_OR_RETURN(out.emergency_checkpoint, checkpoints_->WriteEmergency(/*abandoned=*/false, &seconds));
      out.preempted = true;
      out.asked_to_stop = Raised(job_->options.preempted);
      return out;
    }
    if (!metrics.ok()) return CollectiveFailure(metrics.status());
    if (job_->rank() != 0) return out;
    for (const auto& [task, values] : *metrics) {
      for (const auto& [k, v] : values) out.metrics[task + "/" + k] = v;
    }
    if (inferred.ok()) {
      for (const auto& [task, values] : *inferred) {
        WriteInferEval(task, values);
        for (const auto& [k, v] : values) out.infer_metrics[task + "/" + k] = v;
      }
    }
    RecordBest(out);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("evaluation: ", e.what()));
  }
  return out;
}

void Evaluator::RecordBest(const EvalOutcome& out) const {
  // Keep-best: this eval's metric belongs to the checkpoint of this step.
  const JobSpec& spec = job_->spec;
  const CheckpointConfig& ckpt = spec.checkpoint();
  const double* best = nullptr;
  for (const auto* values : {&out.metrics, &out.infer_metrics}) {
    auto it = values->find(ckpt.best_metric());
    if (best == nullptr && it != values->end()) best = &it->second;
  }
  if (ckpt.keep_best() <= 0 || best == nullptr) return;
  if (absl::Status s = RecordCheckpointMetric(spec.output_dir(), job_->trainer->step(), *best); !s.ok()) {
    spdlog::error("job {}: {}", job_->id(), s.ToString());
  }
  ApplyRetention(spec.output_dir(), spec.keep_checkpoints(), ckpt.keep_best(), ckpt.best_mode() == EarlyStopping::MAX);
}

void Evaluator::WriteInferEval(const std::string& task, const MetricResults& values) {
  const JobSpec& spec = job_->spec;
  const int64_t step = job_->trainer->step();
  auto& writer = infer_eval_writers_[task];
  if (writer == nullptr) writer = std::make_unique<MetricsManager>("inference_eval/" + task, spec.output_dir(), 0, 1);
  writer->WriteScalars(step, std::map<std::string, double>(values.begin(), values.end()));
  // One JSON line per eval step, the file rewritten whole (never seen half
  // written).
  const std::string path =
      absl::StrCat(spec.output_dir(), "/inference_eval/", task, "-", spec.eval().split(), ".jsonl");
  std::string lines;
  {
    std::ifstream in(path);
    std::stringstream existing;
    existing << in.rdbuf();
    lines = existing.str();
  }
  nlohmann::ordered_json line = {{"task", task}, {"split", spec.eval().split()}, {"step", step}, {"metrics", values}};
  absl::StrAppend(&lines, line.dump(), "\n");
  std::error_code ec;
  std::filesystem::create_directories(spec.output_dir() + "/inference_eval", ec);
  if (absl::Status s = WriteFileAtomically(path, lines); !s.ok()) {
    spdlog::error("job {}: inference evaluation of {}: {}", job_->id(), task, s.ToString());
  }
}

}  // namespace trainyard
