// The Coordinator's job table: its life cycle (load, start, shut down), the
// JobService calls, state changes and their persistence. Workers and gangs
// (registration, heartbeats, the scheduler's tick) are in
// coordinator_gangs.cc, the drive loop of one job in job_driver.cc, sessions
// in session_manager.cc.
#include "coordinator/coordinator.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/attempt_policy.h"
#include "coordinator/goodput.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec_validator.h"
#include "spec/overrides.h"

namespace trainyard {
namespace {

int64_t UnixMillis(Clock* clock) { return absl::ToUnixMillis(clock->Now()); }

// Four random hex digits: tell this coordinator's worker ids from a
// previous one's.
std::string RandomToken() {
  std::random_device device;
  return absl::StrFormat("%04x", device() & 0xffff);
}

}  // namespace

bool IsFinal(JobState state) { return state == SUCCEEDED || state == FAILED || state == CANCELLED; }

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(CoordinatorOptions options,
                                                                 WorkerClientFactory client_factory) {
  if (options.state_dir.empty()) return absl::InvalidArgumentError("--state-dir: empty; expected a directory");
  TY_ASSIGN_OR_RETURN(std::unique_ptr<JobStore> db, JobStore::Open(options.state_dir + "/jobs.db"));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), std::move(client_factory), std::move(db)));
  TY_RETURN_IF_ERROR(c->Load());
  return c;
}

Coordinator::Coordinator(CoordinatorOptions options, WorkerClientFactory factory, std::unique_ptr<JobStore> db)
    : options_(std::move(options)),
      client_factory_(std::move(factory)),
      db_(std::move(db)),
      workers_(options_.clock, options_.heartbeat_timeout,
               options_.instance_id ? *options_.instance_id : RandomToken()),
      sessions_(SessionManagerOptions{options_.output_root, options_.clock, &workers_, client_factory_, &store_,
                                      [this](const std::string& job_id) { return JobCheckpoint(job_id); },
                                      [this](const std::string& session_id, int n, absl::Duration wait) {
                                        return AcquireSessionWorkers(session_id, n, wait);
                                      }}) {
  if (options_.metrics != nullptr) DefineMetrics();
}

