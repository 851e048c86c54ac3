#include "worker/worker_core.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collective/gloo_collective.h"
#ifdef TRAINYARD_WITH_NCCL
#include "collective/nccl_collective.h"
#endif
#include "common/jobspec.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/bundled.h"
#include "data/task_definition.h"
#include "evaluation/metric_fns.h"
#include "interactive/interactive_model.h"
#include "data/iterator.h"
#include "model/encoder_decoder_model.h"
#include "model/presets.h"
#include "model/weights.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"
#include "nlohmann/json.hpp"
#include "trainer/learning_rate.h"
#include "trainer/metrics_manager.h"
#include "trainer/optimizer.h"
#include "trainer/restore.h"
#include "trainer/task_batches.h"
#include "trainer/train_checkpoint.h"
#include "trainer/trainer.h"

namespace trainyard {
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

// The train batches, remembering the data position before the batch taken
// last, so that a step abandoned between microbatches (a preemption) can
// put its batch back before the emergency checkpoint records the position.
class RewindableBatches : public BatchIterator {
 public:
  explicit RewindableBatches(TaskBatchIterator* base) : base_(base) {}
  absl::StatusOr<T5Batch> Next() override {
    before_ = base_->task_iterator()->State();
    return base_->Next();
  }
  std::map<std::string, double> TakeDataMetrics() override { return base_->TakeDataMetrics(); }
  absl::Status PutBackLast() {
    return before_.empty() ? absl::OkStatus() : base_->task_iterator()->Restore(before_);
  }

 private:
  TaskBatchIterator* base_;
  std::string before_;
};

// A collective's failure seen by a live worker is a consequence (a peer
// died or stalled), not a reason to blame this rank's transport.
absl::Status CollectiveFailure(const absl::Status& s) {
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
    return absl::AbortedError(absl::StrCat("collective failed (a peer left or stalled): ", s.message()));
  }
  return s;
}

}  // namespace

struct WorkerCore::Job {
  std::string id;
  JobSpec spec;
  int rank = 0;
  int world_size = 1;
  std::atomic<bool> stop{false};     // the trainer's stop request (abort or preemption)
  std::atomic<bool> preempt{false};  // this worker was asked to stop: checkpoint first
  std::string stop_reason;  // guarded by busy
  std::mutex busy;          // held while a call runs the job
  TaskRegistry registry;
  std::string vocabulary_path;
  std::unique_ptr<Collective> collective;
  std::unique_ptr<EncoderDecoderModel> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<TaskBatchIterator> train_batches;
  std::unique_ptr<RewindableBatches> batches;  // over train_batches
  AsyncCheckpointer checkpointer;  // rank 0
  std::string last_save_started;   // rank 0: the directory of the last Save
  int64_t restored_step = 0;       // the restored checkpoint's step
  std::string restored_dir;        // "" from scratch
  std::vector<std::string> restore_notes;  // checkpoints passed over, and why

  ~Job() {
    // The trainer (and its metric writers) go before the model and the
    // collective it points to.
    trainer.reset();
  }
};

namespace {

absl::Status NotATrainingJob(const std::string& id, JobKind kind, const char* call) {
  return absl::FailedPreconditionError(
      absl::StrCat("job ", id, " is an ", JobKind_Name(kind), " job: it runs Infer, not ", call));
}

}  // namespace

WorkerCore::WorkerCore(WorkerCoreOptions options) : options_(std::move(options)) {
  if (MetricsRegistry* r = options_.metrics) {
    metrics_.steps = r->AddCounter("trainyard_worker_steps_total", "Train steps completed by this worker.");
    metrics_.step_seconds = r->AddHistogram("trainyard_worker_step_seconds", "Wall time of a train step (chunk mean).",
                                            MetricsRegistry::LatencyBuckets());
    metrics_.tokens_per_second =
        r->AddGauge("trainyard_worker_tokens_per_second", "Target tokens per second of the last chunk (all ranks).");
    metrics_.allreduce_seconds = r->AddHistogram("trainyard_worker_allreduce_seconds",
                                                 "Time per step in the gradient all-reduce (chunk mean).",
                                                 MetricsRegistry::LatencyBuckets());
    metrics_.checkpoint_seconds = r->AddHistogram(
        "trainyard_worker_checkpoint_seconds", "Time to write a checkpoint (rank 0).", MetricsRegistry::LatencyBuckets());
    metrics_.steps->Init();
    metrics_.step_seconds->Init();
    metrics_.tokens_per_second->Set(0);
    metrics_.allreduce_seconds->Init();
    metrics_.checkpoint_seconds->Init();
  }
}

WorkerCore::~WorkerCore() {
  std::vector<std::thread> teardowns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job_) job_->stop = true;
    teardowns.swap(teardowns_);
  }
  for (std::thread& t : teardowns) t.join();
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job.swap(job_);
  }
  if (job) std::lock_guard<std::mutex> busy(job->busy);
}

struct WorkerCore::Session {
  std::string id;
  std::mutex busy;  // one call at a time
  std::unique_ptr<Collective> collective;  // with more than one worker
  std::unique_ptr<InteractiveModel> model;  // declared last: goes before its collective
};

std::string WorkerCore::job_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (session_) return session_->id;
  return job_ ? job_->id : "";
}

int64_t WorkerCore::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return job_ && job_->trainer ? job_->trainer->progress() : 0;
}

absl::StatusOr<std::shared_ptr<WorkerCore::Job>> WorkerCore::Find(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!job_ || job_->id != job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("this worker does not hold job '", job_id, "'", job_ ? " (it holds '" + job_->id + "')" : ""));
  }
  return job_;
}

