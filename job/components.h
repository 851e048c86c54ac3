// What a JobSpec assembles on one rank: the task registry and data shard,
// the model, optimizer and Trainer, the shard plan, and the collective they
// run on. TrainingJob and its parts (JobCheckpoints, Evaluator, the ELASTIC
// state transfer, split inference) all work on one JobComponents.
#ifndef TRAINYARD_JOB_COMPONENTS_H_
#define TRAINYARD_JOB_COMPONENTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <c10/core/Device.h>
#include <torch/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "collective/timed_collective.h"
#include "data/iterator.h"
#include "data/task.h"
#include "job/data_ledger.h"
#include "job/shard_plan.h"
#include "model/encoder_decoder_model.h"
#include "proto/job.pb.h"
#include "spec/jobspec.h"
#include "trainer/optimizer.h"
#include "trainer/task_batches.h"
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
  // The device's peak FLOP/s for timing/mfu in the train summary. 0: the
  // device's datasheet figure or the CPU formula (DevicePeakFlops in
  // common/torch/device.h), with timing/mfu_vs_measured_peak against a
  // matrix-product probe measured once per process, device and dtype
  // (MeasurePeakFlops); the probe alone, and the log saying why, when
  // the device is not known (ChooseMfuPeaks in common/peak_flops.h).
  double peak_flops = 0;
  // Before the first train step and the first evaluation of each Trainer
  // (an attempt's, a regrouped one's), a warm-up pass on a dummy batch of
  // this rank's shapes (JobComponents::WarmUpTrain, WarmUpEval). It leaves
  // parameters, optimizer state, random streams and data position as they
  // were; false skips it (and the summaries' timing/compilation_seconds).
  bool warm_up = true;
  // Without task data: the SentencePiece model the owner tokenises with, ""
  // for none named (the restored checkpoint's, else the bundled one). Jobs
  // with task data use their task's. Either way ChooseVocabulary decides
  // against the restored checkpoint's (data/vocabulary_choice.h).
  std::string vocabulary_path;
  // Its extra ids (sentinels, for span corruption).
  int vocabulary_extra_ids = 0;
};

// The data position of a train iterator as one tensor (epoch, position,
// segment) for collectives, and back as TaskIterator::State()'s text.
torch::Tensor DataPositionTensor(const TaskIterator& it);
std::string DataPositionState(const torch::Tensor& position);

struct JobComponents;

// The vocabulary for a model restored from a checkpoint, loaded and not yet
// in use (JobComponents::PlanVocabulary, UseVocabulary).
struct VocabularyPlan {
  std::shared_ptr<const Vocabulary> vocabulary;
  std::string model;  // its SentencePiece model's bytes
  // EVALUATION and INFERENCE jobs whose tasks name another vocabulary: the
  // task registry again, every task in the checkpoint's.
  std::unique_ptr<TaskRegistry> registry;
};

// The train batches, remembering the data position before the batch taken
// last, so that a step abandoned between microbatches (a preemption), or
// left half done by a failed collective (ELASTIC), can put its batch back.
// ELASTIC and data_parallel.reproducible: the iterator walks the global
// batches (the same on every rank, whatever the number of ranks), and rank
// r of W trains on rows [r B / W, (r + 1) B / W) of each (GlobalBatchShare).
// ELASTIC, where each example is one row (unpacked,
// TaskIterator::RowsAreExamples): the rank reads only its rows; otherwise
// (and always with data_parallel.reproducible, whose summaries must be the
// same bits on any number of ranks) the whole batch, and keeps its rows.
// The data metrics count the rows it read.
class RewindableBatches : public BatchIterator {
 public:
  RewindableBatches(TaskBatchIterator* base, const JobComponents* job) : base_(base), job_(job) {}
  absl::StatusOr<T5Batch> Next() override;
  std::map<std::string, double> TakeDataMetrics() override { return base_->TakeDataMetrics(); }
  absl::Status PutBackLast();
  // The ids of the batches taken (data_ledger.h), by the step they train.
  DataLedger* ledger() { return &ledger_; }
  // Batches taken since the last ResetTaken.
  int64_t taken() const { return taken_; }
  void ResetTaken() { taken_ = 0; }

 private:
  TaskBatchIterator* base_;
  const JobComponents* job_;
  std::string before_;
  int64_t taken_ = 0;
  DataLedger ledger_;
};

struct JobComponents {
  JobComponents(JobSpec spec, Collective* collective, TrainingJobOptions options);
  ~JobComponents();  // the trainer (and its summary writers) go before the model

