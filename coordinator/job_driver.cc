#include "coordinator/job_driver.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collective/store.h"
#include "common/status_macros.h"
#include "coordinator/attempt_policy.h"
#include "coordinator/fan_out.h"
#include "coordinator/rank_blame.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"
#include "spec/actions.h"
#include "spec/jobspec.h"

namespace trainyard {

std::string JobIdFor(const std::string& name, int64_t sequence) {
  std::string base;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    base += ok ? c : '-';
  }
  if (base.empty()) base = "job";
  if (base.size() > 48) base.resize(48);
  return absl::StrCat(base, "-", sequence);
}
JobDriver::JobDriver(AttemptPlan plan, JobDriverHost* host, Clock* clock)
    : plan_(std::move(plan)), host_(host), clock_(clock), latest_checkpoint_(plan_.latest_checkpoint) {
  std::vector<std::string> ids = plan_.worker_ids;
  ids.resize(plan_.clients.size());
  std::vector<std::string> addresses = plan_.addresses;
  addresses.resize(plan_.clients.size());
  SetMembers(plan_.clients, plan_.workers, std::move(ids), std::move(addresses));
}

bool JobDriver::elastic() const { return IsElasticTraining(plan_.spec); }

std::string JobDriver::RankName(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(workers_.size()) || workers_[rank].empty()) {
    return absl::StrCat("rank ", rank);
  }
  return absl::StrCat("rank ", rank, " (", workers_[rank], ")");
}

void JobDriver::SetMembers(std::vector<std::shared_ptr<WorkerClient>> clients, std::vector<std::string> workers,
                           std::vector<std::string> worker_ids, std::vector<std::string> addresses) {
  MutexLock lock(&mu_);
  clients_ = std::move(clients);
  workers_ = std::move(workers);
  worker_ids_ = std::move(worker_ids);
  addresses_ = std::move(addresses);
  member_clients_.clear();
  for (size_t r = 0; r < clients_.size(); ++r) {
    if (clients_[r] && !worker_ids_[r].empty()) member_clients_[worker_ids_[r]] = clients_[r];
  }
}

void JobDriver::Stop(JobState state, std::string reason, bool retryable) {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = StopRequest{state, std::move(reason), retryable, /*shutdown=*/false};
  }
  changed_.SignalAll();
}

void JobDriver::ShutDown() {
  {
    MutexLock lock(&mu_);
    if (stop_ && stop_->shutdown) return;
    // A shutdown overrides a pending stop: the job's state stays as it is.
    stop_ = StopRequest{JOB_STATE_UNSPECIFIED, "the coordinator is shutting down", false, /*shutdown=*/true};
  }
  changed_.SignalAll();
}

absl::StatusOr<JobDriver::SavedCheckpoint> JobDriver::CheckpointNow(absl::Duration timeout) {
  const JobKind kind = plan_.spec.kind();
  if (kind == EVALUATION || kind == INFERENCE) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", plan_.job_id, "' is an ", JobKind_Name(kind), " job: it has no training state to save"));
  }
  const absl::Time deadline = clock_->Now() + timeout;
  MutexLock lock(&mu_);
  const int64_t ticket = ++checkpoints_asked_;
  changed_.SignalAll();
  while (checkpoints_served_ < ticket && !ended_.has_value()) {
    if (clock_->WaitWithDeadline(&changed_, &mu_, deadline)) {
      if (checkpoints_served_ >= ticket || ended_.has_value()) break;
      return absl::DeadlineExceededError(absl::StrCat("job '", plan_.job_id, "' did not reach a boundary between ",
                                                      "chunks within ", absl::FormatDuration(timeout)));
    }
  }
  if (checkpoints_served_ >= ticket) return last_saved_;
  return *ended_;
}

std::optional<JobDriver::StopRequest> JobDriver::stop_request() {
  MutexLock lock(&mu_);
  return stop_;
}