void Coordinator::DefineMetrics() {
  MetricsRegistry* r = options_.metrics;
  metrics_.submitted = r->AddCounter("trainyard_jobs_submitted_total", "Jobs accepted by SubmitJob.");
  metrics_.restarts = r->AddCounter("trainyard_job_restarts_total", "Job attempts restarted after a failure.");
  metrics_.finished = r->AddCounter("trainyard_jobs_finished_total", "Jobs that reached a final state, by state.");
  metrics_.tick_seconds = r->AddHistogram("trainyard_scheduler_tick_seconds", "Time of one scheduling pass.",
                                          MetricsRegistry::LatencyBuckets());
  metrics_.scheduling_delay =
      r->AddHistogram("trainyard_scheduling_delay_seconds",
                      "From PENDING or RESTARTING to RUNNING (waiting for workers, starting the gang).",
                      MetricsRegistry::LatencyBuckets());
  metrics_.submitted->Init();
  metrics_.restarts->Init();
  for (JobState s : {SUCCEEDED, FAILED, CANCELLED}) metrics_.finished->Init({{"state", JobState_Name(s)}});
  metrics_.tick_seconds->Init();
  metrics_.scheduling_delay->Init();
  Gauge* jobs = r->AddGauge("trainyard_jobs", "Jobs known to the coordinator, by state.");
  Gauge* workers = r->AddGauge("trainyard_workers", "Registered workers, by state.");
  Gauge* sessions = r->AddGauge("trainyard_sessions", "Open interactive sessions.");
  Gauge* goodput = r->AddGauge("trainyard_job_goodput_ratio",
                               "Productive share of the wall time of each job not yet ended (JobInfo.goodput).");
  Gauge* seconds = r->AddGauge("trainyard_job_time_seconds",
                               "Wall time of each job not yet ended, by where it went (JobInfo.goodput).");
  r->OnScrape([this, jobs, workers, sessions, goodput, seconds] {
    goodput->Clear();
    seconds->Clear();
    {
      MutexLock lock(&mu_);
      for (const auto& [id, job] : jobs_) {
        if (IsFinal(job->info.state())) continue;
        const Goodput g = ViewLocked(*job).goodput();
        goodput->Set(g.ratio(), {{"job", id}});
        for (const auto& [bucket, value] :
             std::vector<std::pair<const char*, double>>{{"productive", g.productive_seconds()},
                                                         {"recomputed", g.recomputed_seconds()},
                                                         {"recovery", g.recovery_seconds()},
                                                         {"checkpoint", g.checkpoint_seconds()},
                                                         {"evaluation", g.evaluation_seconds()},
                                                         {"data_wait", g.data_wait_seconds()},
                                                         {"queued", g.queued_seconds()},
                                                         {"startup", g.startup_seconds()},
                                                         {"other", g.other_seconds()}}) {
          seconds->Set(value, {{"job", id}, {"kind", bucket}});
        }
      }
    }
    std::map<std::string, int> by_state;
    for (int s = JobState_MIN; s <= JobState_MAX; ++s) {
      if (JobState_IsValid(s) && s != JOB_STATE_UNSPECIFIED) by_state[JobState_Name(static_cast<JobState>(s))] = 0;
    }
    std::map<std::string, int> worker_states = {{"IDLE", 0}, {"BUSY", 0}, {"DRAINING", 0}};
    {
      MutexLock lock(&mu_);
      for (const auto& [id, job] : jobs_) by_state[JobState_Name(job->info.state())]++;
    }
    const size_t open_sessions = sessions_.open_sessions();
    for (const WorkerRecord& w : workers_.List()) worker_states[WorkerStateName(w.state)]++;
    for (const auto& [state, n] : by_state) jobs->Set(n, {{"state", state}});
    for (const auto& [state, n] : worker_states) workers->Set(n, {{"state", state}});
    sessions->Set(static_cast<double>(open_sessions));
  });
}

Coordinator::~Coordinator() { Shutdown(); }

absl::Status Coordinator::Load() {
  TY_ASSIGN_OR_RETURN(std::vector<JobStore::Record> records, db_->LoadAll());
  TY_ASSIGN_OR_RETURN(int64_t recorded_next, db_->RecordedNextSequence());
  MutexLock lock(&mu_);
  next_sequence_ = std::max(next_sequence_, recorded_next);
  for (JobStore::Record& r : records) {
    auto job = std::make_unique<Job>();
    job->info = std::move(r.job);
    job->id = job->info.job_id();
    job->sequence = r.sequence;
    job->queued_since = options_.clock->Now();
    next_sequence_ = std::max(next_sequence_, r.sequence + 1);
    const JobState state = job->info.state();
    if (!IsFinal(state) && state != PENDING && state != RESTARTING && AwaitAdoptionLocked(job.get())) {
      TY_RETURN_IF_ERROR(db_->Put(job->info, job->sequence));
    } else if (!IsFinal(state) && state != PENDING && state != RESTARTING) {
      // Its workers were driven by the previous coordinator (and it cannot
      // be adopted): resume the job from its newest checkpoint on a new
      // gang, if restarts are left.
      // max_restarts is normalised: set, default 3.
      const NextAttempt next =
          AfterRetryableEnd(absl::StrCat("the coordinator restarted while the job was ", JobState_Name(state)),
                            job->info.restarts(), job->info.spec().max_restarts(), job->info.latest_checkpoint());
      job->info.set_restarts(next.restarts);
      job->info.set_state(next.state);
      job->info.set_reason(next.reason);
      job->info.clear_ranks();
      job->info.set_update_time_unix_ms(UnixMillis(options_.clock));
      spdlog::warn("job {}: {} {}", job->id, JobState_Name(job->info.state()), job->info.reason());
      TY_RETURN_IF_ERROR(db_->Put(job->info, job->sequence));
    }
    if (IsFinal(job->info.state())) {
      // Records written before end times were kept: their last update.
      if (job->info.end_time_unix_ms() == 0) job->info.set_end_time_unix_ms(job->info.update_time_unix_ms());
      finished_.insert({job->info.end_time_unix_ms(), job->sequence});
    }
    by_sequence_[job->sequence] = job.get();
    const std::string id = job->info.job_id();
    jobs_[id] = std::move(job);
  }
  RetainLocked();
  return absl::OkStatus();
}

