#include "job/training_job.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/durable_file.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "data/bundled.h"
#include "data/iterator.h"
#include "data/task_definition.h"
#include "evaluation/metric_fns.h"
#include "google/protobuf/util/json_util.h"
#include "job/infer_eval.h"
#include "job/job_internal.h"
#include "model/decoding.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "spec/presets.h"
#include "trainer/learning_rate.h"
#include "trainer/metrics_manager.h"
#include "trainer/restore.h"
#include "trainer/sharded_optimizer.h"

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

}  // namespace

// The train batches, remembering the data position before the batch taken
// last, so that a step abandoned between microbatches (a preemption), or
// left half done by a failed collective (ELASTIC), can put its batch back.
// ELASTIC: the iterator yields the whole global batch (the same on every
// rank, whatever the number of ranks), and rank r of W trains on rows
// [r B / W, (r + 1) B / W) of it.
class TrainingJob::RewindableBatches : public BatchIterator {
 public:
  RewindableBatches(TaskBatchIterator* base, const TrainingJob* job) : base_(base), job_(job) {}
  absl::StatusOr<T5Batch> Next() override {
    before_ = base_->task_iterator()->State();
    ++taken_;
    absl::StatusOr<T5Batch> batch = base_->Next();
    if (!batch.ok() || !job_->elastic()) return batch;
    const int64_t b = batch->batch_size(), w = job_->world_size(), r = job_->rank();
    return batch->Slice(r * b / w, (r + 1) * b / w - r * b / w);
  }
  std::map<std::string, double> TakeDataMetrics() override { return base_->TakeDataMetrics(); }
  absl::Status PutBackLast() { return before_.empty() ? absl::OkStatus() : base_->task_iterator()->Restore(before_); }
  // Batches taken since the last ResetTaken.
  int64_t taken() const { return taken_; }
  void ResetTaken() { taken_ = 0; }

 private:
  TaskBatchIterator* base_;
  const TrainingJob* job_;
  std::string before_;
  int64_t taken_ = 0;
};