absl::StatusOr<StartJobResponse> WorkerCore::StartJob(const StartJobRequest& request) {
  const JobSpec& spec = request.spec();
  const int world = request.world_size();
  const int rank = request.rank();
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("StartJob: rank ", rank, " is not in [0, ", world, ")"));
  }
  const bool inference = spec.kind() == EVALUATION || spec.kind() == INFERENCE;
  switch (spec.kind()) {
    case TRAIN:
    case PRETRAINING:
    case FINETUNING:
    case EVALUATION:
    case INFERENCE:
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("kind: ", JobKind_Name(spec.kind()), " is not a job kind"));
  }
  if (spec.batch_size() % world != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: ", spec.batch_size(), " does not split over ", world,
                                                   " workers; use a multiple of num_workers"));
  }
  const int64_t rows = spec.batch_size() / world;
  if (!inference && rows % std::max(spec.num_microbatches(), 1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_microbatches: ", spec.num_microbatches(),
                                                   " does not divide the per-worker batch of ", rows, " rows"));
  }
  auto job = std::make_shared<Job>();
  job->id = request.job_id();
  job->spec = spec;
  job->rank = rank;
  job->world_size = world;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job_) return absl::FailedPreconditionError(absl::StrCat("this worker is busy with job '", job_->id, "'"));
    if (session_) {
      return absl::FailedPreconditionError(absl::StrCat("this worker is busy with session '", session_->id, "'"));
    }
    job_ = job;  // claims the worker; released below on failure
  }
  SetLogJob(job->id, rank);
  auto release = [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (job_ == job) job_.reset();
    SetLogJob("", -1);
    return s;
  };
  std::lock_guard<std::mutex> busy(job->busy);
  const auto start = std::chrono::steady_clock::now();
  try {
    // Data first: a bad task name fails before any expensive work.
    if (absl::Status s = RegisterBundledTasks(&job->registry); !s.ok()) return release(s);
    for (const TaskDefinition& def : spec.task_definitions()) {
      if (absl::Status s = RegisterTaskDefinition(def, &job->registry); !s.ok()) {
        return release(absl::Status(s.code(), absl::StrCat("task_definitions: ", s.message())));
      }
    }
    absl::StatusOr<const Task*> task = job->registry.Get(spec.task());
    if (!task.ok()) return release(absl::InvalidArgumentError(absl::StrCat("task: ", task.status().message())));
    if (!inference) {  // EVALUATION and INFERENCE read their split in Infer
      IteratorOptions data;
      data.split = spec.data().train_split();
      data.rows = rows;
      data.inputs_length = spec.feature_lengths().inputs();
      data.targets_length = spec.feature_lengths().targets();
      data.pack = spec.data().pack();
      data.shuffle = spec.data().shuffle();
      data.seed = static_cast<uint64_t>(spec.seed());
      data.rank = rank;
      data.world_size = world;
      absl::StatusOr<std::unique_ptr<TaskIterator>> it = TaskIterator::Create(**task, data);
      if (!it.ok()) return release(it.status());
      job->train_batches = std::make_unique<TaskBatchIterator>(std::move(*it));
      job->batches = std::make_unique<RewindableBatches>(job->train_batches.get());
    }

    absl::StatusOr<ModelConfig> config = ResolveModelConfig(spec.model());
    if (!config.ok()) return release(config.status());
    ModelOptions model_options;
    model_options.device = options_.device;
    model_options.compute_dtype = spec.dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
    model_options.init_seed = static_cast<uint64_t>(spec.seed());
    absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(*config, model_options);
    if (!model.ok()) return release(model.status());
    job->model = std::move(*model);
    absl::StatusOr<LearningRateCallable> lr = LearningRateCallable::Create(spec.learning_rate());
    if (!lr.ok()) return release(lr.status());
    if (!inference) {
      NamedTensors params;
      for (const auto& p : job->model->named_parameters()) params.emplace_back(p.key(), p.value());
      absl::StatusOr<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(spec.optimizer(), params);
      if (!optimizer.ok()) return release(optimizer.status());
      job->optimizer = std::move(*optimizer);
    }

    if (world == 1) {
      job->collective = std::make_unique<LocalCollective>();
    } else {
      if (!options_.store_factory) return release(absl::FailedPreconditionError("no rendezvous store configured"));
      std::shared_ptr<Store> store = options_.store_factory(absl::StrCat(job->id, "/", request.attempt()));
      absl::StatusOr<std::unique_ptr<Collective>> collective;
      if (options_.device.is_cuda()) {
#ifdef TRAINYARD_WITH_NCCL
        NcclOptions nccl;
        nccl.device = options_.device.index();
        nccl.timeout = options_.collective_timeout;
        collective = NcclCollective::Create(rank, world, std::move(store), nccl);
#else
        return release(absl::FailedPreconditionError("a CUDA device needs a build with NCCL (--config=cuda)"));
#endif
      } else {
        GlooOptions gloo;
        gloo.hostname = options_.host_address;
        gloo.timeout = options_.collective_timeout;
        collective = GlooCollective::Create(rank, world, std::move(store), gloo);
      }
      if (!collective.ok()) return release(CollectiveFailure(collective.status()));
      job->collective = std::move(*collective);
    }

    TrainerOptions trainer;
    trainer.num_microbatches = std::max(spec.num_microbatches(), 1);
    trainer.overlap_allreduce = !spec.data_parallel().has_overlap_allreduce() || spec.data_parallel().overlap_allreduce();
    if (spec.data_parallel().bucket_mb() > 0) {
      trainer.allreduce_bucket_bytes = static_cast<int64_t>(spec.data_parallel().bucket_mb()) << 20;
    }
    trainer.loss = LossOptions::FromConfig(spec.loss());
    trainer.seed = static_cast<uint64_t>(spec.seed());
    trainer.summary_dir = spec.output_dir();  // written by rank 0 only
    trainer.preemption_requested = &job->stop;
    if (rank == 0) {
      for (const std::string& name : RemoveUnfinishedCheckpoints(spec.output_dir())) {
        spdlog::warn("job {}: removed {}/{}, left by a save that did not finish", job->id, spec.output_dir(), name);
      }
    }
    if (absl::Status s = Restore(*job, request.restore_checkpoint()); !s.ok()) return release(s);
    if (!inference) {
      job->trainer = std::make_unique<Trainer>(job->model.get(), job->optimizer.get(), std::move(*lr),
                                               job->collective.get(), trainer);
    }
    if (rank == 0) {
      std::error_code ec;
      std::filesystem::create_directories(spec.output_dir(), ec);
      if (ec) {
        return release(absl::FailedPreconditionError(
            absl::StrCat("output_dir: cannot create ", spec.output_dir(), ": ", ec.message())));
      }
      std::ofstream(spec.output_dir() + "/config.textproto") << FormatJobSpecText(spec);
    }
  } catch (const std::exception& e) {
    return release(absl::InternalError(absl::StrCat("building the job: ", e.what())));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("job {}: rank {}/{} ready in {:.2f} s ({} rows per batch on this rank)", job->id, rank, world,
               seconds, rows);
  StartJobResponse response;
  response.set_start_step(job->trainer ? job->trainer->step() : job->restored_step);
  response.set_restored_checkpoint(job->restored_dir);
  for (const std::string& note : job->restore_notes) response.add_passed_over(note);
  return response;
}