void Coordinator::Start() {
  MutexLock lock(&mu_);
  if (scheduler_.joinable() || shutting_down_) return;
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  persister_ = std::thread([this] { PersisterLoop(); });
}

void Coordinator::Shutdown() {
  std::vector<std::thread> drivers;
  {
    MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [id, job] : jobs_) {
      if (job->driver.joinable()) {
        job->attempt->ShutDown();
        drivers.push_back(std::move(job->driver));
      }
    }
  }
  changed_.SignalAll();
  if (scheduler_.joinable()) scheduler_.join();
  for (std::thread& t : drivers) t.join();
  farewells_.JoinAll();
  sessions_.Shutdown();
  if (persister_.joinable()) persister_.join();
  // Progress recorded after the persister's last pass (or without one).
  MutexLock lock(&mu_);
  for (const std::string& id : dirty_) {
    if (absl::Status s = db_->Put(jobs_[id]->info, jobs_[id]->sequence); !s.ok()) {
      spdlog::error("job {}: cannot persist its progress: {}", id, s.ToString());
    }
  }
  dirty_.clear();
  if (!to_delete_.empty()) {
    if (absl::Status s = db_->Delete(to_delete_, next_sequence_); !s.ok()) {
      spdlog::error("cannot delete {} finished job record(s): {}", to_delete_.size(), s.ToString());
    }
    to_delete_.clear();
  }
}

Coordinator::Job* Coordinator::FindLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void Coordinator::UpdateLocked(Job* job, bool durable) {
  job->version++;
  job->info.set_update_time_unix_ms(UnixMillis(options_.clock));
  if (durable) {
    dirty_.erase(job->info.job_id());
    if (absl::Status s = db_->Put(job->info, job->sequence); !s.ok()) {
      spdlog::error("job {}: cannot persist its state: {}", job->info.job_id(), s.ToString());
    }
  } else {
    dirty_.insert(job->info.job_id());
  }
  changed_.SignalAll();
}

void Coordinator::PersisterLoop() {
  while (true) {
    std::vector<std::pair<JobInfo, int64_t>> batch;
    std::vector<std::string> deletions;
    int64_t next_sequence;
    bool last;
    {
      MutexLock lock(&mu_);
      const absl::Time next = absl::Now() + absl::Seconds(1);
      while (!shutting_down_ && !changed_.WaitWithDeadline(&mu_, next)) {
      }
      for (const std::string& id : dirty_) batch.emplace_back(jobs_[id]->info, jobs_[id]->sequence);
      dirty_.clear();
      // Deletions after this pass's writes (a record snapshotted before its
      // job was deleted is written, then deleted).
      deletions.swap(to_delete_);
      next_sequence = next_sequence_;
      last = shutting_down_;
    }
    for (const auto& [info, sequence] : batch) {
      if (absl::Status s = db_->Put(info, sequence); !s.ok()) {
        spdlog::error("job {}: cannot persist its progress: {}", info.job_id(), s.ToString());
      }
    }
    if (!deletions.empty()) {
      if (absl::Status s = db_->Delete(deletions, next_sequence); !s.ok()) {
        spdlog::error("cannot delete {} finished job record(s): {}", deletions.size(), s.ToString());
      }
    }
    if (last) return;
  }
}