TrainingJob::TrainingJob(JobSpec spec, Collective* collective, TrainingJobOptions options)
    : spec_(std::move(spec)),
      collective_(collective),
      timed_(std::make_unique<TimedCollective>(collective)),
      options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<TrainingJob>> TrainingJob::Create(const JobSpec& spec, Collective* collective,
                                                                 TrainingJobOptions options) {
  const int world = collective->world_size();
  const int rank = collective->rank();
  switch (spec.kind()) {
    case JOB_KIND_UNSPECIFIED:  // TRAIN, as validation normalises it
    case TRAIN:
    case PRETRAINING:
    case FINETUNING:
    case EVALUATION:
    case INFERENCE:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("kind: ", JobKind_Name(spec.kind()), " is not a job kind"));
  }
  const bool elastic = IsElasticTraining(spec);
  // ELASTIC: the ranks' shares of the global batch may differ by a row
  // (after a rank was lost), and every rank reads the whole batch.
  if (elastic ? spec.batch_size() < world : spec.batch_size() % world != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: ", spec.batch_size(), " does not split over ", world,
                                                   " workers; use a multiple of num_workers"));
  }
  std::unique_ptr<TrainingJob> job(new TrainingJob(spec, collective, std::move(options)));
  const bool inference = !job->trains();
  const int64_t rows = spec.batch_size() / world;
  if (!inference && !elastic && rows % std::max(spec.num_microbatches(), 1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_microbatches: ", spec.num_microbatches(),
                                                   " does not divide the per-worker batch of ", rows, " rows"));
  }
  try {
    // Data first: a bad task name fails before any expensive work.
    if (job->options_.task_data) {
      TY_RETURN_IF_ERROR(RegisterBundledTasks(&job->registry_));
      TY_RETURN_IF_ERROR(RegisterSpecTasks(spec, &job->registry_));
      absl::StatusOr<const Task*> task = job->registry_.Get(spec.task());
      if (!task.ok()) return absl::InvalidArgumentError(absl::StrCat("task: ", task.status().message()));
      if (!inference) {  // EVALUATION and INFERENCE read their split in Infer
        IteratorOptions data;
        data.split = spec.data().train_split();
        data.rows = elastic ? spec.batch_size() : rows;
        data.inputs_length = spec.feature_lengths().inputs();
        data.targets_length = spec.feature_lengths().targets();
        data.pack = spec.data().pack();
        data.shuffle = spec.data().shuffle();
        data.seed = static_cast<uint64_t>(spec.seed());
        data.rank = elastic ? 0 : rank;
        data.world_size = elastic ? 1 : world;
        TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(**task, data));
        job->train_batches_ = std::make_unique<TaskBatchIterator>(std::move(it));
        job->batches_ = std::make_unique<RewindableBatches>(job->train_batches_.get(), job.get());
      }
    }

    TY_ASSIGN_OR_RETURN(ModelConfig config, ResolveModelConfig(spec.model()));
    if (job->options_.task_data) {
      // Every id a task's vocabulary makes must have an embedding row.
      std::vector<std::string> tasks(spec.eval().tasks().begin(), spec.eval().tasks().end());
      tasks.push_back(spec.task());
      for (const std::string& name : tasks) {
        absl::StatusOr<const Task*> task = job->registry_.Get(name);
        if (!task.ok()) return absl::InvalidArgumentError(absl::StrCat("eval.tasks: ", task.status().message()));
        const Vocabulary& vocab = *(*task)->vocabulary;
        if (vocab.size() > config.vocab_size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "task ", name, ": its vocabulary has ", vocab.size(), " ids (", vocab.size() - vocab.extra_ids(),
              " pieces of ", vocab.path(), " and ", vocab.extra_ids(), " extra ids), more than the model's vocab_size ",
              config.vocab_size(), "; use a smaller vocabulary or a model with a larger vocab_size"));
        }
      }
    }
    ModelOptions model_options;
    model_options.device = job->options_.device;
    model_options.compute_dtype = spec.dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
    model_options.init_seed = static_cast<uint64_t>(spec.seed());
    const bool build_sharded = !inference && world > 1 &&
                               spec.data_parallel().sharding() == DataParallelConfig::PARAMETERS &&
                               job->options_.device.is_cpu();
    if (build_sharded) {
      // PARAMETERS: this rank builds only the parameters its optimizer
      // shard will own (ShardBoundaries over a model of shapes only); the
      // others are released as they are drawn.
      T5 shapes(config, torch::kMeta);
      NamedTensors meta;
      for (const auto& p : shapes->named_parameters()) meta.emplace_back(p.key(), p.value());
      const std::vector<size_t> bounds = ShardBoundaries(meta, world);
      std::set<std::string> own;
      for (size_t i = bounds[rank]; i < bounds[rank + 1]; ++i) own.insert(meta[i].first);
      model_options.hold_parameter = [own = std::move(own)](const std::string& name) { return own.count(name) > 0; };
    }
    TY_ASSIGN_OR_RETURN(job->model_, EncoderDecoderModel::Create(config, model_options));
    TY_RETURN_IF_ERROR(LearningRateCallable::Create(spec.learning_rate()).status());
    if (!inference) {
      NamedTensors params;
      for (const auto& p : job->model_->named_parameters()) params.emplace_back(p.key(), p.value());
      const DataParallelConfig::Sharding sharding = spec.data_parallel().sharding();
      if (sharding != DataParallelConfig::NONE && world > 1) {
        // The parameters' all-gather goes in rounds of a bucket per rank.
        const int64_t round = (static_cast<int64_t>(std::max(spec.data_parallel().bucket_mb(), 1)) << 20) / 4;
        TY_ASSIGN_OR_RETURN(job->optimizer_,
                            ShardedOptimizer::Create(spec.optimizer(), params, job->timed_.get(), round));
      } else {
        TY_ASSIGN_OR_RETURN(job->optimizer_, CreateOptimizer(spec.optimizer(), params));
      }
      TY_RETURN_IF_ERROR(job->BuildTrainer());
      if (build_sharded && !job->trainer_->parameters_sharded()) {
        // The model holds this rank's parameters only; nothing else could
        // read it whole.
        const absl::Status& why = job->trainer_->gatherer_setup();
        return absl::InternalError(
            absl::StrCat("building the job: the model was built sharded for PARAMETERS, and the trainer cannot "
                         "gather it: ",
                         why.ok() ? "it made no parameter gatherer" : why.message()));
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the job: ", e.what()));
  }
  return job;
}

int TrainingJob::Microbatches() const {
  const int m = std::max(spec_.num_microbatches(), 1);
  if (!elastic()) return m;
  // The spec's microbatch: batch_size / (num_workers x num_microbatches)
  // rows; the largest share of the global batch over this many ranks.
  const int64_t microbatch_rows =
      std::max<int64_t>(spec_.batch_size() / (static_cast<int64_t>(std::max(spec_.num_workers(), 1)) * m), 1);
  const int64_t largest = (spec_.batch_size() + world_size() - 1) / world_size();
  return static_cast<int>((largest + microbatch_rows - 1) / microbatch_rows);
}

absl::Status TrainingJob::BuildTrainer() {
  TY_ASSIGN_OR_RETURN(ModelConfig config, ResolveModelConfig(spec_.model()));
  TY_ASSIGN_OR_RETURN(LearningRateCallable lr, LearningRateCallable::Create(spec_.learning_rate()));
  const DataParallelConfig::Sharding sharding = spec_.data_parallel().sharding();
  TrainerOptions trainer;
  trainer.num_microbatches = Microbatches();
  trainer.uneven_microbatches = elastic();
  trainer.overlap_allreduce =
      !spec_.data_parallel().has_overlap_allreduce() || spec_.data_parallel().overlap_allreduce();
  if (spec_.data_parallel().bucket_mb() > 0) {
    trainer.allreduce_bucket_bytes = static_cast<int64_t>(spec_.data_parallel().bucket_mb()) << 20;
  }
  trainer.shard_gradients = sharding == DataParallelConfig::GRADIENTS || sharding == DataParallelConfig::PARAMETERS;
  trainer.shard_parameters = sharding == DataParallelConfig::PARAMETERS && world_size() > 1;
  trainer.overlap_allgather = spec_.data_parallel().overlap_allgather();
  trainer.loss = LossOptions::FromConfig(spec_.loss());
  trainer.seed = static_cast<uint64_t>(spec_.seed());
  trainer.summary_dir = spec_.output_dir();  // written by rank 0 only
  trainer.compute_weight_metrics = spec_.summary().weight_metrics();
  trainer.model_flops_per_step =
      3 * ForwardFlopsPerExample(config, spec_.feature_lengths().inputs(), spec_.feature_lengths().targets()) *
      static_cast<double>(spec_.batch_size());
  trainer.peak_flops_per_device = options_.peak_flops;
  if (trainer.peak_flops_per_device <= 0) {
    const torch::ScalarType dtype = spec_.dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
    trainer.peak_flops_per_device = MeasurePeakFlops(options_.device, dtype);
    if (rank() == 0 && trainer_ == nullptr) {
      spdlog::info("job {}: timing/mfu against {:.3g} TFLOP/s per device, measured by a matrix-product probe", id(),
                   trainer.peak_flops_per_device / 1e12);
    }
  }
  trainer.preemption_requested = options_.stop;
  trainer.collective_timer = timed_.get();
  trainer_ = std::make_unique<Trainer>(model_.get(), optimizer_.get(), std::move(lr), timed_.get(), trainer);
  return absl::OkStatus();
}

