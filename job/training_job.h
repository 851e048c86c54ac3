// One job on one rank: everything a JobSpec describes, built once and driven
// by its owner (the worker's WorkerCore for batch jobs, the InteractiveModel
// for interactive sessions). Free of gRPC and of how the rank got its
// collective.
//
//   Create   builds the task registry and this rank's data shard (training
//            kinds), the model, optimizer, learning-rate schedule and the
//            Trainer. Local: no collective operation, so a rank that fails
//            here can tell its peers (AgreeOnOutcome) before they wait.
//   Restore  the checkpoint a restart names (else the newest one that reads
//            back whole) or the spec's choice; every rank the same step.
//   Train    a chunk of steps on the data shard, checked for divergence
//            across ranks; a stop agreed by the ranks writes the emergency
//            checkpoint when any rank was preempted.
//   Evaluate the spec's eval tasks (training_eval/), keep-best records.
//   Infer    EVALUATION and INFERENCE jobs: decode and score a split.
//   SaveCheckpoint  rank 0 writes checkpoint_<step> (data positions of every
//            rank gathered), in the background when the spec says so, with
//            retention.
//
// Every rank calls the same methods in the same order (they run collective
// operations). Checkpoints and summaries are written by rank 0.
//
// Thread-safety: one thread drives a TrainingJob; progress() may be read
// from any thread.
#ifndef TRAINYARD_JOB_TRAINING_JOB_H_
#define TRAINYARD_JOB_TRAINING_JOB_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "collective/timed_collective.h"
#include "data/task.h"
#include "evaluation/metric_fns.h"
#include "model/encoder_decoder_model.h"
#include "proto/job.pb.h"
#include "spec/jobspec.h"
#include "trainer/metrics_manager.h"
#include "trainer/optimizer.h"
#include "trainer/task_batches.h"
#include "trainer/train_checkpoint.h"
#include "trainer/trainer.h"

namespace trainyard {

struct TrainingJobOptions {
  std::string id;  // for logs and checkpoint metadata
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // Raised by the owner to stop the job (not owned; outlive the job). The
  // ranks agree on a stop at the next step boundary (or between
  // microbatches, or eval batches); when `preempted` is raised on any rank
  // the emergency checkpoint is written, else the stop is an abort.
  const std::atomic<bool>* stop = nullptr;
  const std::atomic<bool>* preempted = nullptr;
  // Build the data shard of the spec's task (TRAIN/PRETRAINING/FINETUNING
  // jobs). False: the owner feeds batches to trainer() itself (the
  // interactive model); Train is then refused.
  bool task_data = true;
  // The device's peak FLOP/s for timing/mfu in the train summary; 0: measured
  // once per process, device and dtype by a matrix-product probe
  // (MeasurePeakFlops).
  double peak_flops = 0;
};

// The best FLOP/s of a few 1024^3 (CPU) or 4096^3 (CUDA) matrix products in
// `dtype` on `device`: what the device reaches on the model's main kernel,
// used as the peak when none is given. Cached per device and dtype.
double MeasurePeakFlops(const c10::Device& device, torch::ScalarType dtype);

// A chunk of steps (Train).
struct TrainChunk {
  std::map<std::string, double> summary;  // rank 0's summary (others: all-reduced values)
  double seconds = 0;                     // wall time of the steps
  // Of the steps' time on this rank: blocked in collectives (waiting for
  // the other ranks, the transfers not overlapped) and the rest (data,
  // forward, backward, the update): Trainer::ChunkTiming.
  double compute_seconds = 0;
  double collective_seconds = 0;
  bool preempted = false;            // stopped with the other ranks; emergency checkpoint written
  bool asked_to_stop = false;        // this rank's worker is the one preempted
  std::string emergency_checkpoint;  // rank 0
  double emergency_seconds = 0;
};

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

// An inference over a split (Infer).
struct InferOutcome {
  int64_t examples = 0;                   // this rank's
  std::string output;                     // rank 0: the merged JSON lines
  std::map<std::string, double> metrics;  // rank 0, EVALUATION: "<task>/<metric>"
};

// What Regroup did on this rank.
struct RegroupOutcome {
  int64_t step = 0;        // every rank's step after it
  int source_rank = -1;    // whose state was broadcast (-1: none, all agreed)
  int64_t sent_bytes = 0;  // the broadcast's size
  double transfer_seconds = 0;
  uint64_t state_digest = 0;  // StateDigest() after it: equal on every rank
};

// What Restore restored.
struct RestoreOutcome {
  int64_t step = 0;                      // 0 from scratch
  std::string checkpoint;                // "" from scratch
  std::vector<std::string> passed_over;  // checkpoints that did not read back whole, why, and where moved
};

class TrainingJob {
 public:
  // kInvalidArgument naming the field for a spec this rank cannot run (an
  // unknown task, a batch that does not split over the ranks or into the
  // microbatches, a bad task definition). `collective` is not owned and
  // outlives the job.
  static absl::StatusOr<std::unique_ptr<TrainingJob>> Create(const JobSpec& spec, Collective* collective,
                                                             TrainingJobOptions options);
  ~TrainingJob();

