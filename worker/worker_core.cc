#include "worker/worker_core.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "evaluation/metric_fns.h"
#include "google/protobuf/descriptor.h"
#include "interactive/interactive_model.h"
#include "job/infer_eval.h"
#include "job/training_job.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec.h"
#include "worker/worker_core_job.h"

namespace trainyard {

std::shared_ptr<Collective> WorkerCore::SwapCollective(Job* job, std::unique_ptr<Collective> next, int generation) {
  MutexLock lock(&job->group_mu);
  std::shared_ptr<Collective> old(std::move(job->collective));
  job->collective = std::move(next);
  job->group = job->collective.get();
  job->group_generation = generation;
  return old;
}

namespace {

// Every field of `g` as a TensorBoard scalar "goodput/<field>".
std::map<std::string, double> GoodputScalars(const Goodput& g) {
  using google::protobuf::FieldDescriptor;
  std::map<std::string, double> out;
  const google::protobuf::Descriptor* d = g.GetDescriptor();
  const google::protobuf::Reflection* r = g.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    out["goodput/" + f->name()] =
        f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE ? r->GetDouble(g, f) : static_cast<double>(r->GetInt64(g, f));
  }
  return out;
}

}  // namespace

WorkerCore::WorkerCore(WorkerCoreOptions options) : options_(std::move(options)) {
  if (MetricsRegistry* r = options_.metrics) {
    metrics_.steps = r->AddCounter("trainyard_worker_steps_total", "Train steps completed by this worker.");
    metrics_.step_seconds = r->AddHistogram("trainyard_worker_step_seconds", "Wall time of a train step (chunk mean).",
                                            MetricsRegistry::LatencyBuckets());
    metrics_.tokens_per_second =
        r->AddGauge("trainyard_worker_tokens_per_second", "Target tokens per second of the last chunk (all ranks).");
    metrics_.allreduce_seconds =
        r->AddHistogram("trainyard_worker_allreduce_seconds", "Time per step in the gradient all-reduce (chunk mean).",
                        MetricsRegistry::LatencyBuckets());
    metrics_.checkpoint_seconds =
        r->AddHistogram("trainyard_worker_checkpoint_seconds", "Time to write a checkpoint (rank 0).",
                        MetricsRegistry::LatencyBuckets());
    metrics_.steps->Init();
    metrics_.step_seconds->Init();
    metrics_.tokens_per_second->Set(0);
    metrics_.allreduce_seconds->Init();
    metrics_.checkpoint_seconds->Init();
  }
}

WorkerCore::~WorkerCore() {
  {
    MutexLock lock(&mu_);
    if (job_) job_->stop = true;
  }
  teardowns_.JoinAll();  // before the members the teardowns use
  std::shared_ptr<Job> job;
  {
    MutexLock lock(&mu_);
    job.swap(job_);
  }
  if (job) MutexLock busy(&job->busy);
}

struct WorkerCore::Session {
  std::string id;
  Mutex busy;                               // one call at a time
  std::unique_ptr<Collective> collective;   // with more than one worker
  std::unique_ptr<InteractiveModel> model;  // declared last: goes before its collective
};

std::string WorkerCore::job_id() const {
  MutexLock lock(&mu_);
  if (session_) return session_->id;
  return job_ ? job_->id : "";
}

int WorkerCore::attempt() const {
  MutexLock lock(&mu_);
  return job_ ? job_->attempt : 0;
}

int64_t WorkerCore::step() const {
  MutexLock lock(&mu_);
  return job_ && job_->training ? job_->training->progress() : 0;
}