TrainingJob::~TrainingJob() {
  Close();
  trainer_.reset();  // the trainer (and its metric writers) go before the model
}

void TrainingJob::Close() {
  if (closed_) return;
  closed_ = true;
  if (trainer_) trainer_->Close().IgnoreError();
  // A checkpoint still being written completes (or fails) first.
  if (absl::Status s = checkpointer_.Wait(); !s.ok()) {
    spdlog::error("job {}: the last checkpoint write failed: {}", id(), s.ToString());
  }
}

int64_t TrainingJob::step() const { return trainer_ ? trainer_->step() : restored_step_; }

int64_t TrainingJob::progress() const { return trainer_ ? trainer_->progress() : restored_step_; }

absl::StatusOr<RestoreOutcome> TrainingJob::Restore(const std::string& named) {
  const RestoreConfig& restore = spec_.restore();
  if (rank() == 0 && trains() && !spec_.output_dir().empty()) {
    for (const std::string& name : RemoveUnfinishedCheckpoints(spec_.output_dir())) {
      spdlog::warn("job {}: removed {}/{}, left by a save that did not finish", id(), spec_.output_dir(), name);
    }
  }
  // Which checkpoint, read on this rank. A restart of this job (the
  // coordinator names the job's newest): that one, or if it does not read
  // back whole the newest one under output_dir that does. Otherwise (or if
  // none of the job's own reads back) the spec's choice.
  std::vector<SkippedCheckpoint> skipped;
  // A sharded optimizer keeps its own slots only (LoadState drops the
  // rest), so only those are read: the restore's memory is the shard's.
  std::set<std::string> own_slots;
  SlotFilter keep_slot;
  if (optimizer_ && !optimizer_->shard_bounds().empty()) {
    for (const auto& [name, t] : optimizer_->State()) own_slots.insert(name);
    keep_slot = [&own_slots](const std::string& slot) { return own_slots.count(slot) > 0; };
  }
  // PARAMETERS: this rank reads and assigns its own parameters only (the
  // others' are not in memory here), so a restore never holds the whole
  // model. A renaming assignment map reads everything and assigns the own.
  std::set<std::string> others;
  ParamFilter hold, keep_param;
  if (trainer_ && trainer_->parameters_sharded()) {
    const std::vector<size_t> bounds = optimizer_->shard_bounds();
    size_t i = 0;
    for (const auto& p : model_->named_parameters()) {
      if (i < bounds[rank()] || i >= bounds[rank() + 1]) others.insert(p.key());
      ++i;
    }
    hold = [&others](const std::string& name) { return others.count(name) == 0; };
    if (restore.assignment_map_size() == 0) keep_param = hold;
  }
  absl::StatusOr<TrainCheckpoint> ckpt = absl::NotFoundError("no checkpoint");
  std::string path;
  absl::Status read = [&]() -> absl::Status {
    if (!named.empty()) {
      ckpt = ReadRestartCheckpoint(named, spec_.output_dir(), &skipped, keep_slot, keep_param);
      if (ckpt.ok()) {
        path = ckpt->dir;
        return absl::OkStatus();
      }
      if (!absl::IsNotFound(ckpt.status())) {
        return absl::Status(ckpt.status().code(), absl::StrCat("restore: ", ckpt.status().message()));
      }
    }
    TY_ASSIGN_OR_RETURN(path, ChooseCheckpoint(restore, spec_.output_dir(), &skipped));
    if (!path.empty()) {
      ckpt = ReadTrainCheckpoint(path, keep_slot, keep_param);
      if (!ckpt.ok()) return absl::Status(ckpt.status().code(), absl::StrCat("restore: ", ckpt.status().message()));
    }
    const bool needs_checkpoint = spec_.kind() == FINETUNING || spec_.kind() == EVALUATION || spec_.kind() == INFERENCE;
    if (path.empty() && needs_checkpoint && !restore.fallback_to_scratch()) {
      return absl::FailedPreconditionError(absl::StrCat("restore: a ", JobKind_Name(spec_.kind()),
                                                        " job starts from a checkpoint, and none was found under ",
                                                        restore.path().empty() ? spec_.output_dir() : restore.path()));
    }
    return absl::OkStatus();
  }();
  // Every rank reads the checkpoint itself; they must all have one, and the
  // same step (the output_dir has to be on a filesystem every rank sees).
  TY_RETURN_IF_ERROR(CollectiveFailure(AgreeOnOutcome(collective_, read, "restoring the checkpoint")));
  const int64_t step = path.empty() ? -1 : ckpt->step;
  absl::StatusOr<int64_t> agreed = AgreeOnValue(collective_, step, "restore: the step of the checkpoint (-1: none)");
  if (absl::IsFailedPrecondition(agreed.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(agreed.status().message(),
                     ": the ranks found different checkpoints; output_dir must be on a filesystem "
                     "every worker shares"));
  }
  TY_RETURN_IF_ERROR(CollectiveFailure(agreed.status()));

  RestoreOutcome out;
  // The job's own checkpoints that were passed over: every rank has read
  // what it needs, so rank 0 moves the damaged ones aside (a training job
  // saves those steps again, and a save never overwrites a directory).
  std::set<std::string> seen;
  for (const SkippedCheckpoint& s : skipped) {
    if (!seen.insert(s.dir).second) continue;
    std::string note = absl::StrCat(s.dir, " passed over: ", s.why);
    spdlog::warn("job {}: {}", id(), note);
    if (rank() == 0 && trains() &&
        std::filesystem::path(s.dir).parent_path() == std::filesystem::path(spec_.output_dir()) &&
        std::filesystem::exists(s.dir)) {
      absl::StatusOr<std::string> moved = SetAsideDamagedCheckpoint(s.dir);
      if (moved.ok()) {
        absl::StrAppend(&note, " (moved aside to ", *moved, ")");
        spdlog::warn("job {}: moved {} aside to {}", id(), s.dir, *moved);
      } else {
        spdlog::error("job {}: {}", id(), std::string(moved.status().message()));
      }
    }
    out.passed_over.push_back(std::move(note));
  }
  if (path.empty()) return out;  // from scratch
  try {
    TY_RETURN_IF_ERROR(Apply(*ckpt, hold));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("restore: ", path, ": ", e.what()));
  }
  restored_step_ = ckpt->step;
  out.step = ckpt->step;
  out.checkpoint = path;
  spdlog::info("job {}: restored {} (step {}){}", id(), path, ckpt->step,
               ckpt->optimizer.empty() ? " (parameters only: a fresh optimizer)" : "");
  return out;
}