template <typename Response>
absl::Status JobDriver::OnAllRanks(const char* what, const StartCall<Response>& call, std::vector<Response>* responses,
                                   std::vector<absl::StatusOr<Response>>* each) {
  const int world = static_cast<int>(clients_.size());
  // A failure or the last answer wakes the driver (fan_out.h); so does a
  // stop (Stop signals changed_).
  RankCalls<Response> calls(world, [this] {
    MutexLock lock(&mu_);
    changed_.SignalAll();
  });
  calls.StartAll(call);
  bool all_ok;
  absl::Time next_watch = Clock::Real()->Now() + plan_.watchdog.RoundPeriod(elastic() && each != nullptr);
  bool failed;
  {
    MutexLock lock(&mu_);
    while (!(calls.done() == world || calls.failed() || stop_.has_value())) {
      WaitOrWatch(&next_watch, each != nullptr, calls.Answered());
    }
    failed = calls.failed();
  }
  // Ranks still finding their peers (StartJob, a join) stop waiting for
  // the rank whose call failed: their rendezvous fails at once.
  if (failed) {
    host_->CloseRendezvous(GroupScope(plan_.job_id, plan_.restarts, generation_),
                           absl::StrCat(what, " failed on a rank of the group"));
  }
  {
    MutexLock lock(&mu_);
    if (calls.failed() && calls.done() < world && each == nullptr) {
      // Give the other ranks a moment to report: the rank whose worker is
      // gone is the root cause, not its peers' collective errors.
      const absl::Time deadline = clock_->Now() + absl::Seconds(2);
      while (!(calls.done() == world || stop_.has_value())) {
        if (clock_->WaitWithDeadline(&changed_, &mu_, deadline)) break;
      }
    }
    if (each != nullptr) {
      AwaitSurvivors([&] { return calls.done() == world; }, [&] { return calls.Answered(); }, &next_watch);
    }
    all_ok = calls.done() == world && !calls.failed();
  }
  if (!all_ok) {
    for (auto& c : clients_) {
      if (c) c->CancelInFlight();
    }
  }
  // Every call has ended (cancelled ones promptly) before the results are
  // read. A rank whose worker stopped heartbeating reports that.
  calls.WaitAll();
  std::vector<absl::StatusOr<Response>> results = calls.TakeResults();
  {
    MutexLock lock(&mu_);
    for (int r = 0; r < world; ++r) {
      auto lost = lost_.find(worker_ids_[r]);
      if (lost != lost_.end() && !results[r].ok()) results[r] = absl::UnavailableError(lost->second);
    }
  }
  if (std::optional<StopRequest> stop = stop_request()) return absl::AbortedError(stop->reason);
  if (each != nullptr) *each = results;
  if (!all_ok) {
    std::vector<absl::Status> statuses;
    for (const auto& r : results) statuses.push_back(r.status());
    const int culprit = CulpritRank(statuses);
    if (culprit < 0 || absl::IsCancelled(statuses[culprit])) {
      return absl::AbortedError(absl::StrCat(what, " was cancelled"));
    }
    const absl::Status& s = statuses[culprit];
    return absl::Status(s.code(), absl::StrCat(RankName(culprit), ": ", what, " failed: ", s.message()));
  }
  responses->clear();
  for (auto& r : results) responses->push_back(*std::move(r));
  return absl::OkStatus();
}

template <typename Response>
absl::Status JobDriver::SurviveFailedCall(const absl::Status& failure,
                                          const std::vector<absl::StatusOr<Response>>& each, const std::string& during,
                                          int64_t step) {
  if (!elastic() || each.empty()) return failure;
  bool preempted = false;
  const std::vector<absl::Status> statuses = Statuses(each, &preempted);
  int64_t at = step;
  TY_ASSIGN_OR_RETURN(bool survived, SurviveLostRanks(statuses, preempted, failure, during, &at));
  if (!survived) return failure;
  if (at != step) {
    return absl::InternalError(absl::StrCat("after regrouping", during, ", the ranks are at step ", at));
  }
  return absl::OkStatus();
}

StartJobRequest JobDriver::StartRequest(int rank, int world) const {
  StartJobRequest request;
  request.set_job_id(plan_.job_id);
  *request.mutable_spec() = plan_.spec;
  request.set_rank(rank);
  request.set_world_size(world);
  request.set_attempt(plan_.restarts);
  request.set_generation(generation_);
  return request;
}

