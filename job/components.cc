#include "job/components.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_vocabulary.h"
#include "common/status_macros.h"
#include "common/torch/device.h"
#include "data/bundled.h"
#include "data/task_definition.h"
#include "data/vocabulary_choice.h"
#include "model/batch.h"
#include "spdlog/spdlog.h"
#include "spec/presets.h"
#include "trainer/learning_rate.h"
#include "trainer/sharded_optimizer.h"

namespace trainyard {

torch::Tensor DataPositionTensor(const TaskIterator& it) {
  return torch::tensor({it.epoch(), it.position(), it.segment()}, torch::kLong);
}

std::string DataPositionState(const torch::Tensor& position) {
  const torch::Tensor p = position.to(torch::kLong).reshape({-1});
  return FormatIteratorState({p[0].item<int64_t>(), p[1].item<int64_t>(), p[2].item<int64_t>()});
}

absl::StatusOr<T5Batch> RewindableBatches::Next() {
  TaskIterator* it = base_->task_iterator();
  before_ = it->State();
  ++taken_;
  // An ELASTIC global batch whose rows are its examples: only this rank's
  // rows are read; otherwise all of it, and this rank keeps its rows
  // (data_parallel.reproducible too: its summaries, the data/ counts
  // included, are the same bits on any number of ranks).
  const bool rows_only = job_->elastic() && !IsReproducibleTraining(job_->spec) && it->RowsAreExamples();
  absl::StatusOr<T5Batch> batch;
  if (rows_only) {
    const auto [first, rows] = job_->GlobalBatchShare(job_->spec.batch_size());
    batch = base_->NextRows(first, rows);
  } else {
    batch = base_->Next();
  }
  if (batch.ok()) ledger_.Add(job_->trainer->step() + 1, it->last_batch_ids());
  if (!batch.ok() || !job_->global_batches() || rows_only) return batch;
  const auto [first, rows] = job_->GlobalBatchShare(batch->batch_size());
  return batch->Slice(first, rows);
}

absl::Status RewindableBatches::PutBackLast() {
  if (before_.empty()) return absl::OkStatus();
  ledger_.DropAfter(job_->trainer->step());
  return base_->task_iterator()->Restore(before_);
}

JobComponents::JobComponents(JobSpec spec_in, Collective* collective_in, TrainingJobOptions options_in)
    : spec(std::move(spec_in)),
      options(std::move(options_in)),
      collective(collective_in),
      timed(std::make_unique<TimedCollective>(collective_in)) {
  if (collective_in->sharding_group() != collective_in) {
    timed_shards = std::make_unique<TimedCollective>(collective_in->sharding_group(), *timed);
  }
}

JobComponents::~JobComponents() { trainer.reset(); }

torch::ScalarType ComputeDtype(const JobSpec& spec) {
  return spec.dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
}

int JobComponents::Microbatches() const {
  const int m = std::max(spec.num_microbatches(), 1);
  if (!elastic()) return m;
  // The largest share of the global batch over this many ranks, at the
  // spec's microbatch size.
  const int64_t microbatch_rows = MicrobatchRows();
  const int64_t largest = (spec.batch_size() + world_size() - 1) / world_size();
  return static_cast<int>((largest + microbatch_rows - 1) / microbatch_rows);
}

int64_t JobComponents::MicrobatchRows() const {
  const int64_t m = std::max(spec.num_microbatches(), 1);
  return std::max<int64_t>(spec.batch_size() / (static_cast<int64_t>(std::max(spec.num_workers(), 1)) * m), 1);
}

std::pair<int64_t, int64_t> JobComponents::GlobalBatchShare(int64_t b) const {
  const int64_t w = world_size(), r = rank();
  if (!IsReproducibleTraining(spec)) return {r * b / w, (r + 1) * b / w - r * b / w};
  const int64_t rows = MicrobatchRows(), g = (b + rows - 1) / rows;
  const int64_t first = std::min(r * g / w * rows, b);
  return {first, std::min((r + 1) * g / w * rows, b) - first};
}

absl::Status JobComponents::BuildTrainer() {
  TY_ASSIGN_OR_RETURN(ModelConfig config, ResolveModelConfig(spec.model()));
  TY_ASSIGN_OR_RETURN(LearningRateCallable lr, LearningRateCallable::Create(spec.learning_rate()));
  const DataParallelConfig& dp = spec.data_parallel();
  TrainerOptions t;
  t.num_microbatches = Microbatches();
  t.uneven_microbatches = elastic();
  t.overlap_allreduce = !dp.has_overlap_allreduce() || dp.overlap_allreduce();
  if (dp.bucket_mb() > 0) t.allreduce_bucket_bytes = static_cast<int64_t>(dp.bucket_mb()) << 20;
  t.shard_gradients = dp.sharding() == DataParallelConfig::GRADIENTS || dp.sharding() == DataParallelConfig::PARAMETERS;
  t.shard_parameters = dp.sharding() == DataParallelConfig::PARAMETERS && sharding()->world_size() > 1;
  t.overlap_allgather = dp.overlap_allgather();
  t.loss = LossOptions::FromConfig(spec.loss());
  t.seed = static_cast<uint64_t>(spec.seed());
  t.summary_dir = spec.output_dir();  // written by rank 0 only
  t.compute_weight_metrics = spec.summary().weight_metrics();
  t.model_flops_per_step =
      3 * ForwardFlopsPerExample(config, spec.feature_lengths().inputs(), spec.feature_lengths().targets()) *
      static_cast<double>(spec.batch_size());
  const MfuPeaks peaks = ChooseMfuPeaks(
      options.peak_flops,
      options.peak_flops > 0 ? absl::StatusOr<PeakFlops>() : DevicePeakFlops(options.device, ComputeDtype(spec)),
      [&] { return MeasurePeakFlops(options.device, ComputeDtype(spec)); });
  t.peak_flops_per_device = peaks.peak;
  t.measured_peak_flops_per_device = peaks.measured;
  if (rank() == 0 && trainer == nullptr) spdlog::info("job {}: {}", id(), peaks.note);
  t.preemption_requested = options.stop;
  t.collective_timer = timed.get();
  if (timed_shards) t.sharding_collective = timed_shards.get();
  // ELASTIC with hybrid sharding: a step updates every group or none
  // (RegroupState then finds each shard at one step in every group).
  t.agree_before_update = elastic() && timed_shards != nullptr;
  // data_parallel.reproducible: this rank's microbatches are the global
  // ones of its share (GlobalBatchShare; under ELASTIC some ranks may have
  // one fewer than num_microbatches).
  if (IsReproducibleTraining(spec)) {
    t.exact_reduction = true;
    t.microbatch_rows = MicrobatchRows();
    t.global_microbatches = spec.batch_size() / t.microbatch_rows;
    t.first_global_microbatch = GlobalBatchShare(spec.batch_size()).first / t.microbatch_rows;
  }
  // The old trainer goes first: a parameter gatherer's hooks on the model
  // are removed with it.
  trainer.reset();
  trainer = std::make_unique<Trainer>(model.get(), optimizer.get(), std::move(lr), timed.get(), t);
  train_warmed_up = eval_warmed_up = false;
  return absl::OkStatus();
}

absl::Status JobComponents::WarmUpTrain() {
  if (!options.warm_up || train_warmed_up || trainer == nullptr) return absl::OkStatus();
  // The rows RewindableBatches gives this rank.
  const int64_t rows = global_batches() ? GlobalBatchShare(spec.batch_size()).second : spec.batch_size() / world_size();
  TY_ASSIGN_OR_RETURN(const double seconds,
                      trainer->CompileTrain(ShapeOnlyBatch(rows, spec.feature_lengths().inputs(),
                                                           spec.feature_lengths().targets(), spec.data().pack())));
  train_warmed_up = true;
  if (rank() == 0) spdlog::info("job {}: train step warmed up in {:.3f} s", id(), seconds);
  return absl::OkStatus();
}

absl::Status JobComponents::WarmUpEval() {
  if (!options.warm_up || eval_warmed_up || trainer == nullptr) return absl::OkStatus();
  // The rows and lengths of Evaluator's batches (unpacked).
  const T5Batch batch = ShapeOnlyBatch(spec.batch_size() / world_size(), spec.feature_lengths().inputs(),
                                       spec.feature_lengths().targets(), /*packed=*/false);
  std::map<std::string, T5Batch> batches;
  for (const std::string& task : spec.eval().tasks()) batches[task] = batch;
  TY_ASSIGN_OR_RETURN(const auto seconds, trainer->CompileEval(batches));
  eval_warmed_up = true;
  double total = 0;
  for (const auto& [task, s] : seconds) total += s;
  if (rank() == 0) spdlog::info("job {}: eval step warmed up in {:.3f} s", id(), total);
  return absl::OkStatus();
}

absl::Status JobComponents::MoveTo(Collective* next) {
  // The trainer (its gradient buckets, its summary writer for rank 0)
  // belongs to the old group; gradients of a step left half done go.
  // (Always: the old group may be gone, and the new one may even sit at its
  // address.)
  if (absl::Status s = trainer->Close(); !s.ok()) spdlog::error("job {}: the summary writer: {}", id(), s.ToString());
  // data_parallel.reproducible: the exact sum's scales of the last step
  // done are state; the new trainer sums at them.
  const std::map<std::string, int> exponents = trainer->ExactSumExponents();
  trainer.reset();
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  collective = next;
  timed = std::make_unique<TimedCollective>(next);
  timed_shards.reset();
  if (next->sharding_group() != next) timed_shards = std::make_unique<TimedCollective>(next->sharding_group(), *timed);
  // A sharded optimizer exchanges its shards in the new group (hybrid
  // sharding: this rank's new shard group, where it has the same place).
  TY_RETURN_IF_ERROR(optimizer->MoveTo(sharding()));
  TY_RETURN_IF_ERROR(BuildTrainer());
  return exponents.empty() ? absl::OkStatus() : trainer->RestoreExactSumExponents(exponents);
}

absl::StatusOr<VocabularyPlan> JobComponents::PlanVocabulary(const std::string& checkpoint) const {
  std::string named = options.vocabulary_path;
  int extra_ids = options.vocabulary_extra_ids;
  std::string what = "vocabulary_path: ";
  if (options.task_data) {
    TY_ASSIGN_OR_RETURN(const Task* task, registry->Get(spec.task()));
    named = task->vocabulary->path();
    extra_ids = task->vocabulary->extra_ids();
    what = absl::StrCat("task ", spec.task(), ": ");
    if (!checkpoint.empty()) what = absl::StrCat("restore: a ", JobKind_Name(spec.kind()), " job's ", what);
  } else if (!checkpoint.empty()) {
    what = "restore: ";
  }
  auto fail = [&](const absl::Status& s) { return absl::Status(s.code(), absl::StrCat(what, s.message())); };
  absl::StatusOr<VocabularyChoice> choice =
      ChooseVocabulary(checkpoint, named, extra_ids, trains() ? VocabularyUse::kTrain : VocabularyUse::kInfer);
  if (!choice.ok()) return fail(choice.status());
  absl::StatusOr<std::unique_ptr<Vocabulary>> loaded = Vocabulary::Load(choice->path, choice->extra_ids);
  if (!loaded.ok()) return fail(loaded.status());
  VocabularyPlan plan;
  plan.vocabulary = std::shared_ptr<const Vocabulary>(std::move(*loaded));
  const int64_t embeddings = model->network()->config().vocab_size();
  if (plan.vocabulary->size() > embeddings) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        choice->path, " has ", plan.vocabulary->size(), " ids (", plan.vocabulary->size() - choice->extra_ids,
        " pieces and ", choice->extra_ids, " extra ids), more than the model's vocab_size ", embeddings)));
  }
  absl::StatusOr<std::string> bytes = ReadVocabularyFile(choice->path);
  if (!bytes.ok()) return fail(bytes.status());
  plan.model = std::move(*bytes);
  if (choice->replaces_task && options.task_data) {
    spdlog::info("job {}: the tasks are read in {}, the vocabulary of {}", id(), choice->path, checkpoint);
    plan.registry = std::make_unique<TaskRegistry>();
    TY_RETURN_IF_ERROR(RegisterBundledTasks(plan.registry.get(), choice->path));
    TY_RETURN_IF_ERROR(RegisterSpecTasks(spec, plan.registry.get(), choice->path));
  }
  return plan;
}