absl::Status TrainingJob::Apply(const TrainCheckpoint& ckpt, const ParamFilter& hold) {
  TY_ASSIGN_OR_RETURN(bool with_optimizer,
                      ApplyCheckpoint(ckpt, spec_.restore(), model_->network().get(), optimizer_.get(), hold));
  if (!with_optimizer || !train_batches_) return absl::OkStatus();
  // Data positions: exact when the world size is the same; otherwise every
  // rank starts at the epoch after the furthest one recorded. One position
  // is the whole global batch's (an ELASTIC job's, or one rank's), which is
  // where an ELASTIC job reads.
  if (elastic() && ckpt.data_states.size() == 1) return train_batches_->task_iterator()->Restore(ckpt.data_states[0]);
  if (!elastic() && ckpt.world_size == world_size() && static_cast<int>(ckpt.data_states.size()) == world_size()) {
    return train_batches_->task_iterator()->Restore(ckpt.data_states[rank()]);
  }
  if (ckpt.data_states.empty()) {
    // An imported checkpoint (`trainyard convert --from-t5x`): another
    // job's data, so this one's starts at its beginning.
    spdlog::info("job {}: {} has no data positions: the data starts at its beginning", id(), ckpt.dir);
    return absl::OkStatus();
  }
  const IteratorPosition resume = ResumeAfterFurthestEpoch(ckpt.data_states);
  spdlog::warn("job {}: {} has data positions for {} workers, this job has {}: every rank starts epoch {}", id(),
               ckpt.dir, ckpt.world_size, world_size(), resume.epoch);
  return train_batches_->task_iterator()->Restore(FormatIteratorState(resume));
}