absl::StatusOr<int64_t> JobDriver::StartRanks() {
  const absl::Time start = clock_->Now();
  const JobSpec& spec = plan_.spec;
  for (const auto& c : clients_) {
    if (!c) return absl::UnavailableError("a worker of the gang left before the job started");
  }
  // ELASTIC: a rank lost while the ranks start leaves, and the others
  // start again without it (a generation later).
  std::vector<StartJobResponse> started;
  std::string survived;  // what was lost during the start, if anything
  while (true) {
    const int world = static_cast<int>(clients_.size());
    std::vector<absl::StatusOr<StartJobResponse>> each;
    const absl::Status status = OnAllRanks<StartJobResponse>(
        "StartJob",
        [&](int r, auto done) {
          StartJobRequest request = StartRequest(r, world);
          request.set_restore_checkpoint(plan_.restore_from);
          clients_[r]->StartJobAsync(request, std::move(done));
        },
        &started, elastic() ? &each : nullptr);
    if (status.ok()) break;
    const StartOutcome outcome = SurviveFailedStart(status, each, &started, &survived);
    if (outcome == StartOutcome::kFailed) return status;
    if (outcome == StartOutcome::kStarted) break;
  }
  // What the workers restored: a restart whose newest checkpoint turned out
  // damaged restores an older one, which becomes the job's newest; the
  // reason while it runs says what was passed over.
  const StartJobResponse& first = started[0];
  const int64_t step = first.start_step();
  std::string note = survived;
  if (first.passed_over_size() > 0) {
    absl::StrAppend(&note, note.empty() ? "" : "; ", "restored ",
                    first.restored_checkpoint().empty() ? "nothing (from scratch)" : first.restored_checkpoint(),
                    "; passed over ", absl::StrJoin(first.passed_over(), "; "));
    spdlog::warn("job {}: {}", plan_.job_id, note);
  }
  const bool own =
      !first.restored_checkpoint().empty() &&
      std::filesystem::path(first.restored_checkpoint()).parent_path() == std::filesystem::path(spec.output_dir());
  if (own || first.passed_over_size() > 0) latest_checkpoint_ = first.restored_checkpoint();
  // The first attempt's start, or a restart's (a fault's cost).
  const double seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  host_->ChangeState(plan_.job_id, RUNNING, note, [&](JobInfo* info) {
    info->set_step(step);
    info->set_latest_checkpoint(latest_checkpoint_);
    Goodput* g = info->mutable_goodput();
    if (plan_.restarts == 0) {
      g->set_startup_seconds(g->startup_seconds() + seconds);
    } else {
      g->set_recovery_seconds(g->recovery_seconds() + seconds);
    }
  });
  return step;
}

absl::Status JobDriver::RunInference(int64_t step, std::string* final_reason) {
  const JobSpec& spec = plan_.spec;
  spdlog::info("job {}: {} of the checkpoint at step {} on {} split {}", plan_.job_id, JobKind_Name(spec.kind()), step,
               spec.task(), spec.inference().split());
  std::vector<InferResponse> inferred;
  TY_RETURN_IF_ERROR(InferOnEveryRank(-1, &inferred));
  const int64_t examples = RecordInference(step, inferred);
  *final_reason = absl::StrCat(examples, " example(s) decoded; predictions in ", inferred[0].output());
  return absl::OkStatus();
}

absl::Status JobDriver::InferOnEveryRank(int64_t after_step, std::vector<InferResponse>* inferred) {
  return OnAllRanks<InferResponse>(
      "Infer",
      [&](int r, auto done) {
        InferRequest request;
        request.set_job_id(plan_.job_id);
        request.set_after_step(after_step);
        clients_[r]->InferAsync(request, std::move(done));
      },
      inferred);
}

absl::Status JobDriver::PauseUnlessStopped(absl::Duration d) {
  const absl::Time deadline = clock_->Now() + d;
  MutexLock lock(&mu_);
  while (!stop_.has_value()) {
    if (clock_->WaitWithDeadline(&changed_, &mu_, deadline)) break;
  }
  if (stop_.has_value()) return absl::AbortedError(stop_->reason);
  return absl::OkStatus();
}