absl::Status WorkerCore::CheckFreeLocked() const {
  if (job_) return absl::FailedPreconditionError(absl::StrCat("this worker is busy with job '", job_->id, "'"));
  if (session_) {
    return absl::FailedPreconditionError(absl::StrCat("this worker is busy with session '", session_->id, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<WorkerCore::Job>> WorkerCore::Find(const std::string& job_id) {
  MutexLock lock(&mu_);
  if (!job_ || job_->id != job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("this worker does not hold job '", job_id, "'", job_ ? " (it holds '" + job_->id + "')" : ""));
  }
  return job_;
}

void WorkerCore::DropGroup(Job* job) {
  spdlog::warn("job {}: leaving the failed group; waiting for the coordinator to regroup the ranks", job->id);
  std::shared_ptr<Collective> old = SwapCollective(job, nullptr, job->generation);
  // Moved, not copied: the thread must hold the last reference, or closing
  // the group (which may wait for a lost peer until the collective's
  // timeout) happens here when the thread is done first.
  teardowns_.Start([old = std::move(old)]() mutable { old.reset(); });
}

absl::Status WorkerCore::CheckInGroup(const Job& job) {
  if (job.collective) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("job ", job.id, ": this rank left its group after a failure and waits for Regroup"));
}

absl::StatusOr<RunStepsResponse> WorkerCore::RunSteps(const RunStepsRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  MutexLock busy(&job->busy);
  TY_RETURN_IF_ERROR(CheckInGroup(*job));
  TrainingJob& training = *job->training;
  // An abort refuses new steps; a preemption does not: the ranks run into
  // the agreed stop at the first step boundary and write the emergency
  // checkpoint together.
  if (job->stop && !job->preempt) {
    return absl::AbortedError(absl::StrCat("job ", job->id, " was aborted: ", job->stop_reason));
  }
  if (training.trainer() != nullptr && (request.first_step() != training.step() || request.num_steps() <= 0)) {
    return absl::FailedPreconditionError(absl::StrCat("RunSteps(", request.first_step(), ", ", request.num_steps(),
                                                      "): this rank is at step ", training.step()));
  }
  if (request.has_goodput() && training.trainer() != nullptr) {
    training.trainer()->WriteTrainScalars(request.first_step(), GoodputScalars(request.goodput()));
  }
  absl::StatusOr<TrainChunk> trained = training.Train(request.num_steps());
  if (!trained.ok()) {
    if (training.elastic() && absl::IsAborted(trained.status()) && !job->stop) DropGroup(job.get());
    return trained.status();
  }
  TrainChunk& chunk = *trained;
  RunStepsResponse response;
  response.set_last_step(training.step());
  if (chunk.preempted) {
    response.set_preempted(true);
    response.set_asked_to_stop(chunk.asked_to_stop);
    response.set_checkpoint(chunk.emergency_checkpoint);
    if (!chunk.emergency_checkpoint.empty()) {
      (*response.mutable_metrics())["timing/emergency_checkpoint_seconds"] = chunk.emergency_seconds;
    }
    return response;
  }
  for (const auto& [k, v] : chunk.summary) (*response.mutable_metrics())[k] = v;
  response.set_seconds_per_step(chunk.seconds / static_cast<double>(request.num_steps()));
  response.set_compute_seconds_per_step(chunk.compute_seconds / static_cast<double>(request.num_steps()));
  response.set_collective_seconds_per_step(chunk.collective_seconds / static_cast<double>(request.num_steps()));
  if (metrics_.steps != nullptr) {
    metrics_.steps->Increment({}, static_cast<double>(request.num_steps()));
    metrics_.step_seconds->Observe(response.seconds_per_step());
    if (auto it = chunk.summary.find("timing/target_tokens"); it != chunk.summary.end() && chunk.seconds > 0) {
      metrics_.tokens_per_second->Set(it->second / chunk.seconds);
    }
    if (auto it = chunk.summary.find("timing/allreduce_seconds_per_step"); it != chunk.summary.end()) {
      metrics_.allreduce_seconds->Observe(it->second);
    }
  }
  if (request.save_checkpoint()) {
    // The job's last chunk waits for its checkpoint to be durable.
    const bool last_chunk = training.step() >= job->spec.total_steps();
    const auto t0 = std::chrono::steady_clock::now();
    TY_ASSIGN_OR_RETURN(std::string durable, training.SaveCheckpoint(!job->spec.checkpoint().async() || last_chunk));
    if (job->rank == 0) {
      (*response.mutable_metrics())["timing/checkpoint_stall_seconds"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      (*response.mutable_metrics())["timing/checkpoint_seconds"] = training.last_write_seconds();
      if (metrics_.checkpoint_seconds != nullptr) metrics_.checkpoint_seconds->Observe(training.last_write_seconds());
    }
    response.set_checkpoint(durable);
  } else if (job->rank == 0) {
    response.set_checkpoint(training.last_written_checkpoint());
  }
  response.set_checkpoint_failure(training.checkpoint_failure());
  job->last_chunk = response;  // for Adopt: this answer may never arrive
  job->last_chunk_first_step = request.first_step();
  return response;
}

absl::StatusOr<RegroupResponse> WorkerCore::Regroup(const RegroupRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  const auto start = std::chrono::steady_clock::now();
  MutexLock busy(&job->busy);  // a call still failing in the old group ends first
  if (job->stop && !job->preempt) {
    return absl::AbortedError(absl::StrCat("job ", job->id, " was aborted: ", job->stop_reason));
  }
  if (!job->training || !job->training->elastic()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job->id, " is not a training job with ELASTIC"));
  }
  if (job->state_unsure) {
    // Retryable: the attempt restarts from its checkpoint.
    return absl::AbortedError(absl::StrCat(
        "job ", job->id,
        ": an earlier regroup failed while moving state into this rank; its state may be partly overwritten"));
  }
  const int world = request.world_size(), rank = request.rank();
  if (world < 1 || rank < 0 || rank >= world || request.attempt() != job->attempt ||
      request.generation() <= job->generation) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Regroup: rank ", rank, " of ", world, ", attempt ", request.attempt(), ", generation ", request.generation(),
        " (this rank: attempt ", job->attempt, ", generation ", job->generation, ")"));
  }
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Collective> collective, FormGroup(job.get(), rank, world, request.generation()));
  // Until it replaces the old group, Probe and LeaveGroup find the new one
  // here (a peer lost while the ranks move state on it).
  {
    MutexLock lock(&job->group_mu);
    job->entering = collective.get();
    job->entering_generation = request.generation();
  }
  absl::Cleanup entered = [&job] {
    MutexLock lock(&job->group_mu);
    job->entering = nullptr;
  };
  SetLogJob(job->id, rank);
  // Workers joining the group (StartJob with `join`) say first whether
  // they could build the job; this rank has it already.
  absl::Status built = AgreeOnOutcome(collective.get(), absl::OkStatus(), "building the job");
  if (!built.ok()) {
    // Closed in the background (see ReleaseFailedStart); the job keeps its
    // old group's place until the next Regroup.
    {
      MutexLock lock(&job->group_mu);
      job->entering = nullptr;
    }
    teardowns_.Start([dropped = std::shared_ptr<Collective>(std::move(collective))]() mutable { dropped.reset(); });
    return CollectiveFailure(built);
  }
  absl::StatusOr<RegroupOutcome> regrouped = job->training->Regroup(collective.get(), /*fresh=*/false);
  // The training job uses the new group from here on, whether or not the
  // ranks agreed (on failure the attempt is torn down by AbortJob). The old
  // group's connections may wait for a lost peer until their timeout: it is
  // closed in the background.
  {
    std::shared_ptr<Collective> old = SwapCollective(job.get(), std::move(collective), request.generation());
    teardowns_.Start([old = std::move(old)]() mutable { old.reset(); });  // moved: see DropGroup
  }
  if (!regrouped.ok()) {
    job->state_unsure = job->training->StatePartlyReceived();
    return regrouped.status();
  }
  job->rank = rank;
  job->world_size = world;
  job->generation = request.generation();
  RegroupResponse response;
  response.set_step(regrouped->step);
  response.set_source_rank(regrouped->source_rank);
  response.set_sent_bytes(regrouped->sent_bytes);
  response.set_transfer_seconds(regrouped->transfer_seconds);
  response.set_state_digest(regrouped->state_digest);
  response.set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return response;
}