void Coordinator::SetStateLocked(Job* job, JobState state, const std::string& reason) {
  const JobState before = job->info.state();
  if (state != before) {
    // Goodput: a wait for a gang is queueing before the first attempt and
    // a fault's cost after one.
    if (before == PENDING || before == RESTARTING) {
      const double waited = absl::ToDoubleSeconds(options_.clock->Now() - job->queued_since);
      Goodput* g = job->info.mutable_goodput();
      if (before == PENDING) {
        g->set_queued_seconds(g->queued_seconds() + waited);
      } else {
        g->set_recovery_seconds(g->recovery_seconds() + waited);
      }
    }
    if (state == PENDING || state == RESTARTING) job->queued_since = options_.clock->Now();
    if (metrics_.submitted != nullptr) {
      if (state == RUNNING) {
        metrics_.scheduling_delay->Observe(absl::ToDoubleSeconds(options_.clock->Now() - job->queued_since));
      }
      if (state == RESTARTING) metrics_.restarts->Increment();
      if (IsFinal(state)) metrics_.finished->Increment({{"state", JobState_Name(state)}});
    }
  }
  job->info.set_state(state);
  job->info.set_reason(reason);
  const bool finishes = IsFinal(state) && !IsFinal(before);
  if (finishes) job->info.set_end_time_unix_ms(UnixMillis(options_.clock));
  UpdateLocked(job);
  if (finishes) {
    finished_.insert({job->info.end_time_unix_ms(), job->sequence});
    RetainLocked();
  }
}

void Coordinator::RetainLocked() {
  const int64_t keep = options_.keep_finished_jobs;
  const int64_t max_age_ms = absl::ToInt64Milliseconds(options_.keep_finished_for);
  if (keep <= 0 && max_age_ms <= 0) return;
  const int64_t now_ms = UnixMillis(options_.clock);
  bool deleted = false;
  while (!finished_.empty()) {
    const auto [end_ms, sequence] = *finished_.begin();
    const bool over_count = keep > 0 && static_cast<int64_t>(finished_.size()) > keep;
    const bool too_old = max_age_ms > 0 && now_ms - end_ms > max_age_ms;
    if (!over_count && !too_old) break;
    auto indexed = by_sequence_.find(sequence);
    if (indexed == by_sequence_.end()) {  // cannot happen: every finished job is indexed
      finished_.erase(finished_.begin());
      continue;
    }
    Job* job = indexed->second;
    // Its driver is still tearing it down, or done but not yet joined: the
    // scheduler's next tick joins it, then this runs again.
    if (job->driver.joinable()) break;
    const std::string id = job->info.job_id();
    spdlog::info("job {}: record deleted ({})", id,
                 over_count
                     ? absl::StrCat("only the newest ", keep, " finished jobs are kept")
                     : absl::StrCat("finished more than ", absl::FormatDuration(options_.keep_finished_for), " ago"));
    dirty_.erase(id);
    to_delete_.push_back(id);
    finished_.erase(finished_.begin());
    by_sequence_.erase(indexed);
    jobs_.erase(id);
    deleted = true;
  }
  if (deleted) changed_.SignalAll();  // watchers of a deleted job learn it is gone
}

absl::Status Coordinator::UnknownJob(const std::string& job_id) const {
  std::string kept;
  if (options_.keep_finished_jobs > 0) {
    kept = absl::StrCat("the newest ", options_.keep_finished_jobs);
  }
  if (options_.keep_finished_for > absl::ZeroDuration()) {
    absl::StrAppend(&kept, kept.empty() ? "" : ", and ", "those that finished within the last ",
                    absl::FormatDuration(options_.keep_finished_for));
  }
  return absl::NotFoundError(
      absl::StrCat("no job '", job_id, "'", kept.empty() ? "" : absl::StrCat(" (finished jobs are kept: ", kept, ")")));
}

void Coordinator::StopLocked(Job* job, JobState state, const std::string& reason, bool retryable) {
  if (job->stop || IsFinal(job->info.state())) return;
  job->stop = true;
  if (job->attempt) job->attempt->Stop(state, reason, retryable);
  changed_.SignalAll();
}

void Coordinator::Drive(Job* job) {
  job->attempt->Run();
  // A worker is handed out again only once it reports it let go of the job.
  workers_.Release(job->worker_ids);
  store_.ErasePrefix(absl::StrCat(job->id, "/"));
  MutexLock lock(&mu_);
  job->driver_done = true;
}