absl::Status JobDriver::ServeCheckpointRequests(int64_t step, SaveFor why) {
  int64_t asked, served;
  {
    MutexLock lock(&mu_);
    asked = checkpoints_asked_;
    served = checkpoints_served_;
  }
  if (asked <= served && why == SaveFor::kRequests) return absl::OkStatus();
  const absl::Time start = clock_->Now();
  std::vector<SaveCheckpointResponse> saved;
  absl::Status status;
  // ELASTIC: a rank lost during the save is dropped, and the survivors save
  // the step again in their new group (a half-written checkpoint is never
  // renamed into place).
  while (true) {
    std::vector<absl::StatusOr<SaveCheckpointResponse>> each;
    status = OnAllRanks<SaveCheckpointResponse>(
        "SaveCheckpoint",
        [&](int r, auto done) {
          SaveCheckpointRequest request;
          request.set_job_id(plan_.job_id);
          request.set_step(step);
          request.set_wait(true);
          clients_[r]->SaveCheckpointAsync(request, std::move(done));
        },
        &saved, elastic() ? &each : nullptr);
    if (status.ok()) break;
    status = SurviveFailedCall(status, each, absl::StrCat(" during the checkpoint of step ", step), step);
    if (!status.ok()) break;
  }
  if (status.ok()) {
    // In the record before the callers waiting for it are woken (they may
    // read the job's latest_checkpoint at once).
    latest_checkpoint_ = saved[0].path();
    spdlog::info("job {}: checkpoint {} written {}", plan_.job_id, latest_checkpoint_,
                 why == SaveFor::kStopping ? "before the job stops"
                 : why == SaveFor::kChunk  ? "by the ranks left after a loss during the chunk's own save"
                                           : "on request");
    host_->RecordProgress(plan_.job_id, [&](JobInfo* info) { info->set_latest_checkpoint(latest_checkpoint_); });
  }
  Spent(&Goodput::checkpoint_seconds, &Goodput::set_checkpoint_seconds, start);
  {
    MutexLock lock(&mu_);
    if (status.ok()) {
      last_saved_ = SavedCheckpoint{saved[0].path(), step};
    } else {
      last_saved_ = status;
    }
    checkpoints_served_ = asked;
  }
  changed_.SignalAll();
  return status;
}

bool JobDriver::RunActions(ActionsByMode& actions, const std::map<ActionModeKind, MetricsByTask>& metrics, int64_t step,
                           Ending* ending) {
  ActionsOutcome outcome;
  for (const auto& [mode, by_task] : metrics) RunEveryAction(actions[mode], step, by_task, &outcome);
  if (!outcome.halt) return false;
  *ending->state = outcome.failure ? FAILED : SUCCEEDED;
  *ending->reason = outcome.reason();
  ending->stopped_early = !outcome.failure;
  return true;
}

absl::StatusOr<bool> JobDriver::EvaluateRanks(int64_t step, ActionsByMode& actions, Ending* ending) {
  const absl::Time start = clock_->Now();
  std::vector<EvaluateResponse> evaluated;
  // ELASTIC: a rank lost during the evaluation is dropped, and the
  // survivors evaluate the step again in their new group.
  while (true) {
    std::vector<absl::StatusOr<EvaluateResponse>> each;
    const absl::Status status = OnAllRanks<EvaluateResponse>(
        "Evaluate",
        [&](int r, auto done) {
          EvaluateRequest request;
          request.set_job_id(plan_.job_id);
          request.set_step(step);
          clients_[r]->EvaluateAsync(request, std::move(done));
        },
        &evaluated, elastic() ? &each : nullptr);
    if (!status.ok()) {
      TY_RETURN_IF_ERROR(SurviveFailedCall(status, each, absl::StrCat(" during the evaluation of step ", step), step));
      continue;
    }
    if (!evaluated[0].preempted()) break;
    // A worker was asked to stop: ELASTIC evaluates again without it.
    std::vector<bool> asked;
    for (const auto& r : evaluated) asked.push_back(r.asked_to_stop());
    int64_t at = step;
    TY_ASSIGN_OR_RETURN(
        bool survived,
        SurvivePreemption(asked, step, evaluated[0].checkpoint(), {},
                          absl::StrCat(" (during the evaluation of step ", step, ", evaluated again)"),
                          absl::StrCat(" (during the evaluation of step ", step, ", which is not repeated)"), ending,
                          &at));
    if (!survived) {
      Spent(&Goodput::evaluation_seconds, &Goodput::set_evaluation_seconds, start);
      return true;
    }
  }
  Spent(&Goodput::evaluation_seconds, &Goodput::set_evaluation_seconds, start);
  auto by_task = [](const google::protobuf::Map<std::string, double>& values) {
    MetricsByTask out;
    for (const auto& [k, v] : values) {
      std::vector<std::string> parts = absl::StrSplit(k, absl::MaxSplits('/', 1));
      if (parts.size() == 2) out[parts[0]][parts[1]] = v;
    }
    return out;
  };
  host_->RecordProgress(plan_.job_id, [&](JobInfo* info) {
    for (const auto& [k, v] : evaluated[0].metrics()) (*info->mutable_metrics())["training_eval/" + k] = v;
    for (const auto& [k, v] : evaluated[0].infer_metrics()) (*info->mutable_metrics())["inference_eval/" + k] = v;
  });
  return RunActions(actions,
                    {{ActionModeKind::kTrainEval, by_task(evaluated[0].metrics())},
                     {ActionModeKind::kInferEval, by_task(evaluated[0].infer_metrics())}},
                    step, ending);
}