void JobComponents::UseVocabulary(VocabularyPlan plan) {
  vocabulary = std::move(plan.vocabulary);
  vocabulary_model = std::move(plan.model);
  if (plan.registry) registry = std::move(plan.registry);
}

namespace {

absl::Status CheckKind(JobKind kind) {
  switch (kind) {
    case JOB_KIND_UNSPECIFIED:  // TRAIN, as validation normalises it
    case TRAIN:
    case PRETRAINING:
    case FINETUNING:
    case EVALUATION:
    case INFERENCE:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat("kind: ", JobKind_Name(kind), " is not a job kind"));
  }
}

// The task registry and, for training kinds, the train data: every rank
// reads its shard of the split (ELASTIC: the whole global batch, sliced by
// RewindableBatches).
absl::Status AssembleData(JobComponents* job) {
  const JobSpec& spec = job->spec;
  TY_RETURN_IF_ERROR(RegisterBundledTasks(job->registry.get()));
  TY_RETURN_IF_ERROR(RegisterSpecTasks(spec, job->registry.get()));
  absl::StatusOr<const Task*> task = job->registry->Get(spec.task());
  if (!task.ok()) return absl::InvalidArgumentError(absl::StrCat("task: ", task.status().message()));
  if (!job->trains()) return absl::OkStatus();  // EVALUATION and INFERENCE read their split in Infer
  const bool global = job->global_batches();
  IteratorOptions data;
  data.split = spec.data().train_split();
  data.rows = global ? spec.batch_size() : spec.batch_size() / job->world_size();
  data.inputs_length = spec.feature_lengths().inputs();
  data.targets_length = spec.feature_lengths().targets();
  data.pack = spec.data().pack();
  data.shuffle = spec.data().shuffle();
  data.seed = static_cast<uint64_t>(spec.seed());
  data.rank = global ? 0 : job->rank();
  data.world_size = global ? 1 : job->world_size();
  TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(**task, data));
  job->train_batches = std::make_unique<TaskBatchIterator>(std::move(it));
  job->batches = std::make_unique<RewindableBatches>(job->train_batches.get(), job);
  return absl::OkStatus();
}