absl::StatusOr<RunStepsResponse> WorkerCore::RunSteps(const RunStepsRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  std::lock_guard<std::mutex> busy(job->busy);
  if (!job->trainer) return NotATrainingJob(job->id, job->spec.kind(), "RunSteps");
  // An abort refuses new steps; a preemption does not: the ranks run into
  // the agreed stop at the first step boundary and write the emergency
  // checkpoint together.
  if (job->stop && !job->preempt) {
    return absl::AbortedError(absl::StrCat("job ", job->id, " was aborted: ", job->stop_reason));
  }
  if (request.first_step() != job->trainer->step() || request.num_steps() <= 0) {
    return absl::FailedPreconditionError(absl::StrCat("RunSteps(", request.first_step(), ", ", request.num_steps(),
                                                      "): this rank is at step ", job->trainer->step()));
  }
  RunStepsResponse response;
  try {
    const auto start = std::chrono::steady_clock::now();
    const int64_t abandoned_before = job->trainer->abandoned_steps();
    absl::StatusOr<std::map<std::string, double>> summary =
        job->trainer->Train(job->batches.get(), request.num_steps());
    if (!summary.ok()) {
      if (!IsPreemptionError(summary.status())) return CollectiveFailure(summary.status());
      // Stopped between microbatches: the abandoned step's batch goes back.
      const bool abandoned = job->trainer->abandoned_steps() > abandoned_before;
      TY_ASSIGN_OR_RETURN(EmergencyCheckpoint emergency, WriteEmergencyCheckpoint(*job, abandoned));
      const std::string& path = emergency.path;
      const double seconds = emergency.seconds;
      response.set_last_step(job->trainer->step());
      response.set_preempted(true);
      response.set_asked_to_stop(job->preempt);
      response.set_checkpoint(path);
      if (!path.empty()) (*response.mutable_metrics())["timing/emergency_checkpoint_seconds"] = seconds;
      return response;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Every rank must hold the same parameters: compare per-parameter sums
    // (bitwise: identical tensors give identical sums).
    if (job->world_size > 1) {
      std::vector<torch::Tensor> sums;
      for (const auto& p : job->model->parameters()) sums.push_back(p.detach().sum().to(torch::kDouble).reshape({1}));
      torch::Tensor mine = torch::cat(sums);
      std::vector<torch::Tensor> hi = {mine.clone()}, lo = {mine.clone()};
      TY_RETURN_IF_ERROR(CollectiveFailure(job->collective->AllReduce(hi, ReduceOp::kMax)));
      TY_RETURN_IF_ERROR(CollectiveFailure(job->collective->AllReduce(lo, ReduceOp::kMin)));
      if (!torch::equal(hi[0], lo[0])) {
        const int64_t worst = (hi[0] - lo[0]).abs().argmax().item<int64_t>();
        return absl::InternalError(absl::StrCat("parameters diverged across ranks at step ", job->trainer->step(),
                                                ": parameter #", worst, " sums to ", lo[0][worst].item<double>(),
                                                " .. ", hi[0][worst].item<double>()));
      }
    }
    const int64_t last = job->trainer->step();
    response.set_last_step(last);
    for (const auto& [k, v] : *summary) (*response.mutable_metrics())[k] = v;
    response.set_seconds_per_step(seconds / static_cast<double>(request.num_steps()));
    if (metrics_.steps != nullptr) {
      metrics_.steps->Increment({}, static_cast<double>(request.num_steps()));
      metrics_.step_seconds->Observe(response.seconds_per_step());
      if (auto it = summary->find("timing/target_tokens"); it != summary->end() && seconds > 0) {
        metrics_.tokens_per_second->Set(it->second / seconds);
      }
      if (auto it = summary->find("timing/allreduce_seconds_per_step"); it != summary->end()) {
        metrics_.allreduce_seconds->Observe(it->second);
      }
    }
    if (request.save_checkpoint()) {
      // The job's last chunk waits for its checkpoint to be durable.
      const bool last_chunk = last >= job->spec.total_steps();
      const auto t0 = std::chrono::steady_clock::now();
      TY_ASSIGN_OR_RETURN(std::string durable, SaveCheckpoint(*job, !job->spec.checkpoint().async() || last_chunk));
      if (job->rank == 0) {
        (*response.mutable_metrics())["timing/checkpoint_stall_seconds"] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        (*response.mutable_metrics())["timing/checkpoint_seconds"] = job->checkpointer.last_write_seconds();
        if (metrics_.checkpoint_seconds != nullptr) {
          metrics_.checkpoint_seconds->Observe(job->checkpointer.last_write_seconds());
        }
      }
      response.set_checkpoint(durable);
    } else if (job->rank == 0) {
      response.set_checkpoint(job->checkpointer.last_written());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("step ", job->trainer->step(), ": ", e.what()));
  }
  return response;
}

absl::StatusOr<EvaluateResponse> WorkerCore::Evaluate(const EvaluateRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  std::lock_guard<std::mutex> busy(job->busy);
  if (!job->trainer) return NotATrainingJob(job->id, job->spec.kind(), "Evaluate");
  // A preempted rank still evaluates: it stops at the first batch, with
  // the others, into the emergency checkpoint.
  if (job->stop && !job->preempt) return absl::AbortedError(absl::StrCat("job ", job->id, " was aborted"));
  const JobSpec& spec = job->spec;
  spdlog::info("job {}: evaluating step {} on {} task(s)", job->id, job->trainer->step(), spec.eval().tasks_size());
  EvaluateResponse response;
  try {
    std::map<std::string, std::unique_ptr<BatchIterator>> owned;
    std::map<std::string, BatchIterator*> iterators;
    for (const std::string& name : spec.eval().tasks()) {
      TY_ASSIGN_OR_RETURN(const Task* task, job->registry.Get(name));
      IteratorOptions data;
      data.split = spec.eval().split();
      data.rows = spec.batch_size() / job->world_size;
      data.inputs_length = spec.feature_lengths().inputs();
      data.targets_length = spec.feature_lengths().targets();
      data.pack = false;
      // With num_batches, a fixed random sample of the split (the same at
      // every eval of the job), not its first rows, which may be atypical.
      data.shuffle = spec.eval().num_batches() > 0;
      data.seed = static_cast<uint64_t>(spec.seed());
      data.repeat = false;
      data.rank = job->rank;
      data.world_size = job->world_size;
      TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(*task, data));
      owned[name] = std::make_unique<LimitedIterator>(std::make_unique<TaskBatchIterator>(std::move(it)),
                                                      spec.eval().num_batches());
      iterators[name] = owned[name].get();
    }
    absl::StatusOr<MetricsByTask> metrics = job->trainer->Eval(iterators);
    if (IsPreemptionError(metrics.status())) {
      TY_ASSIGN_OR_RETURN(EmergencyCheckpoint emergency, WriteEmergencyCheckpoint(*job, /*abandoned=*/false));
      response.set_preempted(true);
      response.set_asked_to_stop(job->preempt);
      response.set_checkpoint(emergency.path);
      return response;
    }
    if (!metrics.ok()) return CollectiveFailure(metrics.status());
    if (job->rank == 0) {
      for (const auto& [task, values] : *metrics) {
        for (const auto& [k, v] : values) (*response.mutable_metrics())[task + "/" + k] = v;
      }
      // Keep-best: this eval's metric belongs to the checkpoint of this step.
      const CheckpointConfig& ckpt = spec.checkpoint();
      auto best = response.metrics().find(ckpt.best_metric());
      if (ckpt.keep_best() > 0 && best != response.metrics().end()) {
        const int64_t step = job->trainer->step();
        if (absl::Status s = RecordCheckpointMetric(spec.output_dir(), step, best->second); !s.ok()) {
          spdlog::error("job {}: {}", job->id, s.ToString());
        }
        ApplyRetention(spec.output_dir(), spec.keep_checkpoints(), ckpt.keep_best(),
                       ckpt.best_mode() == EarlyStopping::MAX);
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("evaluation: ", e.what()));
  }
  return response;
}

absl::StatusOr<InferResponse> WorkerCore::Infer(const InferRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  std::lock_guard<std::mutex> busy(job->busy);
  const JobSpec& spec = job->spec;
  if (spec.kind() != EVALUATION && spec.kind() != INFERENCE) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job->id, " is a ", JobKind_Name(spec.kind()), " job: Infer runs EVALUATION and INFERENCE jobs"));
  }
  const InferenceConfig& config = spec.inference();
  InferResponse response;
  try {
    TY_ASSIGN_OR_RETURN(const Task* task, job->registry.Get(spec.task()));
    IteratorOptions data;
    data.split = config.split();
    data.rows = spec.batch_size() / job->world_size;
    data.inputs_length = spec.feature_lengths().inputs();
    data.targets_length = spec.feature_lengths().targets();
    data.pack = false;
    data.shuffle = false;  // the split in its order: shard r holds examples r, r+W, ...
    data.repeat = false;
    data.rank = job->rank;
    data.world_size = job->world_size;
    TY_ASSIGN_OR_RETURN(std::unique_ptr<TaskIterator> it, TaskIterator::Create(*task, data));
    DecodeOptions decode;
    switch (config.method()) {
      case InferenceConfig::BEAM:
        decode.method = DecodeOptions::Method::kBeam;
        break;
      case InferenceConfig::SAMPLE:
        decode.method = DecodeOptions::Method::kSample;
        break;
      default:
        decode.method = DecodeOptions::Method::kGreedy;
    }
    decode.max_decode_length = config.max_decode_length();
    if (config.beam_size() > 0) decode.beam_size = config.beam_size();
    if (config.has_alpha()) decode.alpha = config.alpha();
    if (config.has_temperature()) decode.temperature = config.temperature();
    decode.top_k = config.top_k();
    decode.top_p = config.top_p();
    decode.seed = static_cast<uint64_t>(spec.seed()) + static_cast<uint64_t>(job->rank);
    decode.compute_dtype = spec.dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
    const Vocabulary& vocab = *task->vocabulary;
    auto text = [&](const torch::Tensor& row) { return DecodeRow(vocab, row); };
    // This rank's shard, written as JSON lines with each example's index in
    // the split.
    const std::string dir = spec.output_dir() + "/inference";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat("output_dir: cannot create ", dir, ": ", ec.message()));
    const std::string base = absl::StrCat(dir, "/", spec.task(), "-", config.split());
    const std::string shard = absl::StrCat(base, ".shard-", job->rank, "-of-", job->world_size, ".jsonl");
    std::ofstream out(shard, std::ios::trunc);
    int64_t k = 0;
    for (int b = 0; config.num_batches() == 0 || b < config.num_batches(); ++b) {
      if (job->stop) return absl::AbortedError(absl::StrCat("job ", job->id, " was stopped: ", job->stop_reason));
      absl::StatusOr<ConvertedBatch> converted = it->Next();
      if (absl::IsOutOfRange(converted.status())) break;
      TY_RETURN_IF_ERROR(converted.status());
      const T5Batch batch = ToT5Batch(*converted);
      TY_ASSIGN_OR_RETURN(Predictions predicted, job->model->PredictBatchWithAux(batch, decode));
      TY_ASSIGN_OR_RETURN(torch::Tensor scores, job->model->ScoreBatch(batch));
      for (int64_t r = 0; r < converted->rows; ++r, ++k) {
        nlohmann::ordered_json line = {{"index", k * job->world_size + job->rank},
                                       {"input", text(batch.encoder_input_tokens[r])},
                                       {"target", text(batch.decoder_target_tokens[r])},
                                       {"prediction", text(predicted.tokens[r])},
                                       {"prediction_score", predicted.scores[r].item<double>()},
                                       {"target_score", scores[r].item<double>()}};
        out << line.dump() << "\n";
      }
    }
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", shard));
    out.close();
    response.set_examples(k);
    spdlog::info("job {}: rank {} wrote {} prediction(s) to {}", job->id, job->rank, k, shard);
    // Every shard is written before rank 0 reads them.
    TY_RETURN_IF_ERROR(CollectiveFailure(job->collective->Barrier()));
    if (job->rank != 0) return response;

    std::vector<nlohmann::json> lines;
    for (int r = 0; r < job->world_size; ++r) {
      const std::string path = absl::StrCat(base, ".shard-", r, "-of-", job->world_size, ".jsonl");
      std::ifstream in(path);
      if (!in) return absl::DataLossError(absl::StrCat(path, ": cannot read (is output_dir shared by the workers?)"));
      std::string line;
      while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
    }
    std::sort(lines.begin(), lines.end(),
              [](const nlohmann::json& a, const nlohmann::json& b) { return a["index"] < b["index"]; });
    const std::string merged = base + ".jsonl";
    {
      std::ofstream all(merged + ".tmp", std::ios::trunc);
      for (const auto& line : lines) all << line.dump() << "\n";
      all.flush();
      if (!all) return absl::InternalError(absl::StrCat("cannot write ", merged));
    }
    if (std::rename((merged + ".tmp").c_str(), merged.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot rename to ", merged));
    }
    for (int r = 0; r < job->world_size; ++r) {
      std::remove(absl::StrCat(base, ".shard-", r, "-of-", job->world_size, ".jsonl").c_str());
    }
    response.set_output(merged);
    if (spec.kind() == INFERENCE) return response;

    // EVALUATION: the task's metric functions over every example.
    std::vector<std::string> targets, predictions;
    std::vector<double> target_scores;
    AuxValues aux;
    for (const auto& line : lines) {
      targets.push_back(line["target"].get<std::string>());
      predictions.push_back(line["prediction"].get<std::string>());
      target_scores.push_back(line["target_score"].get<double>());
      aux["scores"].push_back(line["prediction_score"].get<double>());
    }
    std::vector<MetricFn> fns;
    for (const std::string& name : task->metric_fns) {
      absl::StatusOr<MetricFn> fn = BuiltinMetricFn(name);
      if (!fn.ok()) return absl::Status(fn.status().code(), absl::StrCat("task ", task->name, ": ", fn.status().message()));
      fns.push_back(*fn);
    }
    fns.push_back(*BuiltinMetricFn("mean_log_likelihood"));
    TY_ASSIGN_OR_RETURN(MetricResults metrics, ComputeMetrics(fns, targets, &predictions, &aux, &target_scores));
    metrics["examples"] = static_cast<double>(lines.size());
    MetricsManager writer("inference_eval/" + spec.task(), spec.output_dir(), 0, 1);
    writer.WriteScalars(job->restored_step, std::map<std::string, double>(metrics.begin(), metrics.end()));
    nlohmann::ordered_json summary = {{"task", spec.task()},
                                      {"split", config.split()},
                                      {"checkpoint_step", job->restored_step},
                                      {"metrics", metrics}};
    const std::string json_path = absl::StrCat(spec.output_dir(), "/inference_eval/", spec.task(), "-",
                                               config.split(), ".json");
    std::filesystem::create_directories(spec.output_dir() + "/inference_eval", ec);
    {
      std::ofstream json(json_path + ".tmp", std::ios::trunc);
      json << summary.dump(2) << "\n";
      json.flush();
      if (!json) return absl::InternalError(absl::StrCat("cannot write ", json_path));
    }
    if (std::rename((json_path + ".tmp").c_str(), json_path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot rename to ", json_path));
    }
    for (const auto& [k2, v] : metrics) (*response.mutable_metrics())[spec.task() + "/" + k2] = v;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("inference: ", e.what()));
  }
  return response;
}