absl::Status JobDriver::Drive(JobState* final_state, std::string* final_reason) {
  const JobSpec& spec = plan_.spec;
  Ending ending{final_state, final_reason};
  TY_ASSIGN_OR_RETURN(int64_t step, plan_.adopt ? AdoptRanks(&ending) : StartRanks());
  if (*final_state == PREEMPTED) return absl::OkStatus();  // adopted as it stopped
  started_ = true;
  if (!IsTrainingKind(spec.kind())) {
    if (spec.restore().mode() == RestoreConfig::ALL) return RunEveryCheckpoint(final_reason);
    return RunInference(step, final_reason);
  }
  spdlog::info("job {}: {} from step {} to {}", plan_.job_id, plan_.adopt ? "adopted; training on" : "running", step,
               spec.total_steps());
  TY_ASSIGN_OR_RETURN(ActionsByMode actions, CreateActions(spec));
  const ChunkPeriods periods{spec.total_steps(), spec.summary_period(), spec.eval_period(), spec.checkpoint_period()};
  while (step < spec.total_steps()) {
    // ELASTIC: idle workers fill the ranks lost earlier.
    if (elastic() && static_cast<int>(clients_.size()) < spec.num_workers()) TY_RETURN_IF_ERROR(AdmitJoiners(&step));
    // On-demand checkpoints asked since the last chunk: one save serves
    // them all.
    TY_RETURN_IF_ERROR(ServeCheckpointRequests(step));
    const int64_t n = NextChunk(step, periods);
    const bool last = step + n == spec.total_steps();
    const bool save = last || AtBoundary(step + n, spec.checkpoint_period());
    std::vector<RunStepsResponse> ran;
    std::vector<absl::StatusOr<RunStepsResponse>> each;
    const absl::Time chunk_start = clock_->Now();
    const Goodput goodput = host_->GoodputNow(plan_.job_id);  // rank 0 writes it to TensorBoard
    const absl::Status run = OnAllRanks<RunStepsResponse>(
        "RunSteps",
        [&](int r, auto done) {
          RunStepsRequest request;
          request.set_job_id(plan_.job_id);
          request.set_first_step(step);
          request.set_num_steps(n);
          request.set_save_checkpoint(save);
          if (r == 0) *request.mutable_goodput() = goodput;
          clients_[r]->RunStepsAsync(request, std::move(done));
        },
        &ran, elastic() ? &each : nullptr);
    if (!run.ok()) {
      // ELASTIC: lost ranks are dropped and the others go on from where
      // they are (at most the failed step is computed again).
      TY_ASSIGN_OR_RETURN(
          bool ended, SurviveFailedChunk({run, std::move(each), chunk_start, n, save, last}, actions, &ending, &step));
      if (ended) break;
      continue;
    }
    const std::function<void(Goodput*)> account =
        ChunkGoodput(step, ran[0].preempted() ? ran[0].last_step() - step : n, ran[0], chunk_start);
    if (ran[0].preempted()) {
      std::vector<bool> asked;
      for (const auto& r : ran) asked.push_back(r.asked_to_stop());
      host_->RecordProgress(plan_.job_id, [&](JobInfo* info) { account(info->mutable_goodput()); });
      TY_ASSIGN_OR_RETURN(bool survived, SurvivePreemption(asked, ran[0].last_step(), ran[0].checkpoint(),
                                                           ran[0].metrics(), "", "", &ending, &step));
      if (survived) continue;  // ELASTIC: the others go on without the stopping worker
      return absl::OkStatus();
    }
    step += n;
    RecordChunk(step, ran, account);
    MetricsByTask train;
    train["train"] = std::map<std::string, double>(ran[0].metrics().begin(), ran[0].metrics().end());
    bool ended = RunActions(actions, {{ActionModeKind::kTrain, train}}, step, &ending);
    if (!ended && spec.eval_period() > 0 && (AtBoundary(step, spec.eval_period()) || last)) {
      TY_ASSIGN_OR_RETURN(ended, EvaluateRanks(step, actions, &ending));
    }
    if (!ended) continue;
    // An early stop keeps its state: every rank saves this step, unless the
    // chunk's own checkpoint is durable here already (written synchronously
    // and no rank's write failed).
    const bool durable = save && (last || !spec.checkpoint().async()) && checkpoint_failure_.empty();
    if (ending.stopped_early && !durable) TY_RETURN_IF_ERROR(ServeCheckpointRequests(step, SaveFor::kStopping));
    break;
  }
  trained_to_ = step;
  return absl::OkStatus();
}