absl::StatusOr<EvaluateResponse> WorkerCore::Evaluate(const EvaluateRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  MutexLock busy(&job->busy);
  TY_RETURN_IF_ERROR(CheckInGroup(*job));
  // A preempted rank still evaluates: it stops at the first batch, with
  // the others, into the emergency checkpoint.
  if (job->stop && !job->preempt) return absl::AbortedError(absl::StrCat("job ", job->id, " was aborted"));
  absl::StatusOr<EvalOutcome> evaluated = job->training->Evaluate();
  if (!evaluated.ok()) {
    // ELASTIC: as after a failed chunk, the rank leaves its group and the
    // evaluation is repeated in the next one.
    if (job->training->elastic() && absl::IsAborted(evaluated.status()) && !job->stop) DropGroup(job.get());
    return evaluated.status();
  }
  EvalOutcome& eval = *evaluated;
  EvaluateResponse response;
  if (eval.preempted) {
    response.set_preempted(true);
    response.set_asked_to_stop(eval.asked_to_stop);
    response.set_checkpoint(eval.emergency_checkpoint);
    return response;
  }
  for (const auto& [k, v] : eval.metrics) (*response.mutable_metrics())[k] = v;
  for (const auto& [k, v] : eval.infer_metrics) (*response.mutable_infer_metrics())[k] = v;
  return response;
}