void WorkerCore::Preempt() {
  std::lock_guard<std::mutex> lock(mu_);
  if (session_) {
    // A session has nothing to save: it ends; its client's next call fails.
    std::shared_ptr<Session> session = std::move(session_);
    spdlog::warn("session {}: this worker is asked to stop; closing the session", session->id);
    teardowns_.emplace_back([session] { std::lock_guard<std::mutex> busy(session->busy); });
    return;
  }
  if (!job_) return;
  spdlog::warn("job {}: this worker is asked to stop; stopping after the current step", job_->id);
  job_->preempt = true;
  job_->stop = true;
}

absl::StatusOr<std::vector<std::string>> WorkerCore::GatherDataStates(Job& job) {
  const TaskIterator* it = job.train_batches->task_iterator();
  std::vector<torch::Tensor> all;
  TY_RETURN_IF_ERROR(CollectiveFailure(
      job.collective->AllGather(torch::tensor({it->epoch(), it->position()}, torch::kLong), &all)));
  std::vector<std::string> states;
  for (const torch::Tensor& t : all) states.push_back(absl::StrCat(t[0].item<int64_t>(), " ", t[1].item<int64_t>()));
  return states;
}

absl::StatusOr<WorkerCore::EmergencyCheckpoint> WorkerCore::WriteEmergencyCheckpoint(Job& job, bool abandoned) {
  // Every rank stopped at the same point; was it a preemption on any of
  // them (then write the emergency checkpoint), or an abort?
  std::vector<torch::Tensor> preempted = {torch::full({1}, job.preempt ? 1.0f : 0.0f)};
  TY_RETURN_IF_ERROR(CollectiveFailure(job.collective->AllReduce(preempted, ReduceOp::kMax)));
  if (preempted[0].item<float>() == 0) {
    return absl::AbortedError(absl::StrCat("job ", job.id, " was aborted at step ", job.trainer->step()));
  }
  if (abandoned) {
    TY_RETURN_IF_ERROR(job.batches->PutBackLast());
    spdlog::info("job {}: stopped between microbatches of step {}; its batch was put back", job.id,
                 job.trainer->step());
  }
  const auto t0 = std::chrono::steady_clock::now();
  EmergencyCheckpoint out;
  TY_ASSIGN_OR_RETURN(out.path, SaveCheckpoint(job, /*wait=*/true));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::warn("job {}: preempted after step {}; emergency checkpoint {} written in {:.2f} s", job.id,
               job.trainer->step(), out.path.empty() ? "(rank 0's)" : out.path, out.seconds);
  return out;
}