absl::StatusOr<TrainChunk> TrainingJob::Train(int64_t num_steps) {
  if (!trainer_ || !batches_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id(), " is an ", JobKind_Name(spec_.kind()), " job: it runs Infer, not RunSteps"));
  }
  TrainChunk chunk;
  try {
    const auto start = std::chrono::steady_clock::now();
    const int64_t abandoned_before = trainer_->abandoned_steps();
    const int64_t first_step = trainer_->step();
    batches_->ResetTaken();
    absl::StatusOr<std::map<std::string, double>> summary = trainer_->Train(batches_.get(), num_steps);
    if (!summary.ok()) {
      if (!IsPreemptionError(summary.status())) {
        // ELASTIC: the ranks go on after a failure, from the last completed
        // step (Regroup), so a batch taken for a step that did not complete
        // goes back.
        if (elastic() && batches_->taken() > trainer_->step() - first_step) {
          TY_RETURN_IF_ERROR(batches_->PutBackLast());
          spdlog::warn("job {}: step {} failed part way; its batch was put back", id(), trainer_->step());
        }
        return CollectiveFailure(summary.status());
      }
      // Stopped between microbatches: the abandoned step's batch goes back.
      const bool abandoned = trainer_->abandoned_steps() > abandoned_before;
      TY_ASSIGN_OR_RETURN(chunk.emergency_checkpoint, WriteEmergencyCheckpoint(abandoned, &chunk.emergency_seconds));
      chunk.preempted = true;
      chunk.asked_to_stop = Raised(options_.preempted);
      return chunk;
    }
    chunk.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    chunk.summary = std::move(*summary);
    chunk.compute_seconds = trainer_->last_chunk_timing().compute_seconds;
    chunk.collective_seconds = trainer_->last_chunk_timing().collective_seconds;
    // Every rank must hold the same parameters: compare per-parameter sums
    // (bitwise: identical tensors give identical sums). With PARAMETERS
    // sharding each rank holds only its own: nothing is replicated.
    if (world_size() > 1 && !trainer_->parameters_sharded()) {
      std::vector<torch::Tensor> sums;
      for (const auto& p : model_->parameters()) sums.push_back(p.detach().sum().to(torch::kDouble).reshape({1}));
      absl::StatusOr<std::optional<Disagreement>> diverged = FindDisagreement(collective_, torch::cat(sums));
      TY_RETURN_IF_ERROR(CollectiveFailure(diverged.status()));
      if (diverged->has_value()) {
        const Disagreement& d = **diverged;
        return absl::InternalError(absl::StrCat("parameters diverged across ranks at step ", trainer_->step(),
                                                ": parameter #", d.index, " sums to ", d.lowest, " .. ", d.highest));
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("step ", trainer_->step(), ": ", e.what()));
  }
  return chunk;
}

absl::StatusOr<RegroupOutcome> TrainingJob::Regroup(Collective* collective, bool fresh) {
  if (!elastic() || !trainer_ || !train_batches_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id(), ": Regroup needs a training job with fault_tolerance ELASTIC"));
  }
  if (fresh && collective != collective_) {
    return absl::InvalidArgumentError("Regroup: a fresh rank joins on the collective it was created with");
  }
  RegroupOutcome out;
  try {
    if (!fresh) {
      // The trainer (its gradient buckets, its summary writer for rank 0)
      // belongs to the old group; gradients of a step left half done go.
      // (Always: the old group may be gone, and the new one may even sit at
      // its address.)
      if (absl::Status s = trainer_->Close(); !s.ok()) {
        spdlog::error("job {}: the summary writer: {}", id(), s.ToString());
      }
      trainer_.reset();
      for (auto& p : model_->parameters()) p.mutable_grad() = torch::Tensor();
      collective_ = collective;
      timed_ = std::make_unique<TimedCollective>(collective);
      TY_RETURN_IF_ERROR(BuildTrainer());
    }
    // Every rank's step (-1: fresh); the lowest rank at the furthest one
    // is the source.
    const TaskIterator* it = train_batches_->task_iterator();
    std::vector<torch::Tensor> steps;
    TY_RETURN_IF_ERROR(CollectiveFailure(
        collective_->AllGather(torch::tensor({fresh ? int64_t{-1} : trainer_->step()}, torch::kLong), &steps)));
    int64_t furthest = -1;
    bool differ = false;
    for (const torch::Tensor& t : steps) furthest = std::max(furthest, t.item<int64_t>());
    for (size_t r = 0; r < steps.size(); ++r) {
      const int64_t step = steps[r].item<int64_t>();
      if (step != furthest) differ = true;
      if (step == furthest && out.source_rank < 0) out.source_rank = static_cast<int>(r);
    }
    if (furthest < 0) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id(), ": regrouping ", world_size(),
                                                        " rank(s), none of which holds the training state"));
    }
    if (!differ) {
      out.source_rank = -1;
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      torch::NoGradGuard no_grad;
      std::map<std::string, torch::Tensor> state = optimizer_->State();  // the slots themselves, and the step
      torch::Tensor position = torch::tensor({it->epoch(), it->position(), it->segment()}, torch::kLong);
      // One broadcast per dtype, in a fixed order on every rank.
      std::map<int, std::vector<torch::Tensor>> by_dtype;
      for (const auto& p : model_->parameters()) by_dtype[static_cast<int>(p.scalar_type())].push_back(p.detach());
      for (auto& [name, t] : state) by_dtype[static_cast<int>(t.scalar_type())].push_back(t);
      by_dtype[static_cast<int>(position.scalar_type())].push_back(position);
      // Flat buckets of up to 64 MiB, so that a model's hundreds of
      // tensors cost a few broadcasts.
      constexpr int64_t kBucketBytes = int64_t{64} << 20;
      auto send = [&](const std::vector<torch::Tensor>& bucket) -> absl::Status {
        std::vector<torch::Tensor> flat;
        for (const torch::Tensor& t : bucket) flat.push_back(t.reshape({-1}));
        std::vector<torch::Tensor> one = {torch::cat(flat)};
        TY_RETURN_IF_ERROR(CollectiveFailure(collective_->Broadcast(one, out.source_rank)));
        int64_t offset = 0;
        for (const torch::Tensor& t : bucket) {
          const_cast<torch::Tensor&>(t).copy_(one[0].narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
        out.sent_bytes += static_cast<int64_t>(one[0].nbytes());
        return absl::OkStatus();
      };
      for (auto& [dtype, tensors] : by_dtype) {
        std::vector<torch::Tensor> bucket;
        int64_t bytes = 0;
        for (const torch::Tensor& t : tensors) {
          if (!bucket.empty() && bytes + static_cast<int64_t>(t.nbytes()) > kBucketBytes) {
            TY_RETURN_IF_ERROR(send(bucket));
            bucket.clear();
            bytes = 0;
          }
          bucket.push_back(t);
          bytes += static_cast<int64_t>(t.nbytes());
        }
        if (!bucket.empty()) TY_RETURN_IF_ERROR(send(bucket));
      }
      if (rank() != out.source_rank) {
        TY_RETURN_IF_ERROR(optimizer_->LoadState(state));
        TY_RETURN_IF_ERROR(train_batches_->task_iterator()->Restore(FormatIteratorState(
            {position[0].item<int64_t>(), position[1].item<int64_t>(), position[2].item<int64_t>()})));
        // The trainer reads its step from the optimizer when it is made.
        TY_RETURN_IF_ERROR(BuildTrainer());
      }
      out.transfer_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (fresh) restored_step_ = furthest;
    out.step = trainer_->step();
    out.state_digest = StateDigest();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("regrouping: ", e.what()));
  }
  spdlog::info("job {}: rank {} of {} at step {}{}", id(), rank(), world_size(), out.step,
               out.source_rank < 0 ? std::string(" (every rank held the same step)")
                                   : absl::StrCat(" (state of rank ", out.source_rank, ", ", out.sent_bytes,
                                                  " bytes in ", out.transfer_seconds, " s)"));
  return out;
}