  // Restores `named` (a restart: the job's newest checkpoint as the
  // coordinator recorded it; if it does not read back whole, the newest
  // checkpoint under output_dir that does) or else the spec's `restore`
  // choice, on every rank the same step. Rank 0 first removes unfinished
  // saves, and afterwards moves the job's damaged checkpoints aside so their
  // steps can be saved again. Every rank learns whether every rank could
  // read its checkpoint before any applies it (kAborted naming the ranks
  // that could not).
  absl::StatusOr<RestoreOutcome> Restore(const std::string& named);

  // Runs `num_steps` train steps from step() on the data shard, then checks
  // that every rank holds identical parameters (kInternal naming the
  // parameter that diverged). A collective failure is kAborted ("a peer
  // left or stalled"). A stop agreed by the ranks returns preempted with
  // the emergency checkpoint when any rank was preempted, kAborted when it
  // was an abort.
  absl::StatusOr<TrainChunk> Train(int64_t num_steps);

  // Evaluates the spec's eval tasks (num_batches of a fixed sample when
  // set); with eval.infer_metrics, also decodes the same batches and
  // computes each task's metric functions (InferEval), which rank 0 writes
  // as TensorBoard scalars under output_dir/inference_eval/<task>/ and as a
  // JSON line per eval step in output_dir/inference_eval/<task>-<split>.jsonl.
  // Rank 0 records the keep-best metric (from either) of this step's
  // checkpoint and applies retention. A stop agreed during it is handled as
  // in Train.
  absl::StatusOr<EvalOutcome> Evaluate();

  // EVALUATION and INFERENCE jobs: decodes and scores this rank's shard of
  // inference.split (examples r, r+W, ... in the split's order, at most
  // inference.num_batches batches), writes it as JSON lines (index, input,
  // target, prediction, prediction_score, target_score), and on rank 0,
  // after a barrier, merges the shards in order into
  // output_dir/inference/<task>-<split>.jsonl. EVALUATION then computes the
  // task's metric functions (and mean_log_likelihood of the targets),
  // written as TensorBoard scalars under output_dir/inference_eval/<task>/
  // at the checkpoint's step and as output_dir/inference_eval/<task>-<split>.json.
  absl::StatusOr<InferOutcome> Infer();

  // Every rank calls; rank 0 writes checkpoint_<step> (waiting for it when
  // `wait`, else in the background) and returns the newest durable
  // checkpoint; the others return "". A step saved already (or in flight)
  // is not written twice.
  absl::StatusOr<std::string> SaveCheckpoint(bool wait);
  // fault_tolerance ELASTIC: this rank moves into `collective` (not owned;
  // it outlives the job, and the previous one may be destroyed once this
  // returns): a new group of the attempt's surviving ranks, and of workers
  // joining it, which call it with `fresh` right after Create on the same
  // collective. A step this rank left half done is abandoned (its
  // gradients dropped, its batch put back). Then the ranks agree on the
  // state: the lowest rank at the furthest step broadcasts parameters,
  // optimizer state (with the step) and data position, when any rank is at
  // another step or fresh. kFailedPrecondition when every rank is fresh or
  // the job is not ELASTIC; kAborted when the group fails. A rank that is
  // not fresh always moves: `collective` must be a new group.
  absl::StatusOr<RegroupOutcome> Regroup(Collective* collective, bool fresh);
  // A hash of the parameters, optimizer state, step and data position:
  // equal on two ranks exactly when their training states are bit for bit
  // equal (but for hash collisions).
  uint64_t StateDigest() const;
  bool elastic() const { return IsElasticTraining(spec_); }