Goodput Coordinator::GoodputNow(const std::string& job_id) {
  absl::StatusOr<JobInfo> info = GetJob(job_id);
  return info.ok() ? info->goodput() : Goodput();
}

void Coordinator::RecordProgress(const std::string& job_id, const std::function<void(JobInfo*)>& edit) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  edit(&it->second->info);
  UpdateLocked(it->second.get(), /*durable=*/false);
}

void Coordinator::ChangeState(const std::string& job_id, JobState state, const std::string& reason,
                              const std::function<void(JobInfo*)>& edit) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  if (edit) edit(&it->second->info);
  SetStateLocked(it->second.get(), state, reason);
}

absl::StatusOr<SubmitJobResponse> Coordinator::SubmitJob(const SubmitJobRequest& request) {
  JobSpec spec = request.spec();
  std::vector<std::string> overrides(request.overrides().begin(), request.overrides().end());
  TY_RETURN_IF_ERROR(ApplyOverrides(overrides, &spec));
  ValidationOptions validation;
  validation.output_root = options_.output_root;
  TY_RETURN_IF_ERROR(ValidateAndNormalize(&spec, validation));
  MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  auto job = std::make_unique<Job>();
  job->sequence = next_sequence_++;
  job->id = JobIdFor(spec.name(), job->sequence);
  job->info.set_job_id(job->id);
  *job->info.mutable_spec() = spec;
  job->info.set_state(PENDING);
  job->info.set_create_time_unix_ms(UnixMillis(options_.clock));
  job->info.set_update_time_unix_ms(job->info.create_time_unix_ms());
  job->queued_since = options_.clock->Now();
  TY_RETURN_IF_ERROR(db_->Put(job->info, job->sequence));
  if (metrics_.submitted != nullptr) metrics_.submitted->Increment();
  SubmitJobResponse response;
  response.set_job_id(job->info.job_id());
  *response.mutable_normalized_spec() = spec;
  spdlog::info("job {}: submitted ({} worker(s), {} steps)", job->info.job_id(), spec.num_workers(),
               spec.total_steps());
  by_sequence_[job->sequence] = job.get();
  jobs_[job->info.job_id()] = std::move(job);
  changed_.SignalAll();
  return response;
}

absl::StatusOr<JobInfo> Coordinator::GetJob(const std::string& job_id) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  return ViewLocked(*it->second);
}

JobInfo Coordinator::ViewLocked(const Job& job) const {
  JobInfo info = job.info;
  // A wait for a gang still going on counts up to now.
  const JobState state = info.state();
  if (state == PENDING || state == RESTARTING) {
    const double waited = absl::ToDoubleSeconds(options_.clock->Now() - job.queued_since);
    Goodput* g = info.mutable_goodput();
    if (state == PENDING) {
      g->set_queued_seconds(g->queued_seconds() + waited);
    } else {
      g->set_recovery_seconds(g->recovery_seconds() + waited);
    }
  }
  FinishGoodput(info.create_time_unix_ms(), info.end_time_unix_ms(), UnixMillis(options_.clock),
                info.mutable_goodput());
  return info;
}

absl::StatusOr<ListJobsResponse> Coordinator::ListJobs(const ListJobsRequest& request) {
  constexpr int kDefaultPageSize = 100;
  constexpr int kMaxPageSize = 1000;
  if (request.page_size() < 0 || request.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("page_size: ", request.page_size(), "; allowed 0..", kMaxPageSize,
                                                   " (0: ", kDefaultPageSize, ")"));
  }
  const int page_size = request.page_size() == 0 ? kDefaultPageSize : request.page_size();
  // The token is the sequence number of the last job of the previous page.
  int64_t below = std::numeric_limits<int64_t>::max();
  if (!request.page_token().empty() && (!absl::SimpleAtoi(request.page_token(), &below) || below <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: '", request.page_token(), "' is not a next_page_token from ListJobs"));
  }
  MutexLock lock(&mu_);
  ListJobsResponse response;
  int64_t last_sequence = 0;
  for (auto it = std::make_reverse_iterator(by_sequence_.lower_bound(below)); it != by_sequence_.rend(); ++it) {
    const Job* job = it->second;
    if (!request.states().empty() &&
        std::find(request.states().begin(), request.states().end(), job->info.state()) == request.states().end()) {
      continue;
    }
    if (response.jobs_size() == page_size) {  // another one exists: there is a next page
      response.set_next_page_token(absl::StrCat(last_sequence));
      break;
    }
    *response.add_jobs() = ViewLocked(*job);
    last_sequence = it->first;
  }
  return response;
}