uint64_t TrainingJob::StateDigest() const {
  // FNV-1a over 64-bit words (the tail bytewise), chained over the tensors
  // in a fixed order.
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  auto add = [&mix](const torch::Tensor& tensor) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    const size_t n = t.nbytes();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      mix(word);
    }
    for (; i < n; ++i) mix(bytes[i]);
    mix(n);
  };
  for (const auto& p : model_->parameters()) add(p);
  if (optimizer_) {
    for (const auto& [name, t] : optimizer_->State()) add(t);
  }
  if (train_batches_) {
    const TaskIterator* it = train_batches_->task_iterator();
    mix(static_cast<uint64_t>(it->epoch()));
    mix(static_cast<uint64_t>(it->position()));
    mix(static_cast<uint64_t>(it->segment()));
  }
  return h;
}

absl::StatusOr<EvalOutcome> TrainingJob::Evaluate() {
  if (!trainer_) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id(), " is an ", JobKind_Name(spec_.kind()), " job: it runs Infer, not Evaluate"));
  }
  spdlog::info("job {}: evaluating step {} on {} task(s)", id(), trainer_->step(), spec_.eval().tasks_size());
  EvalOutcome out;
  try {
    auto eval_batches = [&](const Task& task) -> absl::StatusOr<std::unique_ptr<BatchIterator>> {
      IteratorOptions data;
      data.split = spec_.eval().split();
      data.rows = spec_.batch_size() / world_size();
      data.inputs_length = spec_.feature_lengths().inputs();
      data.targets_length = spec_.feature_lengths().targets();
      data.pack = false;
      // With num_batches, a fixed random sample of the split (the same at
      // every eval of the job), not its first rows, which may be atypical.
      data.shuffle = spec_.eval().num_batches() > 0;
      data.seed = static_cast<uint64_t>(spec_.seed());
      data.repeat = false;
      data.rank = rank();
      data.world_size = world_size();
      TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(task, data));
      return std::unique_ptr<BatchIterator>(std::make_unique<LimitedIterator>(
          std::make_unique<TaskBatchIterator>(std::move(it)), spec_.eval().num_batches()));
    };
    std::map<std::string, std::unique_ptr<BatchIterator>> owned;
    std::map<std::string, BatchIterator*> iterators;
    for (const std::string& name : spec_.eval().tasks()) {
      TY_ASSIGN_OR_RETURN(const Task* task, registry_.Get(name));
      TY_ASSIGN_OR_RETURN(owned[name], eval_batches(*task));
      iterators[name] = owned[name].get();
    }
    absl::StatusOr<MetricsByTask> metrics = trainer_->Eval(iterators);
    // Inference evaluation: the same batches, decoded.
    std::map<std::string, MetricResults> inferred;
    // PARAMETERS: decoding reads every parameter (it calls no unit hooks).
    if (metrics.ok() && spec_.eval().infer_metrics()) {
      if (absl::Status gathered = trainer_->GatherParameters(); !gathered.ok()) metrics = gathered;
    }
    if (metrics.ok() && spec_.eval().infer_metrics()) {
      for (const std::string& name : spec_.eval().tasks()) {
        TY_ASSIGN_OR_RETURN(const Task* task, registry_.Get(name));
        TY_ASSIGN_OR_RETURN(std::unique_ptr<BatchIterator> batches, eval_batches(*task));
        std::vector<MetricFn> fns;
        for (const std::string& fn_name : task->metric_fns) {
          absl::StatusOr<MetricFn> fn = BuiltinMetricFn(fn_name);
          if (!fn.ok()) {
            return absl::Status(fn.status().code(), absl::StrCat("task ", task->name, ": ", fn.status().message()));
          }
          fns.push_back(*fn);
        }
        fns.push_back(*BuiltinMetricFn("mean_log_likelihood"));
        InferEvalOptions infer;
        infer.decode = DecodeOptionsFromSpec(spec_, rank());
        infer.rows = spec_.batch_size() / world_size();
        infer.targets_length = spec_.feature_lengths().targets();
        infer.preempted = options_.preempted;
        infer.step = trainer_->step();
        absl::StatusOr<MetricResults> values =
            InferEval(model_.get(), batches.get(), *task->vocabulary, fns, infer, collective_);
        if (!values.ok()) {
          metrics = values.status();
          break;
        }
        inferred[name] = std::move(*values);
      }
    }
    trainer_->ReleaseParameters();
    if (IsPreemptionError(metrics.status())) {
      double seconds = 0;
      TY_ASSIGN_OR_RETURN(out.emergency_checkpoint, WriteEmergencyCheckpoint(/*abandoned=*/false, &seconds));
      out.preempted = true;
      out.asked_to_stop = Raised(options_.preempted);
      return out;
    }
    if (!metrics.ok()) return CollectiveFailure(metrics.status());
    if (rank() != 0) return out;
    for (const auto& [task, values] : *metrics) {
      for (const auto& [k, v] : values) out.metrics[task + "/" + k] = v;
    }
    for (const auto& [task, values] : inferred) {
      WriteInferEval(task, values);
      for (const auto& [k, v] : values) out.infer_metrics[task + "/" + k] = v;
    }
    // Keep-best: this eval's metric belongs to the checkpoint of this step.
    const CheckpointConfig& ckpt = spec_.checkpoint();
    const double* best = nullptr;
    for (const auto* values : {&out.metrics, &out.infer_metrics}) {
      auto it = values->find(ckpt.best_metric());
      if (best == nullptr && it != values->end()) best = &it->second;
    }
    if (ckpt.keep_best() > 0 && best != nullptr) {
      if (absl::Status s = RecordCheckpointMetric(spec_.output_dir(), trainer_->step(), *best); !s.ok()) {
        spdlog::error("job {}: {}", id(), s.ToString());
      }
      ApplyRetention(spec_.output_dir(), spec_.keep_checkpoints(), ckpt.keep_best(),
                     ckpt.best_mode() == EarlyStopping::MAX);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("evaluation: ", e.what()));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> TrainingJob::GatherDataStates() {
  if (!train_batches_) return std::vector<std::string>();
  const TaskIterator* it = train_batches_->task_iterator();
  // ELASTIC: one position, of the global batches, the same on every rank
  // (and what one rank reading every batch would have).
  if (elastic()) return std::vector<std::string>{it->State()};
  std::vector<torch::Tensor> all;
  TY_RETURN_IF_ERROR(CollectiveFailure(
      collective_->AllGather(torch::tensor({it->epoch(), it->position(), it->segment()}, torch::kLong), &all)));
  std::vector<std::string> states;
  for (const torch::Tensor& t : all)
    states.push_back(FormatIteratorState({t[0].item<int64_t>(), t[1].item<int64_t>(), t[2].item<int64_t>()}));
  return states;
}