  // Waits for a background save (rank 0); its status.
  absl::Status WaitForSaves();
  // Ends the job: flushes and closes the summary writers and waits for a
  // save in flight (logging its failure). Idempotent; the destructor calls
  // it. progress() stays readable.
  void Close();

  const JobSpec& spec() const { return spec_; }
  const std::string& id() const { return options_.id; }
  int rank() const { return collective_->rank(); }
  int world_size() const { return collective_->world_size(); }
  int64_t step() const;
  // The last completed step, from any thread.
  int64_t progress() const;
  // The restored checkpoint's step (0 from scratch).
  int64_t restored_step() const { return restored_step_; }
  // Rank 0: the newest checkpoint written completely, and that write's time.
  std::string last_written_checkpoint() const { return checkpointer_.last_written(); }
  double last_write_seconds() const { return checkpointer_.last_write_seconds(); }
  // Why this rank's last checkpoint write failed; "" once one succeeded.
  std::string checkpoint_failure() const { return checkpointer_.last_failure(); }

  // For owners that drive the model themselves (the interactive model).
  EncoderDecoderModel* model() { return model_.get(); }
  Optimizer* optimizer() { return optimizer_.get(); }
  Trainer* trainer() { return trainer_.get(); }
  Collective* collective() { return collective_; }
  const TaskRegistry& registry() const { return registry_; }

 private:
  TrainingJob(JobSpec spec, Collective* collective, TrainingJobOptions options);
  bool trains() const { return IsTrainingKind(spec_.kind()); }
  // (Re)builds trainer_ for collective_'s ranks (training kinds).
  absl::Status BuildTrainer();
  // Microbatches per step on this rank: the spec's, or, ELASTIC, as many as
  // the largest share of the global batch needs at the spec's microbatch
  // size (the same on every rank).
  int Microbatches() const;
  // Every rank's data position, in rank order (a collective); empty without
  // task data.
  absl::StatusOr<std::vector<std::string>> GatherDataStates();
  // After the ranks stopped together: kAborted unless a rank was preempted;
  // else puts the abandoned step's batch back (`abandoned`) and writes the
  // emergency checkpoint of the current step, synchronously.
  absl::StatusOr<std::string> WriteEmergencyCheckpoint(bool abandoned, double* seconds);
  // Applies a read checkpoint: parameters (those `hold` accepts; null: all),
  // optimizer and data positions.
  absl::Status Apply(const TrainCheckpoint& ckpt, const ParamFilter& hold = nullptr);
  // Rank 0's random name for this save's temporary directory, on every rank
  // (a collective).
  absl::StatusOr<std::string> SaveToken();
  // Rank 0: one inference evaluation's values of `task`, to TensorBoard and
  // JSON lines.
  void WriteInferEval(const std::string& task, const MetricResults& values);

  class RewindableBatches;

  const JobSpec spec_;
  Collective* collective_;  // replaced by Regroup
  // collective_, timing the trainer's and the optimizer's waits (TrainChunk's
  // compute and collective seconds).
  std::unique_ptr<TimedCollective> timed_;
  const TrainingJobOptions options_;
  TaskRegistry registry_;
  std::unique_ptr<TaskBatchIterator> train_batches_;  // task data only
  std::unique_ptr<RewindableBatches> batches_;        // over train_batches_
  std::unique_ptr<EncoderDecoderModel> model_;
  std::unique_ptr<Optimizer> optimizer_;  // training kinds
  std::unique_ptr<Trainer> trainer_;      // training kinds
  // rank 0: one TensorBoard writer per task for inference evaluation.
  std::map<std::string, std::unique_ptr<MetricsManager>> infer_eval_writers_;
  AsyncCheckpointer checkpointer_;  // rank 0; with a sharded optimizer every rank (its shard)
  std::string last_save_started_;   // rank 0: the directory of the last save
  int64_t restored_step_ = 0;
  bool closed_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_JOB_TRAINING_JOB_H_