void JobDriver::Run() {
  const std::string& job_id = plan_.job_id;
  JobState final_state = SUCCEEDED;
  std::string final_reason;
  const absl::Status status = Drive(&final_state, &final_reason);
  {
    // Whoever still waits for an on-demand checkpoint learns how this ended.
    MutexLock lock(&mu_);
    if (status.ok() && final_state == SUCCEEDED && !latest_checkpoint_.empty()) {
      ended_ = SavedCheckpoint{latest_checkpoint_, trained_to_};
    } else {
      ended_ = absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "' stopped before its next boundary between chunks: ",
                       stop_ ? stop_->reason : (status.ok() ? final_reason : status.ToString())));
    }
  }
  changed_.SignalAll();

  bool retryable = final_state == PREEMPTED;
  const std::optional<StopRequest> stop = stop_request();
  const bool shutting_down = stop && stop->shutdown;
  if (stop && !stop->shutdown) {
    final_state = stop->state;
    final_reason = stop->reason;
    retryable = stop->retryable;
  } else if (!status.ok()) {
    final_state = FAILED;
    final_reason = status.ToString();
    retryable = IsRetryable(status);
  }
  if (!shutting_down) {
    // Final before the teardown: watchers learn the outcome at once, even if
    // an unreachable rank makes its AbortJob wait for its deadline.
    if (final_state == PREEMPTED) host_->ChangeState(job_id, PREEMPTED, final_reason);
    std::function<void(JobInfo*)> edit;
    if (retryable) {
      // max_restarts is normalised: set, default 3.
      const NextAttempt next =
          AfterRetryableEnd(final_reason, plan_.restarts, plan_.spec.max_restarts(), latest_checkpoint_);
      final_state = next.state;
      final_reason = next.reason;
      edit = [restarts = next.restarts](JobInfo* info) { info->set_restarts(restarts); };
    }
    host_->ChangeState(job_id, final_state, final_reason, edit);
  }
  if (shutting_down && started_ && IsTrainingKind(plan_.spec.kind())) {
    // The ranks keep the job for the next coordinator to adopt (or until
    // their --orphan-timeout).
    spdlog::info("job {}: left running on its ranks for the next coordinator to adopt", job_id);
    return;
  }
  spdlog::info("job {}: {} {}", job_id, shutting_down ? "left as it is:" : JobState_Name(final_state), final_reason);
  // Tear the job down on every rank (also after success: the workers free
  // the model and close the collective).
  AbortJobRequest abort;
  abort.set_job_id(job_id);
  abort.set_reason(shutting_down ? "the coordinator is shutting down"
                                 : absl::StrCat("the job is ", JobState_Name(final_state),
                                                final_reason.empty() ? "" : ": " + final_reason));
  AbortEveryRank(abort);
}

void JobDriver::AbortEveryRank(const AbortJobRequest& abort) {
  // The answers only say the worker let go; one that did not answer is
  // taken back by the registry when its heartbeats say so. Workers that
  // built the job ahead of a join let go of it too.
  std::vector<std::shared_ptr<WorkerClient>> workers = clients_;
  for (const PreparingJoiner& p : preparing_) workers.push_back(p.worker.client);
  (void)AbortOnEveryWorker(workers, abort);
}

// The ELASTIC regroup (job_driver_elastic.cc) and an adoption
// (job_driver_adopt.cc) fan out too.
template absl::Status JobDriver::OnAllRanks<RegroupResponse>(const char*, const StartCall<RegroupResponse>&,
                                                             std::vector<RegroupResponse>*,
                                                             std::vector<absl::StatusOr<RegroupResponse>>*);
template absl::Status JobDriver::OnAllRanks<AdoptResponse>(const char*, const StartCall<AdoptResponse>&,
                                                           std::vector<AdoptResponse>*,
                                                           std::vector<absl::StatusOr<AdoptResponse>>*);

}  // namespace trainyard