absl::StatusOr<InferResponse> WorkerCore::Infer(const InferRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  MutexLock busy(&job->busy);
  TY_RETURN_IF_ERROR(CheckInGroup(*job));
  const bool every_checkpoint = job->training->spec().restore().mode() == RestoreConfig::ALL;
  TY_ASSIGN_OR_RETURN(InferOutcome inferred,
                      every_checkpoint ? job->training->InferNext(request.after_step()) : job->training->Infer());
  InferResponse response;
  response.set_examples(inferred.examples);
  response.set_output(inferred.output);
  for (const auto& [k, v] : inferred.metrics) (*response.mutable_metrics())[k] = v;
  response.set_checkpoint_step(inferred.checkpoint_step);
  for (const std::string& note : inferred.passed_over) response.add_passed_over(note);
  response.set_after_step(inferred.after_step);
  return response;
}

absl::StatusOr<SaveCheckpointResponse> WorkerCore::SaveCheckpoint(const SaveCheckpointRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  MutexLock busy(&job->busy);
  TY_RETURN_IF_ERROR(CheckInGroup(*job));
  if (job->stop && !job->preempt) return absl::AbortedError(absl::StrCat("job ", job->id, " was aborted"));
  TrainingJob& training = *job->training;
  if (training.trainer() != nullptr && request.step() != training.step()) {
    return absl::FailedPreconditionError(
        absl::StrCat("SaveCheckpoint(step ", request.step(), "): this rank is at step ", training.step()));
  }
  absl::StatusOr<std::string> path = training.SaveCheckpoint(request.wait());
  if (!path.ok()) {
    if (training.elastic() && absl::IsAborted(path.status()) && !job->stop) DropGroup(job.get());
    return path.status();
  }
  SaveCheckpointResponse response;
  response.set_path(*path);
  return response;
}

void WorkerCore::Preempt() {
  MutexLock lock(&mu_);
  if (session_) {
    // A session has nothing to save: it ends; its client's next call fails.
    std::shared_ptr<Session> session = std::move(session_);
    spdlog::warn("session {}: this worker is asked to stop; closing the session", session->id);
    teardowns_.Start([session] { MutexLock busy(&session->busy); });
    return;
  }
  if (!job_) return;
  if (job_->prepared) {
    // Built ahead, not joined yet: nothing to checkpoint.
    TearDownLocked(job_, "this worker is asked to stop before it joined the job");
    return;
  }
  spdlog::warn("job {}: this worker is asked to stop; stopping after the current step", job_->id);
  job_->preempt = true;
  job_->stop = true;
}