absl::StatusOr<JobInfo> Coordinator::CancelJob(const std::string& job_id, const std::string& reason) {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  JobInfo info;
  {
    MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return UnknownJob(job_id);
    Job* job = it->second.get();
    if (IsFinal(job->info.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "' already ended: ", JobState_Name(job->info.state())));
    }
    const std::string why = reason.empty() ? "cancelled by the user" : absl::StrCat("cancelled: ", reason);
    if (job->info.state() == PENDING || job->info.state() == RESTARTING || job->adoption) {
      // No attempt runs (a RESTARTING job's last one is over or tearing
      // down; the ranks of one waiting for adoption let go): final at once,
      // never scheduled again.
      if (job->adoption) EndAdoptionLocked(job);
      job->stop = true;
      SetStateLocked(job, CANCELLED, why);
    } else {
      StopLocked(job, CANCELLED, why, /*retryable=*/false);
    }
    info = ViewLocked(*job);
  }
  spdlog::info("job {}: cancel requested", job_id);
  return info;
}

absl::StatusOr<CheckpointJobResponse> Coordinator::CheckpointJob(const CheckpointJobRequest& request) {
  const int seconds = request.timeout_seconds() == 0 ? 600 : request.timeout_seconds();
  if (seconds < 1 || seconds > 86400) {
    return absl::InvalidArgumentError(absl::StrCat("timeout_seconds: ", seconds, "; allowed 1..86400"));
  }
  std::shared_ptr<JobDriver> attempt;
  {
    MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it == jobs_.end()) return UnknownJob(request.job_id());
    Job* job = it->second.get();
    if (job->info.state() != RUNNING || job->attempt == nullptr || job->driver_done) {
      return absl::FailedPreconditionError(absl::StrCat("job '", request.job_id(), "' is ",
                                                        JobState_Name(job->info.state()),
                                                        "; only a RUNNING job can write a checkpoint on request"));
    }
    attempt = job->attempt;
  }
  TY_ASSIGN_OR_RETURN(JobDriver::SavedCheckpoint saved, attempt->CheckpointNow(absl::Seconds(seconds)));
  CheckpointJobResponse response;
  response.set_path(saved.path);
  response.set_step(saved.step);
  return response;
}

absl::StatusOr<OpenSessionResponse> Coordinator::OpenSession(const OpenSessionRequest& request) {
  {
    MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  }
  return sessions_.Open(request);
}

absl::StatusOr<SessionResponse> Coordinator::RunSession(const SessionRequest& request) {
  return sessions_.Run(request);
}

absl::Status Coordinator::CloseSession(const std::string& session_id) { return sessions_.Close(session_id); }

absl::StatusOr<std::string> Coordinator::JobCheckpoint(const std::string& job_id) {
  MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  return it->second->info.latest_checkpoint();
}

absl::StatusOr<JobInfo> Coordinator::WaitForChange(const std::string& job_id, int64_t* version,
                                                   absl::Duration timeout) {
  MutexLock lock(&mu_);
  // The job may be deleted (retention) while this waits: look it up again.
  if (FindLocked(job_id) == nullptr) return UnknownJob(job_id);
  if (*version > 0) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const Job* job = FindLocked(job_id);
      if (job == nullptr || job->version > *version || shutting_down_) break;
      if (changed_.WaitWithDeadline(&mu_, deadline)) break;  // timed out
    }
  }
  const Job* job = FindLocked(job_id);
  if (job == nullptr) return UnknownJob(job_id);
  *version = job->version;
  return ViewLocked(*job);
}

}  // namespace trainyard