  const std::string& id() const { return options.id; }
  int rank() const { return collective->rank(); }
  int world_size() const { return collective->world_size(); }
  bool trains() const { return IsTrainingKind(spec.kind()); }
  bool elastic() const { return IsElasticTraining(spec); }
  // Every rank reads the whole global batch and trains on its rows
  // (ELASTIC, data_parallel.reproducible): RewindableBatches.
  bool global_batches() const { return ReadsGlobalBatches(spec); }
  // Microbatches per step on this rank: the spec's, or, ELASTIC, as many as
  // the largest share of the global batch needs at the spec's microbatch
  // size (the same on every rank).
  int Microbatches() const;
  // The spec's microbatch: batch_size / (num_workers x num_microbatches)
  // rows (at least 1).
  int64_t MicrobatchRows() const;
  // This rank's rows of a global batch of `b` rows, as [first, first +
  // count): rank r of W takes [r b / W, (r + 1) b / W); with
  // data_parallel.reproducible, whole microbatches: global microbatches
  // [r G / W, (r + 1) G / W) of the G = b / MicrobatchRows() (so any W,
  // ELASTIC's too, cuts the batch into the same microbatches; an eval
  // batch's last, short one counts as a microbatch).
  std::pair<int64_t, int64_t> GlobalBatchShare(int64_t b) const;
  // (Re)builds `trainer` for the ranks of `collective` (training kinds); it
  // reads its step from the optimizer.
  absl::Status BuildTrainer();
  // options.warm_up, once per trainer: Trainer::CompileTrain on a dummy
  // batch of this rank's train shapes (ELASTIC: its share of the global
  // batch), and Trainer::CompileEval on one of the eval batches' shapes for
  // each eval task. The data iterators are not touched. Every rank calls
  // them at the same point (with PARAMETERS they gather).
  absl::Status WarmUpTrain();
  absl::Status WarmUpEval();
  // ELASTIC: moves to `next` (a new group): the trainer, which belongs to
  // the old group, is closed and rebuilt, gradients of a step left half
  // done are dropped, and a sharded optimizer exchanges in `next`'s shard
  // group (kFailedPrecondition when this rank's place in it changed).
  absl::Status MoveTo(Collective* next);
  // The vocabulary for the model restored from `checkpoint` ("" for none):
  // ChooseVocabulary between it and the task's (the owner's without task
  // data), for training (TRAIN, PRETRAINING, FINETUNING, the interactive
  // model: another vocabulary than the checkpoint's is kInvalidArgument
  // naming both files) or inference (EVALUATION, INFERENCE: the
  // checkpoint's takes the tasks' place). kInvalidArgument when it has more
  // ids than the model's vocab_size. Local: changes nothing.
  absl::StatusOr<VocabularyPlan> PlanVocabulary(const std::string& checkpoint) const;
  void UseVocabulary(VocabularyPlan plan);

  const JobSpec spec;
  const TrainingJobOptions options;
  Collective* collective;  // replaced by MoveTo
  // `collective`, timing the trainer's and the optimizer's waits (a train
  // chunk's compute and collective seconds).
  std::unique_ptr<TimedCollective> timed;
  // HSDP (data_parallel.shard_group_size): collective->sharding_group(),
  // timed into the same counter; null otherwise.
  std::unique_ptr<TimedCollective> timed_shards;
  // What the sharded state is sharded over: timed_shards, else timed.
  Collective* sharding() const { return timed_shards ? timed_shards.get() : timed.get(); }
  std::unique_ptr<TaskRegistry> registry = std::make_unique<TaskRegistry>();
  // The vocabulary the model's token ids are in (PlanVocabulary): the
  // restored checkpoint's, else the task's. Every checkpoint the job writes
  // carries it (its bytes, kept here: the file it came from may be a
  // checkpoint that retention removes).
  std::shared_ptr<const Vocabulary> vocabulary;
  std::string vocabulary_model;
  std::unique_ptr<TaskBatchIterator> train_batches;  // task data of training kinds only
  std::unique_ptr<RewindableBatches> batches;        // over train_batches
  std::unique_ptr<EncoderDecoderModel> model;
  std::unique_ptr<Optimizer> optimizer;  // training kinds
  std::unique_ptr<Trainer> trainer;      // training kinds
  // `trainer` has run WarmUpTrain, WarmUpEval.
  bool train_warmed_up = false;
  bool eval_warmed_up = false;
  // ELASTIC: a regroup began to move another rank's state into this one
  // (it was behind the furthest step) and has not completed: the state may
  // be partly overwritten (RegroupState).
  bool receiving_state = false;
  // PARAMETERS sharding over more than one rank: the parameters this rank
  // builds, restores and saves. Unsharded otherwise.
  ShardPlan shards;
};

// The dtype the model computes in: bfloat16 when the spec says so, else
// float32.
torch::ScalarType ComputeDtype(const JobSpec& spec);

// kInvalidArgument naming the field unless the spec's global batch splits
// over `world_size` ranks (ELASTIC: at least a row each) and, but for
// ELASTIC and inference, each rank's rows into num_microbatches.
absl::Status CheckBatchSplits(const JobSpec& spec, int world_size);

// Builds everything `spec` describes for this rank of `collective`: data
// first (a bad task name fails before any expensive work), then the model
// (PARAMETERS: this rank's parameters only), the optimizer and the Trainer.
// Local: no collective operation. kInvalidArgument naming the field for a
// spec this rank cannot run.
absl::StatusOr<std::unique_ptr<JobComponents>> AssembleComponents(const JobSpec& spec, Collective* collective,
                                                                  TrainingJobOptions options);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_COMPONENTS_H_