absl::StatusOr<std::string> WorkerCore::SaveCheckpoint(Job& job, bool wait) {
  TY_ASSIGN_OR_RETURN(std::vector<std::string> states, GatherDataStates(job));
  if (job.rank != 0) return std::string();
  const int64_t step = job.trainer->step();
  const std::string dir = absl::StrCat(job.spec.output_dir(), "/checkpoint_", step);
  if (job.checkpointer.last_written() == dir) return dir;  // already written (e.g. preempted at a boundary)
  if (job.last_save_started == dir) {
    // This step's save is in flight (a stop right after a boundary): wait
    // for it rather than write the same directory twice.
    if (!wait) return job.checkpointer.last_written();
    absl::Status written = job.checkpointer.Wait();
    if (written.ok()) return dir;
    spdlog::error("job {}: the save of {} failed ({}); writing it again", job.id, dir, written.ToString());
  }
  std::string spec_json;
  (void)google::protobuf::util::MessageToJsonString(job.spec, &spec_json);
  TrainSnapshot snapshot = MakeSnapshot(*job.model->network(), *job.optimizer, step, job.world_size,
                                        std::move(states), spec_json, "trainyard job " + job.id,
                                        job.checkpointer.TakeBuffers());
  const torch::ScalarType dtype = job.spec.checkpoint().save_dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat;
  const std::string output_dir = job.spec.output_dir();
  const int keep = job.spec.keep_checkpoints();
  const int keep_best = job.spec.checkpoint().keep_best();
  const bool maximize = job.spec.checkpoint().best_mode() == EarlyStopping::MAX;
  job.last_save_started = dir;
  absl::StatusOr<double> waited =
      job.checkpointer.Save(dir, std::move(snapshot), dtype, [output_dir, keep, keep_best, maximize] {
        ApplyRetention(output_dir, keep, keep_best, maximize);
      });
  if (!waited.ok()) {
    // The previous write failed; the previous good checkpoint stays.
    spdlog::error("job {}: a checkpoint write failed: {}", job.id, waited.status().ToString());
  }
  if (wait) {
    TY_RETURN_IF_ERROR(job.checkpointer.Wait());
    return dir;
  }
  return job.checkpointer.last_written();
}