absl::StatusOr<std::string> TrainingJob::WriteEmergencyCheckpoint(bool abandoned, double* seconds) {
  // Every rank stopped at the same point; was it a preemption on any of
  // them (then write the emergency checkpoint), or an abort?
  absl::StatusOr<bool> preempted = AnyRank(collective_, Raised(options_.preempted));
  TY_RETURN_IF_ERROR(CollectiveFailure(preempted.status()));
  if (!*preempted) return absl::AbortedError(absl::StrCat("job ", id(), " was aborted at step ", step()));
  if (abandoned) {
    TY_RETURN_IF_ERROR(batches_->PutBackLast());
    spdlog::info("job {}: stopped between microbatches of step {}; its batch was put back", id(), step());
  }
  const auto t0 = std::chrono::steady_clock::now();
  TY_ASSIGN_OR_RETURN(std::string path, SaveCheckpoint(/*wait=*/true));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::warn("job {}: preempted after step {}; emergency checkpoint {} written in {:.2f} s", id(), step(),
               path.empty() ? "(rank 0's)" : path, *seconds);
  return path;
}

absl::StatusOr<std::string> TrainingJob::SaveCheckpoint(bool wait) {
  if (!trainer_) return absl::FailedPreconditionError(absl::StrCat("job ", id(), " does not train: nothing to save"));
  if (spec_.output_dir().empty()) return absl::FailedPreconditionError("SaveCheckpoint: the job has no output_dir");
  TY_ASSIGN_OR_RETURN(std::vector<std::string> states, GatherDataStates());
  // A sharded optimizer's state: every rank writes its own slots into one
  // checkpoint (version 3, trainer/train_checkpoint.h), named for this
  // save by rank 0's token. Otherwise rank 0 writes the whole state.
  const bool shards = !optimizer_->shard_bounds().empty();
  std::map<std::string, torch::Tensor> optimizer_state;
  std::string token;
  if (shards) {
    TY_ASSIGN_OR_RETURN(token, SaveToken());
    optimizer_state = optimizer_->State();
  } else {
    TY_ASSIGN_OR_RETURN(optimizer_state, optimizer_->GatherState());
    if (rank() != 0) return std::string();
  }
  const int64_t step = trainer_->step();
  const std::string dir = absl::StrCat(spec_.output_dir(), "/checkpoint_", step);
  // The output directory may not exist yet (the summary writers create it
  // in the background).
  std::error_code mkdir_error;
  std::filesystem::create_directories(spec_.output_dir(), mkdir_error);
  if (checkpointer_.last_written() == dir) return dir;  // already written (e.g. preempted at a boundary)
  if (last_save_started_ == dir) {
    // This step's save is in flight (a stop right after a boundary): wait
    // for it rather than write the same directory twice.
    if (!wait) return checkpointer_.last_written();
    absl::Status written = checkpointer_.Wait();
    if (written.ok()) return dir;
    spdlog::error("job {}: the save of {} failed ({}); writing it again", id(), dir, written.ToString());
  }
  std::string spec_json;
  (void)google::protobuf::util::MessageToJsonString(spec_, &spec_json);
  // A waited save takes the host state as it is (nothing trains until it
  // is written): no second copy of the model and its state at the
  // checkpoint. A background one copies, into the last one's buffers.
  const bool borrow = wait;
  TrainSnapshot reuse = borrow ? TrainSnapshot() : checkpointer_.TakeBuffers();
  // PARAMETERS: each rank holds, and writes, only its own parameters
  // (version 4): nothing is gathered to save.
  const bool own_params = trainer_->parameters_sharded();
  std::function<bool(const std::string&)> keep_param;
  if (own_params) {
    const std::vector<size_t> bounds = optimizer_->shard_bounds();
    std::set<std::string> mine;
    size_t i = 0;
    for (const auto& p : model_->named_parameters()) {
      if (i >= bounds[rank()] && i < bounds[rank() + 1]) mine.insert(p.key());
      ++i;
    }
    keep_param = [mine = std::move(mine)](const std::string& name) { return mine.count(name) > 0; };
  }
  TrainSnapshot snapshot =
      shards && rank() != 0 && !own_params
          ? MakeOptimizerShardSnapshot(optimizer_state, step, std::move(reuse), borrow)
          : MakeSnapshot(*model_->network(), optimizer_state, step, world_size(), std::move(states), spec_json,
                         "trainyard job " + id(), std::move(reuse), borrow, keep_param);
  if (shards) {
    snapshot.shard = rank();
    snapshot.num_shards = world_size();
    snapshot.token = token;
    if (own_params) snapshot.param_shards = world_size();
  }
  const torch::ScalarType dtype = spec_.checkpoint().save_dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat;
  const std::string output_dir = spec_.output_dir();
  const int keep = spec_.keep_checkpoints();
  const int keep_best = spec_.checkpoint().keep_best();
  const bool maximize = spec_.checkpoint().best_mode() == EarlyStopping::MAX;
  last_save_started_ = dir;
  std::function<void()> after;
  if (rank() == 0)
    after = [output_dir, keep, keep_best, maximize] { ApplyRetention(output_dir, keep, keep_best, maximize); };
  absl::StatusOr<double> waited = checkpointer_.Save(dir, std::move(snapshot), dtype, std::move(after));
  if (!waited.ok()) {
    // The previous write failed; the previous good checkpoint stays.
    spdlog::error("job {}: a checkpoint write failed: {}", id(), waited.status().ToString());
  }
  if (wait) {
    TY_RETURN_IF_ERROR(checkpointer_.Wait());
    return rank() == 0 ? dir : std::string();  // the others wrote their shards only
  }
  return rank() == 0 ? checkpointer_.last_written() : std::string();
}