// The optimizer over the model's parameters: sharded over the ranks when
// the spec shards the state, else one whole optimizer per rank.
absl::Status AssembleOptimizer(JobComponents* job) {
  NamedTensors params;
  for (const auto& p : job->model->named_parameters()) params.emplace_back(p.key(), p.value());
  const DataParallelConfig& dp = job->spec.data_parallel();
  if (dp.sharding() != DataParallelConfig::NONE && job->sharding()->world_size() > 1) {
    // The parameters' all-gather goes in rounds of a bucket per rank.
    const int64_t round = (static_cast<int64_t>(std::max(dp.bucket_mb(), 1)) << 20) / 4;
    TY_ASSIGN_OR_RETURN(job->optimizer,
                        ShardedOptimizer::Create(job->spec.optimizer(), params, job->sharding(), round));
  } else {
    TY_ASSIGN_OR_RETURN(job->optimizer, CreateOptimizer(job->spec.optimizer(), params));
  }
  if (job->shards.sharded() && job->optimizer->shard_bounds() != job->shards.bounds()) {
    return absl::InternalError("building the job: the optimizer's shards differ from the job's shard plan");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckBatchSplits(const JobSpec& spec, int world_size) {
  const bool inference = !IsTrainingKind(spec.kind());
  return CheckBatchSplit(spec.batch_size(), world_size, inference ? 0 : std::max(spec.num_microbatches(), 1),
                         IsElasticTraining(spec));
}

absl::StatusOr<std::unique_ptr<JobComponents>> AssembleComponents(const JobSpec& spec, Collective* collective,
                                                                  TrainingJobOptions options) {
  TY_RETURN_IF_ERROR(CheckKind(spec.kind()));
  TY_RETURN_IF_ERROR(CheckBatchSplits(spec, collective->world_size()));
  if (IsReproducibleTraining(spec) && !options.device.is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_parallel.reproducible: true on device ", options.device.str(),
        ": only CPU workers are reproducible so far (CUDA's matrix products and backward kernels may sum in "
        "another order from run to run; not made deterministic and measured yet)"));
  }
  auto job = std::make_unique<JobComponents>(spec, collective, std::move(options));
  try {
    // Data first: a bad task name fails before any expensive work.
    if (job->options.task_data) TY_RETURN_IF_ERROR(AssembleData(job.get()));
    TY_ASSIGN_OR_RETURN(ModelConfig config, ResolveModelConfig(spec.model()));
    if (job->options.task_data) TY_RETURN_IF_ERROR(CheckTaskVocabularies(spec, *job->registry, config.vocab_size()));
    ModelOptions model_options;
    model_options.device = job->options.device;
    model_options.compute_dtype = ComputeDtype(spec);
    model_options.init_seed = static_cast<uint64_t>(spec.seed());
    const int shards = job->sharding()->world_size();
    if (job->trains() && shards > 1 && spec.data_parallel().sharding() == DataParallelConfig::PARAMETERS) {
      // The plan over a model of shapes only; on the CPU this rank then
      // builds only the parameters it owns (the others are released as
      // they are drawn).
      T5 shapes(config, torch::kMeta);
      NamedTensors meta;
      for (const auto& p : shapes->named_parameters()) meta.emplace_back(p.key(), p.value());
      job->shards = ShardPlan::Make(meta, shards, job->sharding()->rank());
      if (job->options.device.is_cpu()) model_options.hold_parameter = job->shards.OwnFilter();
    }
    TY_ASSIGN_OR_RETURN(job->model, EncoderDecoderModel::Create(config, model_options));
    // The task's (the owner's) vocabulary until a restore says otherwise.
    TY_ASSIGN_OR_RETURN(VocabularyPlan vocabulary, job->PlanVocabulary(""));
    job->UseVocabulary(std::move(vocabulary));
    TY_RETURN_IF_ERROR(LearningRateCallable::Create(spec.learning_rate()).status());
    if (!job->trains()) return job;
    TY_RETURN_IF_ERROR(AssembleOptimizer(job.get()));
    TY_RETURN_IF_ERROR(job->BuildTrainer());
    if (model_options.hold_parameter && !job->trainer->parameters_sharded()) {
      // The model holds this rank's parameters only; nothing else could
      // read it whole.
      const absl::Status& why = job->trainer->gatherer_setup();
      return absl::InternalError(absl::StrCat(
          "building the job: the model was built sharded for PARAMETERS, and the trainer cannot gather it: ",
          why.ok() ? "it made no parameter gatherer" : why.message()));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the job: ", e.what()));
  }
  return job;
}

}  // namespace trainyard