absl::Status WorkerCore::Restore(Job& job, const std::string& named) {
  const JobSpec& spec = job.spec;
  const RestoreConfig& restore = spec.restore();
  // Which checkpoint. A restart of this job (the coordinator names the
  // job's newest): that one, or if it does not read back whole the newest
  // one under output_dir that does. Otherwise (or if none of the job's own
  // reads back) the spec's choice.
  std::vector<SkippedCheckpoint> skipped;
  absl::StatusOr<TrainCheckpoint> ckpt = absl::NotFoundError("no checkpoint");
  std::string path;
  if (!named.empty()) {
    ckpt = ReadRestartCheckpoint(named, spec.output_dir(), &skipped);
    if (ckpt.ok()) {
      path = ckpt->dir;
    } else if (!absl::IsNotFound(ckpt.status())) {
      return absl::Status(ckpt.status().code(), absl::StrCat("restore: ", ckpt.status().message()));
    }
  }
  if (path.empty()) {
    absl::StatusOr<std::string> chosen = ChooseCheckpoint(restore, spec.output_dir(), &skipped);
    if (!chosen.ok()) return chosen.status();
    path = *chosen;
    if (!path.empty()) {
      ckpt = ReadTrainCheckpoint(path);
      if (!ckpt.ok()) {
        return absl::Status(ckpt.status().code(), absl::StrCat("restore: ", ckpt.status().message()));
      }
    }
  }
  const bool needs_checkpoint = spec.kind() == FINETUNING || spec.kind() == EVALUATION || spec.kind() == INFERENCE;
  if (path.empty() && needs_checkpoint && !restore.fallback_to_scratch()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "restore: a ", JobKind_Name(spec.kind()), " job starts from a checkpoint, and none was found under ",
        restore.path().empty() ? spec.output_dir() : restore.path()));
  }
  // Every rank must restore the same step: the output_dir has to be on a
  // filesystem every worker sees.
  const int64_t step = path.empty() ? -1 : ckpt->step;
  if (job.world_size > 1) {
    std::vector<torch::Tensor> hi = {torch::tensor({step}, torch::kLong)}, lo = {torch::tensor({step}, torch::kLong)};
    TY_RETURN_IF_ERROR(CollectiveFailure(job.collective->AllReduce(hi, ReduceOp::kMax)));
    TY_RETURN_IF_ERROR(CollectiveFailure(job.collective->AllReduce(lo, ReduceOp::kMin)));
    if (hi[0].item<int64_t>() != lo[0].item<int64_t>()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "restore: the ranks found different checkpoints (steps ", lo[0].item<int64_t>(), " to ",
          hi[0].item<int64_t>(), "); output_dir must be on a filesystem every worker shares"));
    }
  }
  // The job's own checkpoints that were passed over: every rank has read
  // what it needs, so rank 0 moves the damaged ones aside (a training job
  // saves those steps again, and a save never overwrites a directory).
  std::set<std::string> seen;
  const bool trains = spec.kind() != EVALUATION && spec.kind() != INFERENCE;
  for (const SkippedCheckpoint& s : skipped) {
    if (!seen.insert(s.dir).second) continue;
    std::string note = absl::StrCat(s.dir, " passed over: ", s.why);
    spdlog::warn("job {}: {}", job.id, note);
    if (job.rank == 0 && trains && std::filesystem::path(s.dir).parent_path() == std::filesystem::path(spec.output_dir()) &&
        std::filesystem::exists(s.dir)) {
      absl::StatusOr<std::string> moved = SetAsideDamagedCheckpoint(s.dir);
      if (moved.ok()) {
        absl::StrAppend(&note, " (moved aside to ", *moved, ")");
        spdlog::warn("job {}: moved {} aside to {}", job.id, s.dir, *moved);
      } else {
        spdlog::error("job {}: {}", job.id, std::string(moved.status().message()));
      }
    }
    job.restore_notes.push_back(std::move(note));
  }
  if (path.empty()) return absl::OkStatus();  // from scratch

  job.restored_dir = path;
  job.restored_step = ckpt->step;
  TY_ASSIGN_OR_RETURN(bool with_optimizer,
                      ApplyCheckpoint(*ckpt, restore, job.model->network().get(), job.optimizer.get()));
  if (with_optimizer) {
    // Data positions: exact when the world size is the same; otherwise
    // every rank starts at the epoch after the furthest one recorded.
    if (ckpt->world_size == job.world_size && static_cast<int>(ckpt->data_states.size()) == job.world_size) {
      TY_RETURN_IF_ERROR(job.train_batches->task_iterator()->Restore(ckpt->data_states[job.rank]));
    } else {
      int64_t furthest = 0;
      for (const std::string& state : ckpt->data_states) {
        int64_t epoch = 0, position = 0;
        if (std::sscanf(state.c_str(), "%ld %ld", &epoch, &position) == 2) furthest = std::max(furthest, epoch);
      }
      TY_RETURN_IF_ERROR(job.train_batches->task_iterator()->Restore(absl::StrCat(furthest + 1, " 0")));
      spdlog::warn("job {}: {} has data positions for {} workers, this job has {}: every rank starts epoch {}",
                   job.id, path, ckpt->world_size, job.world_size, furthest + 1);
    }
  }
  spdlog::info("job {}: restored {} (step {}){}", job.id, path, ckpt->step,
               ckpt->optimizer.empty() ? " (parameters only: a fresh optimizer)" : "");
  return absl::OkStatus();
}