absl::Status WorkerCore::AbortJob(const AbortJobRequest& request) {
  MutexLock lock(&mu_);
  if (session_ && session_->id == request.job_id()) {
    std::shared_ptr<Session> session = std::move(session_);
    spdlog::info("session {}: closed ({})", session->id, request.reason());
    teardowns_.Start([session] { MutexLock busy(&session->busy); });  // the call in flight ends
    return absl::OkStatus();
  }
  if (!job_ || job_->id != request.job_id()) return absl::OkStatus();  // already gone
  TearDownLocked(job_, request.reason());
  return absl::OkStatus();
}

void WorkerCore::TearDownLocked(const std::shared_ptr<Job>& job, const std::string& reason) {
  job->stop = true;
  spdlog::info("job {}: tearing down ({})", job->id, reason);
  {
    // A call blocked in a collective on a lost peer ends now, not at the
    // collective's timeout (every rank is told to abort).
    // So does one forming its group (a peer of a start that failed may
    // never come) or entering a regroup's.
    const std::string why = absl::StrCat("the job is torn down: ", reason);
    MutexLock group(&job->group_mu);
    if (job->group != nullptr) job->group->Abort(why);
    if (job->entering != nullptr) job->entering->Abort(why);
    if (job->forming != nullptr) {
      MutexLock forming(&job->forming->mu);
      job->forming->aborted = why;
      job->forming->changed.SignalAll();
    }
  }
  teardowns_.Start([this, job, reason] {
    {
      MutexLock busy(&job->busy);  // the running call has seen the flag
      job->stop_reason = reason;
      // Summaries flushed, and a checkpoint still being written completes
      // (or fails), before the worker lets go of the job.
      if (job->training) job->training->Close();
    }
    MutexLock lock(&mu_);
    if (job_ == job) job_.reset();
    SetLogJob("", -1);
  });
}

absl::StatusOr<OpenSessionResponse> WorkerCore::OpenSession(const WorkerOpenSessionRequest& request) {
  const OpenSessionRequest& open = request.request();
  auto session = std::make_shared<Session>();
  session->id = request.session_id();
  {
    MutexLock lock(&mu_);
    TY_RETURN_IF_ERROR(CheckFreeLocked());
    session_ = session;  // claims the worker; released below on failure
  }
  MutexLock busy(&session->busy);
  auto release = [&](const absl::Status& status) {
    MutexLock lock(&mu_);
    if (session_ == session) session_.reset();
    return status;
  };
  const int world = std::max(request.world_size(), 1);
  if (request.rank() < 0 || request.rank() >= world) {
    return release(absl::InvalidArgumentError(absl::StrCat("rank ", request.rank(), " is outside world size ", world)));
  }
  if (world > 1) {
    // The same collective as a job's on this device (NCCL on a GPU).
    absl::StatusOr<std::unique_ptr<Collective>> collective = MakeCollective(session->id, request.rank(), world);
    if (!collective.ok()) return release(collective.status());
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
  options.decode = DecodeOptionsFromConfig(open.inference(), /*seed=*/0);
  if (open.inference().max_decode_length() == 0) options.decode.max_decode_length = 0;  // the targets length
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
    MutexLock lock(&mu_);
    if (!session_ || session_->id != request.session_id()) {
      return absl::NotFoundError(absl::StrCat("this worker does not hold session '", request.session_id(), "'"));
    }
    session = session_;
  }
  MutexLock busy(&session->busy);
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
      TY_ASSIGN_OR_RETURN(std::vector<MetricFn> fns,
                          BuiltinMetricFns({request.metric_fns().begin(), request.metric_fns().end()}, "metric_fns"));
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