absl::StatusOr<std::string> TrainingJob::SaveToken() {
  torch::Tensor token = torch::zeros({1}, torch::kLong);
  if (rank() == 0) {
    std::random_device device;
    token[0] = static_cast<int64_t>((static_cast<uint64_t>(device()) << 31) ^ device()) & ((int64_t{1} << 62) - 1);
  }
  std::vector<torch::Tensor> tensors = {token};
  TY_RETURN_IF_ERROR(collective_->Broadcast(tensors, 0));
  return absl::StrCat("s", token.item<int64_t>());
}

absl::Status TrainingJob::WaitForSaves() { return checkpointer_.Wait(); }

double MeasurePeakFlops(const c10::Device& device, torch::ScalarType dtype) {
  static Mutex mu;
  static auto* cache = new std::map<std::pair<std::string, int>, double>;
  const auto key = std::make_pair(device.str(), static_cast<int>(dtype));
  MutexLock lock(&mu);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  const int64_t n = device.is_cuda() ? 4096 : 1024;
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const torch::Tensor a = torch::ones({n, n}, options), b = torch::ones({n, n}, options);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms up
    const auto t0 = std::chrono::steady_clock::now();
    torch::Tensor c = torch::mm(a, b);
    (void)c.sum().item<double>();  // waits for the device
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0 && seconds > 0) best = std::max(best, 2.0 * n * n * n / seconds);
  }
  (*cache)[key] = best;
  return best;
}

}  // namespace trainyard