absl::Status WorkerCore::AbortJob(const AbortJobRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (session_ && session_->id == request.job_id()) {
    std::shared_ptr<Session> session = std::move(session_);
    spdlog::info("session {}: closed ({})", session->id, request.reason());
    teardowns_.emplace_back([session] { std::lock_guard<std::mutex> busy(session->busy); });  // the call in flight ends
    return absl::OkStatus();
  }
  if (!job_ || job_->id != request.job_id()) return absl::OkStatus();  // already gone
  std::shared_ptr<Job> job = job_;
  job->stop = true;
  spdlog::info("job {}: tearing down ({})", job->id, request.reason());
  teardowns_.emplace_back([this, job, reason = request.reason()] {
    {
      std::lock_guard<std::mutex> busy(job->busy);  // the running call has seen the flag
      job->stop_reason = reason;
      if (job->trainer) job->trainer->Close().IgnoreError();
      // A checkpoint still being written completes (or fails) before the
      // worker lets go of the job.
      if (absl::Status s = job->checkpointer.Wait(); !s.ok()) {
        spdlog::error("job {}: the last checkpoint write failed: {}", job->id, s.ToString());
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (job_ == job) job_.reset();
    SetLogJob("", -1);
  });
  return absl::OkStatus();
}

absl::StatusOr<OpenSessionResponse> WorkerCore::OpenSession(const WorkerOpenSessionRequest& request) {
  const OpenSessionRequest& open = request.request();
  auto session = std::make_shared<Session>();
  session->id = request.session_id();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job_ || session_) {
      return absl::FailedPreconditionError(absl::StrCat("this worker is busy with '", session_ ? session_->id : job_->id,
                                                        "'"));
    }
    session_ = session;  // claims the worker
  }
  std::lock_guard<std::mutex> busy(session->busy);
  auto release = [&](const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (session_ == session) session_.reset();
    return status;
  };
  const int world = std::max(request.world_size(), 1);
  if (request.rank() < 0 || request.rank() >= world) {
    return release(absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(), " is outside world size ", world)));
  }
  if (world > 1) {
    if (!options_.store_factory) return release(absl::FailedPreconditionError("no rendezvous store configured"));
    GlooOptions gloo;
    gloo.hostname = options_.host_address;
    gloo.timeout = options_.collective_timeout;
    absl::StatusOr<std::unique_ptr<GlooCollective>> collective =
        GlooCollective::Create(request.rank(), world, options_.store_factory(session->id), gloo);
    if (!collective.ok()) return release(CollectiveFailure(collective.status()));
    session->collective = std::move(*collective);
  }
  InteractiveModelOptions options;
  options.device = options_.device;
  options.collective = session->collective.get();
  options.batch_size = open.batch_size();
  options.task_feature_lengths = open.feature_lengths();
  options.output_dir = open.output_dir();
  options.restore.set_mode(RestoreConfig::SPECIFIC);
  options.restore.set_path(open.checkpoint());
  absl::StatusOr<std::unique_ptr<InteractiveModel>> model = InteractiveModel::Create(options);
  if (!model.ok()) return release(model.status());
  session->model = std::move(*model);
  OpenSessionResponse response;
  response.set_session_id(session->id);
  response.set_step(session->model->step());
  spdlog::info("session {}: opened on {} (step {}, rank {} of {})", session->id, open.checkpoint(),
               session->model->step(), request.rank(), world);
  return response;
}

