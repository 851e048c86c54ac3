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
//   Infer    EVALUATION and INFERENCE jobs: decode and score a split
//            (InferNext: with every checkpoint in turn, restore ALL).
//   SaveCheckpoint  rank 0 writes checkpoint_<step> (data positions of every
//            rank gathered), in the background when the spec says so, with
//            retention.
//
// A facade over single-purpose parts, each in its own file of job/:
// components.h (what Create assembles), shard_plan.h, job_checkpoints.h
// (Restore, SaveCheckpoint, the emergency checkpoint), evaluator.h
// (Evaluate, keep-best), split_inference.h (Infer), checkpoint_sweep.h
// (InferNext), elastic_state.h
// (Regroup, StateDigest), and distributed_decode.h under the inference
// parts. Train lives here.
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "job/checkpoint_sweep.h"
#include "job/components.h"
#include "job/elastic_state.h"
#include "job/evaluator.h"
#include "job/job_checkpoints.h"
#include "job/split_inference.h"
#include "proto/job.pb.h"
#include "trainer/trainer.h"

namespace trainyard {

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
  // parameter that diverged). Rank 0 appends the steps' batches to the data
  // ledger (data_ledger.h). A collective failure is kAborted ("a peer
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
  // inference.num_batches batches), a batch per rank at a time gathered to
  // rank 0 (DecodeAndGather), which writes every example in the split's
  // order to output_dir/inference/<task>-<split>.jsonl (index, input,
  // target, prediction, prediction_score, target_score). EVALUATION then
  // computes the task's metric functions (and mean_log_likelihood of the
  // targets), written as TensorBoard scalars under
  // output_dir/inference_eval/<task>/ at the checkpoint's step and as
  // output_dir/inference_eval/<task>-<split>.json. A stop on any rank stops
  // every rank (kAborted).
  absl::StatusOr<InferOutcome> Infer();
  // restore { mode: ALL }: the same with the oldest good checkpoint above
  // `after_step` (and above the steps an earlier attempt of this job
  // recorded), restored first; outputs named by its step, metrics at its
  // step (checkpoint_sweep.h). checkpoint_step -1: none is left.
  absl::StatusOr<InferOutcome> InferNext(int64_t after_step);

  // Every rank calls; rank 0 writes checkpoint_<step> (waiting for it when
  // `wait`, else in the background) and returns the newest durable
  // checkpoint; the others return "". A step saved already (or in flight)
  // is not written twice.
  absl::StatusOr<std::string> SaveCheckpoint(bool wait);
  // fault_tolerance ELASTIC: this rank moves into `collective` (not owned;
  // it outlives the job, and the previous one may be destroyed once this
  // returns): a new group of the attempt's surviving ranks, and of workers
  // joining it, which call it with `fresh` right after Create on the same
  // collective, or on another once it formed when the job was built ahead
  // on an UnconnectedCollective (for a place its sharded state, if any,
  // keeps). A step this rank left half done is abandoned (its
  // gradients dropped, its batch put back). Then the ranks agree on the
  // state: the lowest rank at the furthest step broadcasts parameters,
  // optimizer state (with the step) and data position, when any rank is at
  // another step or fresh. kFailedPrecondition when every rank is fresh or
  // the job is not ELASTIC; kAborted when the group fails. A rank that is
  // not fresh always moves: `collective` must be a new group.
  absl::StatusOr<RegroupOutcome> Regroup(Collective* collective, bool fresh);
  // After a failed Regroup: whether it had begun to move another rank's
  // state into this one (this rank was behind the furthest step), so that
  // its state may be partly overwritten. A rank that was at the furthest
  // step keeps its state whole and may regroup again.
  bool StatePartlyReceived() const;
  // A hash of the parameters, optimizer state, step and data position:
  // equal on two ranks exactly when their training states are bit for bit
  // equal (but for hash collisions).
  uint64_t StateDigest() const;
  bool elastic() const { return parts_->elastic(); }

  // Waits for a background save (rank 0); its status.
  absl::Status WaitForSaves();
  // Ends the job: flushes and closes the summary writers and waits for a
  // save in flight (logging its failure). Idempotent; the destructor calls
  // it. progress() stays readable.
  void Close();

  const JobSpec& spec() const { return parts_->spec; }
  const std::string& id() const { return parts_->id(); }
  int rank() const { return parts_->rank(); }
  int world_size() const { return parts_->world_size(); }
  int64_t step() const;
  // The last completed step, from any thread.
  int64_t progress() const;
  // The restored checkpoint's step (0 from scratch).
  int64_t restored_step() const { return checkpoints_.restored_step(); }
  // Rank 0: the newest checkpoint written completely, and that write's time.
  std::string last_written_checkpoint() const { return checkpoints_.last_written(); }
  double last_write_seconds() const { return checkpoints_.last_write_seconds(); }
  // Why this rank's last checkpoint write failed; "" once one succeeded.
  std::string checkpoint_failure() const { return checkpoints_.last_failure(); }

  // For owners that drive the model themselves (the interactive model).
  EncoderDecoderModel* model() { return parts_->model.get(); }
  Optimizer* optimizer() { return parts_->optimizer.get(); }
  Trainer* trainer() { return parts_->trainer.get(); }
  Collective* collective() { return parts_->collective; }
  const TaskRegistry& registry() const { return *parts_->registry; }
  // The vocabulary the model's token ids are in: the restored checkpoint's,
  // else the task's (JobComponents::PlanVocabulary).
  std::shared_ptr<const Vocabulary> vocabulary() const { return parts_->vocabulary; }

 private:
  explicit TrainingJob(std::unique_ptr<JobComponents> parts);
  // After a chunk: kInternal naming the parameter when the ranks' replicas
  // differ (nothing to compare when PARAMETERS shards them).
  absl::Status CheckReplicasAgree();
  // After a chunk's steps (a preempted one's too): the ranks combine their
  // data-ledger entries and rank 0 appends them to the data ledger
  // (data_ledger.h).
  absl::Status RecordLedger();

  std::unique_ptr<JobComponents> parts_;
  JobCheckpoints checkpoints_;
  Evaluator evaluator_;
  bool closed_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_JOB_TRAINING_JOB_H_