absl::StatusOr<SessionResponse> WorkerCore::RunSession(const SessionRequest& request) {
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!session_ || session_->id != request.session_id()) {
      return absl::NotFoundError(absl::StrCat("this worker does not hold session '", request.session_id(), "'"));
    }
    session = session_;
  }
  std::lock_guard<std::mutex> busy(session->busy);
  InteractiveModel& model = *session->model;
  std::vector<NaturalExample> examples;
  for (const SessionExample& e : request.examples()) {
    if (e.has_target()) {
      examples.emplace_back(e.input(), e.target());
    } else {
      examples.emplace_back(e.input());
    }
  }
  SessionResponse response;
  switch (request.op()) {
    case SessionRequest::PREDICT: {
      TY_ASSIGN_OR_RETURN(Inference out, model.PredictWithAux(examples));
      for (size_t i = 0; i < out.predictions.size(); ++i) {
        response.add_predictions(out.predictions[i]);
        response.add_scores(out.aux["scores"][i]);
      }
      response.set_truncated_examples(out.truncated_examples);
      break;
    }
    case SessionRequest::SCORE: {
      TY_ASSIGN_OR_RETURN(Inference out, model.InferWithPreprocessors(InferenceType::kScore, examples, {}));
      for (double s : out.scores) response.add_scores(s);
      response.set_truncated_examples(out.truncated_examples);
      break;
    }
    case SessionRequest::EVALUATE: {
      std::vector<MetricFn> fns;
      for (const std::string& name : request.metric_fns()) {
        absl::StatusOr<MetricFn> fn = BuiltinMetricFn(name);
        if (!fn.ok()) return absl::InvalidArgumentError(absl::StrCat("metric_fns: ", fn.status().message()));
        fns.push_back(*fn);
      }
      TY_ASSIGN_OR_RETURN(MetricResults metrics, model.Evaluate(examples, fns));
      for (const auto& [k, v] : metrics) (*response.mutable_metrics())[k] = v;
      break;
    }
    case SessionRequest::TRAIN_STEP: {
      TY_ASSIGN_OR_RETURN(MetricResults metrics, model.TrainStep(examples));
      for (const auto& [k, v] : metrics) (*response.mutable_metrics())[k] = v;
      break;
    }
    case SessionRequest::SAVE_CHECKPOINT: {
      TY_ASSIGN_OR_RETURN(std::string path, model.SaveCheckpoint());
      response.set_checkpoint(path);
      break;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("op: ", SessionRequest::Op_Name(request.op()),
                                                     "; one of PREDICT, SCORE, EVALUATE, TRAIN_STEP, SAVE_CHECKPOINT"));
  }
  response.set_step(model.step());
  return response;
}

}  // namespace trainyard
