#include "coordinator/coordinator.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/jobspec_validator.h"
#include "spdlog/spdlog.h"
#include "common/overrides.h"
#include "common/status_macros.h"
#include "coordinator/scheduler.h"
#include "trainer/actions.h"

namespace trainyard {
namespace {

// Runs call(rank) for every rank at once and returns the results in rank
// order.
template <typename Response, typename Call>
std::vector<absl::StatusOr<Response>> CallAll(int n, Call call) {
  std::vector<absl::StatusOr<Response>> results(n, absl::UnknownError("not run"));
  if (n == 1) {
    results[0] = call(0);
    return results;
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) threads.emplace_back([&, rank] { results[rank] = call(rank); });
  for (std::thread& t : threads) t.join();
  return results;
}

// OK when every rank succeeded; otherwise the root cause, naming the rank
// and worker: the first error that is not kAborted (a peer reporting that
// another rank failed), else the first error.
template <typename Response>
absl::Status GroupStatus(const std::vector<absl::StatusOr<Response>>& results,
                         const std::vector<std::string>& worker_ids) {
  int chosen = -1;
  for (int r = 0; r < static_cast<int>(results.size()); ++r) {
    if (results[r].ok()) continue;
    if (chosen < 0) chosen = r;
    if (!absl::IsAborted(results[r].status()) && absl::IsAborted(results[chosen].status())) chosen = r;
  }
  if (chosen < 0) return absl::OkStatus();
  const absl::Status& s = results[chosen].status();
  if (results.size() == 1) return absl::Status(s.code(), absl::StrCat("worker ", worker_ids[0], ": ", s.message()));
  return absl::Status(s.code(), absl::StrCat("rank ", chosen, " (worker ", worker_ids[chosen], "): ", s.message()));
}

}  // namespace
namespace {

int64_t UnixMillis(Clock* clock) { return absl::ToUnixMillis(clock->Now()); }

std::string JobIdFor(const std::string& name, int64_t sequence) {
  std::string base;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    base += ok ? c : '-';
  }
  if (base.empty()) base = "job";
  if (base.size() > 48) base.resize(48);
  return absl::StrCat(base, "-", sequence);
}

// An error from the transport (the worker could not be reached or vanished)
// is the root cause of errors other ranks report about their peers.
bool IsTransportError(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

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
               options_.instance_id ? *options_.instance_id : RandomToken()) {
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
  r->OnScrape([this, jobs, workers, sessions] {
    std::map<std::string, int> by_state;
    for (int s = JobState_MIN; s <= JobState_MAX; ++s) {
      if (JobState_IsValid(s) && s != JOB_STATE_UNSPECIFIED) by_state[JobState_Name(static_cast<JobState>(s))] = 0;
    }
    std::map<std::string, int> worker_states = {{"IDLE", 0}, {"BUSY", 0}, {"DRAINING", 0}};
    size_t open_sessions;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, job] : jobs_) by_state[JobState_Name(job->info.state())]++;
      open_sessions = sessions_.size();
    }
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
  std::lock_guard<std::mutex> lock(mu_);
  next_sequence_ = std::max(next_sequence_, recorded_next);
  for (JobStore::Record& r : records) {
    auto job = std::make_unique<Job>();
    job->info = std::move(r.job);
    job->sequence = r.sequence;
    job->queued_since = options_.clock->Now();
    next_sequence_ = std::max(next_sequence_, r.sequence + 1);
    const JobState state = job->info.state();
    if (!IsFinal(state) && state != PENDING && state != RESTARTING) {
      // Its workers were driven by the previous coordinator: resume the job
      // from its newest checkpoint on a new gang, if restarts are left.
      const int max_restarts = job->info.spec().max_restarts();  // normalised: set, default 3
      const std::string what = absl::StrCat("the coordinator restarted while the job was ", JobState_Name(state));
      if (job->info.restarts() < max_restarts) {
        job->info.set_restarts(job->info.restarts() + 1);
        job->info.set_state(RESTARTING);
        job->info.set_reason(absl::StrCat(what, "; restart ", job->info.restarts(), " of ", max_restarts, " from ",
                                          job->info.latest_checkpoint().empty() ? "scratch"
                                                                                : job->info.latest_checkpoint()));
      } else {
        job->info.set_state(FAILED);
        job->info.set_reason(absl::StrCat(what, " (no restarts left: max_restarts ", max_restarts, ")"));
      }
      job->info.clear_ranks();
      job->info.set_update_time_unix_ms(UnixMillis(options_.clock));
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
  std::lock_guard<std::mutex> lock(mu_);
  if (scheduler_.joinable() || shutting_down_) return;
  scheduler_ = std::thread([this] { SchedulerLoop(); });
  persister_ = std::thread([this] { PersisterLoop(); });
}

void Coordinator::Shutdown() {
  std::vector<std::thread> drivers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    for (auto& [id, job] : jobs_) {
      if (job->driver.joinable()) drivers.push_back(std::move(job->driver));
    }
  }
  changed_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  for (std::thread& t : drivers) t.join();
  std::vector<Closer> closers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) CloseSessionLocked((it++)->first, "the coordinator stopped");
    closers.swap(session_closers_);
  }
  for (Closer& c : closers) c.thread.join();
  if (persister_.joinable()) persister_.join();
  // Progress recorded after the persister's last pass (or without one).
  std::lock_guard<std::mutex> lock(mu_);
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

void Coordinator::SchedulerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    lock.unlock();
    Tick();
    lock.lock();
    changed_.wait_for(lock, absl::ToChronoMilliseconds(options_.tick), [this] { return shutting_down_; });
  }
}

void Coordinator::Tick() {
  const absl::Time tick_start = absl::Now();
  absl::Cleanup time_tick = [this, tick_start] {
    if (metrics_.tick_seconds != nullptr) metrics_.tick_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - tick_start));
  };
  std::vector<WorkerRecord> lost = workers_.Expire();
  std::vector<std::thread> finished;
  absl::Cleanup join_finished = [&finished] {
    for (std::thread& t : finished) t.join();
  };
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  for (auto& [id, job] : jobs_) {
    if (job->driver_done && job->driver.joinable()) finished.push_back(std::move(job->driver));
  }
  RetainLocked();
  for (auto it = session_closers_.begin(); it != session_closers_.end();) {
    if (it->done->load()) {
      finished.push_back(std::move(it->thread));
      it = session_closers_.erase(it);
    } else {
      ++it;
    }
  }
  const absl::Time now = options_.clock->Now();
  std::vector<std::pair<std::string, absl::Duration>> idle_sessions;
  for (const auto& [id, session] : sessions_) {
    if (session.in_flight == 0 && now - session.last_used > session.idle_timeout) {
      idle_sessions.emplace_back(id, session.idle_timeout);
    }
  }
  for (const auto& [id, timeout] : idle_sessions) {
    CloseSessionLocked(id, absl::StrCat("idle for more than ", absl::FormatDuration(timeout)));
  }
  for (const WorkerRecord& w : lost) {
    spdlog::warn("worker {} ({} at {}) stopped heartbeating; removed from the pool", w.worker_id, w.host, w.address);
    if (sessions_.count(w.job_id)) CloseSessionLocked(w.job_id, absl::StrCat("its worker ", w.worker_id, " was lost"));
    if (w.job_id.empty()) continue;
    auto it = jobs_.find(w.job_id);
    if (it == jobs_.end() || IsFinal(it->second->info.state())) continue;
    Job* job = it->second.get();
    const auto rank = std::find(job->worker_ids.begin(), job->worker_ids.end(), w.worker_id);
    if (rank == job->worker_ids.end()) continue;
    StopLocked(job, FAILED,
               absl::StrCat(RankName(*job, static_cast<int>(rank - job->worker_ids.begin())),
                            " stopped heartbeating (nothing heard for more than ",
                            absl::FormatDuration(options_.heartbeat_timeout), ")"));
    job->stop_retryable = true;
  }
  // Oldest pending jobs first.
  std::vector<Job*> pending;
  for (auto& [id, job] : jobs_) {
    const bool waiting = (job->info.state() == PENDING && !job->stop) ||
                         (job->info.state() == RESTARTING && !job->driver.joinable());
    if (waiting) pending.push_back(job.get());
  }
  std::sort(pending.begin(), pending.end(), [](Job* a, Job* b) { return a->sequence < b->sequence; });
  std::vector<PendingJob> queue;
  for (Job* job : pending) queue.push_back({job->info.job_id(), std::max(job->info.spec().num_workers(), 1)});
  const std::vector<std::string> idle = workers_.Idle();
  const std::vector<GangAssignment> gangs = AssignGangs(queue, idle);
  size_t used = 0;
  for (const GangAssignment& gang : gangs) {
    StartJobLocked(jobs_[gang.job_id].get(), gang.worker_ids);
    used += gang.worker_ids.size();
  }
  // Say why the head of the queue waits (a restarting job keeps saying why
  // it restarts).
  if (gangs.size() < pending.size() && pending[gangs.size()]->info.state() == PENDING) {
    Job* head = pending[gangs.size()];
    const std::string reason = absl::StrCat("waiting for ", std::max(head->info.spec().num_workers(), 1),
                                            " idle workers (", idle.size() - used, " idle of ",
                                            workers_.List().size(), " registered)");
    if (head->info.reason() != reason) {
      head->info.set_reason(reason);
      UpdateLocked(head);
    }
  }
}

void Coordinator::StartJobLocked(Job* job, const std::vector<std::string>& worker_ids) {
  if (absl::Status s = workers_.Assign(worker_ids, job->info.job_id()); !s.ok()) {
    spdlog::warn("job {}: cannot assign its gang: {}", job->info.job_id(), s.ToString());
    return;
  }
  job->worker_ids = worker_ids;
  job->clients.clear();
  job->stop = false;
  job->stop_retryable = false;
  job->stop_reason.clear();
  job->driver_done = false;
  job->info.clear_ranks();
  for (size_t r = 0; r < worker_ids.size(); ++r) {
    absl::StatusOr<WorkerRecord> w = workers_.Get(worker_ids[r]);
    RankInfo* rank = job->info.add_ranks();
    rank->set_rank(static_cast<int>(r));
    rank->set_worker_id(worker_ids[r]);
    if (w.ok()) {
      rank->set_host(w->host);
      rank->set_address(w->address);
      rank->set_device(w->device);
      job->clients.push_back(client_factory_(*w));
    } else {
      job->clients.push_back(nullptr);
    }
  }
  SetStateLocked(job, STARTING, "");
  spdlog::info("job {}: starting on {} worker(s)", job->info.job_id(), worker_ids.size());
  job->driver = std::thread([this, job] { Drive(job); });
}

std::string Coordinator::RankName(const Job& job, int rank) const {
  if (rank < 0 || rank >= job.info.ranks_size()) return absl::StrCat("rank ", rank);
  const RankInfo& r = job.info.ranks(rank);
  return absl::StrCat("rank ", rank, " (worker ", r.worker_id(), " on host ", r.host(), ", ", r.address(), ")");
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
  changed_.notify_all();
}

void Coordinator::PersisterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait_for(lock, std::chrono::seconds(1), [this] { return shutting_down_; });
    std::vector<std::pair<JobInfo, int64_t>> batch;
    for (const std::string& id : dirty_) batch.emplace_back(jobs_[id]->info, jobs_[id]->sequence);
    dirty_.clear();
    // Deletions after this pass's writes (a record snapshotted before its
    // job was deleted is written, then deleted).
    std::vector<std::string> deletions;
    deletions.swap(to_delete_);
    const int64_t next_sequence = next_sequence_;
    const bool last = shutting_down_;
    lock.unlock();
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
    lock.lock();
    if (last) return;
  }
}

void Coordinator::SetStateLocked(Job* job, JobState state, const std::string& reason) {
  const JobState before = job->info.state();
  if (state != before) {
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
                 over_count ? absl::StrCat("only the newest ", keep, " finished jobs are kept")
                            : absl::StrCat("finished more than ", absl::FormatDuration(options_.keep_finished_for),
                                           " ago"));
    dirty_.erase(id);
    to_delete_.push_back(id);
    finished_.erase(finished_.begin());
    by_sequence_.erase(indexed);
    jobs_.erase(id);
    deleted = true;
  }
  if (deleted) changed_.notify_all();  // watchers of a deleted job learn it is gone
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
  return absl::NotFoundError(absl::StrCat("no job '", job_id, "'",
                                          kept.empty() ? "" : absl::StrCat(" (finished jobs are kept: ", kept, ")")));
}

void Coordinator::StopLocked(Job* job, JobState state, const std::string& reason) {
  if (job->stop || IsFinal(job->info.state())) return;
  job->stop = true;
  job->stop_state = state;
  job->stop_reason = reason;
  changed_.notify_all();
}

template <typename Response, typename Call>
absl::Status Coordinator::OnAllRanks(Job* job, const char* what, Call call, std::vector<Response>* responses) {
  const int world = static_cast<int>(job->clients.size());
  struct Shared {
    std::vector<std::optional<absl::StatusOr<Response>>> results;
    int done = 0;
    bool failed = false;
  };
  auto shared = std::make_shared<Shared>();
  shared->results.resize(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([this, shared, call, r] {
      absl::StatusOr<Response> result = call(r);
      std::lock_guard<std::mutex> lock(mu_);
      shared->failed = shared->failed || !result.ok();
      shared->results[r] = std::move(result);
      shared->done++;
      changed_.notify_all();
    });
  }
  bool all_ok;
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return shared->done == world || shared->failed || job->stop || shutting_down_; });
    if (shared->failed && shared->done < world) {
      // Give the other ranks a moment to report: the rank whose worker is
      // gone is the root cause, not its peers' collective errors.
      changed_.wait_for(lock, std::chrono::seconds(2), [&] { return shared->done == world || shutting_down_; });
    }
    all_ok = shared->done == world && !shared->failed;
  }
  if (!all_ok) {
    for (auto& c : job->clients) {
      if (c) c->CancelInFlight();
    }
  }
  for (std::thread& t : threads) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return absl::AbortedError("the coordinator is shutting down");
  if (job->stop) return absl::AbortedError(job->stop_reason);
  if (!all_ok) {
    int culprit = -1;
    for (int r = 0; r < world; ++r) {
      const auto& result = shared->results[r];
      if (!result || result->ok() || absl::IsCancelled(result->status())) continue;
      if (culprit < 0 || (IsTransportError(result->status()) &&
                          !IsTransportError(shared->results[culprit]->status()))) {
        culprit = r;
      }
    }
    if (culprit < 0) return absl::AbortedError(absl::StrCat(what, " was cancelled"));
    const absl::Status& s = shared->results[culprit]->status();
    return absl::Status(s.code(), absl::StrCat(RankName(*job, culprit), ": ", what, " failed: ", s.message()));
  }
  responses->clear();
  for (int r = 0; r < world; ++r) responses->push_back(**shared->results[r]);
  return absl::OkStatus();
}

void Coordinator::Drive(Job* job) {
  JobSpec spec;
  std::string job_id, restore_from;
  int attempt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    spec = job->info.spec();
    job_id = job->info.job_id();
    attempt = job->info.restarts();
    // A restart resumes from the job's own newest checkpoint.
    if (attempt > 0) restore_from = job->info.latest_checkpoint();
  }
  const int world = static_cast<int>(job->clients.size());
  std::string final_reason;
  JobState final_state = SUCCEEDED;

  absl::Status status = [&]() -> absl::Status {
    for (const auto& c : job->clients) {
      if (!c) return absl::UnavailableError("a worker of the gang left before the job started");
    }
    std::vector<StartJobResponse> started;
    TY_RETURN_IF_ERROR(OnAllRanks<StartJobResponse>(
        job, "StartJob",
        [&](int r) {
          StartJobRequest request;
          request.set_job_id(job_id);
          *request.mutable_spec() = spec;
          request.set_rank(r);
          request.set_world_size(world);
          request.set_attempt(attempt);
          request.set_restore_checkpoint(restore_from);
          return job->clients[r]->StartJob(request);
        },
        &started));
    int64_t step = started[0].start_step();
    {
      // What the workers restored (a restart whose newest checkpoint turned
      // out damaged restores an older one): the job's newest checkpoint now,
      // and the reason while it runs says what was passed over.
      std::string note;
      if (started[0].passed_over_size() > 0) {
        note = absl::StrCat("restored ",
                            started[0].restored_checkpoint().empty() ? "nothing (from scratch)"
                                                                     : started[0].restored_checkpoint(),
                            "; passed over ", absl::StrJoin(started[0].passed_over(), "; "));
        spdlog::warn("job {}: {}", job_id, note);
      }
      std::lock_guard<std::mutex> lock(mu_);
      job->info.set_step(step);
      if (!started[0].restored_checkpoint().empty() || started[0].passed_over_size() > 0) {
        job->info.set_latest_checkpoint(started[0].restored_checkpoint());
      }
      SetStateLocked(job, RUNNING, note);
    }
    if (spec.kind() == EVALUATION || spec.kind() == INFERENCE) {
      spdlog::info("job {}: {} of the checkpoint at step {} on {} split {}", job_id, JobKind_Name(spec.kind()), step,
                   spec.task(), spec.inference().split());
      std::vector<InferResponse> inferred;
      TY_RETURN_IF_ERROR(OnAllRanks<InferResponse>(
          job, "Infer",
          [&](int r) {
            InferRequest request;
            request.set_job_id(job_id);
            return job->clients[r]->Infer(request);
          },
          &inferred));
      int64_t examples = 0;
      for (const InferResponse& r : inferred) examples += r.examples();
      std::lock_guard<std::mutex> lock(mu_);
      job->info.mutable_metrics()->clear();
      for (const auto& [k, v] : inferred[0].metrics()) (*job->info.mutable_metrics())[k] = v;
      job->info.set_metrics_step(step);
      final_reason = absl::StrCat(examples, " example(s) decoded; predictions in ", inferred[0].output());
      return absl::OkStatus();
    }
    spdlog::info("job {}: running from step {} to {}", job_id, step, spec.total_steps());
    TY_ASSIGN_OR_RETURN(ActionsByMode actions, CreateActions(spec));
    ChunkPeriods periods;
    periods.total_steps = spec.total_steps();
    periods.summary_period = spec.summary_period();
    periods.eval_period = spec.eval_period();
    periods.checkpoint_period = spec.checkpoint_period();
    auto run_actions = [&](ActionModeKind mode, const MetricsByTask& metrics) -> bool {
      for (const auto& action : actions[mode]) {
        if (action->Run(step, metrics)) {
          final_reason = action->reason();
          final_state = dynamic_cast<TerminateOnNanAction*>(action.get()) ? FAILED : SUCCEEDED;
          return true;
        }
      }
      return false;
    };
    // A worker was asked to stop: every rank stopped after the same step
    // and rank 0 wrote the emergency checkpoint.
    auto preempted = [&](const std::vector<bool>& asked, int64_t last_step, const std::string& checkpoint,
                         const google::protobuf::Map<std::string, double>& metrics, const std::string& during) {
      int r = 0;
      while (r < world && !asked[r]) ++r;
      if (r == world) r = 0;
      std::lock_guard<std::mutex> lock(mu_);
      job->info.set_step(last_step);
      if (!checkpoint.empty()) job->info.set_latest_checkpoint(checkpoint);
      for (const auto& [k, v] : metrics) (*job->info.mutable_metrics())[k] = v;
      final_state = PREEMPTED;
      final_reason = absl::StrCat(RankName(*job, r), " was asked to stop; emergency checkpoint at step ", last_step,
                                  during, checkpoint.empty() ? "" : ": " + checkpoint);
    };
    while (step < spec.total_steps()) {
      const int64_t n = NextChunk(step, periods);
      const bool last = step + n == spec.total_steps();
      std::vector<RunStepsResponse> ran;
      TY_RETURN_IF_ERROR(OnAllRanks<RunStepsResponse>(
          job, "RunSteps",
          [&](int r) {
            RunStepsRequest request;
            request.set_job_id(job_id);
            request.set_first_step(step);
            request.set_num_steps(n);
            request.set_write_summary(true);
            request.set_save_checkpoint(last || AtBoundary(step + n, spec.checkpoint_period()));
            return job->clients[r]->RunSteps(request);
          },
          &ran));
      if (ran[0].preempted()) {
        std::vector<bool> asked;
        for (const auto& r : ran) asked.push_back(r.asked_to_stop());
        preempted(asked, ran[0].last_step(), ran[0].checkpoint(), ran[0].metrics(), "");
        return absl::OkStatus();
      }
      step += n;
      MetricsByTask train;
      {
        std::lock_guard<std::mutex> lock(mu_);
        job->info.set_step(step);
        job->info.mutable_metrics()->clear();
        for (const auto& [k, v] : ran[0].metrics()) (*job->info.mutable_metrics())[k] = v;
        job->info.set_metrics_step(step);
        if (!ran[0].checkpoint().empty()) job->info.set_latest_checkpoint(ran[0].checkpoint());
        for (int r = 0; r < world && r < job->info.ranks_size(); ++r) {
          job->info.mutable_ranks(r)->set_last_step_seconds(ran[r].seconds_per_step());
        }
        UpdateLocked(job, /*durable=*/false);
        train["train"] = std::map<std::string, double>(ran[0].metrics().begin(), ran[0].metrics().end());
      }
      if (run_actions(ActionModeKind::kTrain, train)) break;
      if (spec.eval_period() > 0 && (AtBoundary(step, spec.eval_period()) || last)) {
        std::vector<EvaluateResponse> evaluated;
        TY_RETURN_IF_ERROR(OnAllRanks<EvaluateResponse>(
            job, "Evaluate",
            [&](int r) {
              EvaluateRequest request;
              request.set_job_id(job_id);
              request.set_step(step);
              return job->clients[r]->Evaluate(request);
            },
            &evaluated));
        if (evaluated[0].preempted()) {
          std::vector<bool> asked;
          for (const auto& r : evaluated) asked.push_back(r.asked_to_stop());
          preempted(asked, step, evaluated[0].checkpoint(), {},
                    absl::StrCat(" (during the evaluation of step ", step, ", which is not repeated)"));
          return absl::OkStatus();
        }
        MetricsByTask eval;
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (const auto& [k, v] : evaluated[0].metrics()) {
            (*job->info.mutable_metrics())["training_eval/" + k] = v;
            std::vector<std::string> parts = absl::StrSplit(k, absl::MaxSplits('/', 1));
            if (parts.size() == 2) eval[parts[0]][parts[1]] = v;
          }
          UpdateLocked(job, /*durable=*/false);
        }
        if (run_actions(ActionModeKind::kTrainEval, eval)) break;
      }
    }
    return absl::OkStatus();
  }();

  bool shutting_down;
  bool retryable = final_state == PREEMPTED;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down = shutting_down_;
    if (job->stop) {
      final_state = job->stop_state;
      final_reason = job->stop_reason;
      retryable = job->stop_retryable;
    } else if (!status.ok()) {
      final_state = FAILED;
      final_reason = status.ToString();
      // A lost worker or a broken collective: another attempt may succeed.
      // Bad specs, divergence or a NaN will fail again.
      retryable = absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) || absl::IsAborted(status);
    }
  }
  if (!shutting_down) {
    // Final before the teardown: watchers learn the outcome at once, even if
    // an unreachable rank makes its AbortJob wait for its deadline.
    std::lock_guard<std::mutex> lock(mu_);
    if (final_state == PREEMPTED) SetStateLocked(job, PREEMPTED, final_reason);
    const int max_restarts = job->info.spec().max_restarts();  // normalised: set, default 3
    if (retryable && job->info.restarts() < max_restarts) {
      job->info.set_restarts(job->info.restarts() + 1);
      final_state = RESTARTING;
      final_reason = absl::StrCat(final_reason, "; restart ", job->info.restarts(), " of ", max_restarts, " from ",
                                  job->info.latest_checkpoint().empty() ? "scratch" : job->info.latest_checkpoint());
    } else if (retryable) {
      final_state = FAILED;
      final_reason = absl::StrCat(final_reason, " (no restarts left: max_restarts ", max_restarts, ")");
    }
    SetStateLocked(job, final_state, final_reason);
  }
  spdlog::info("job {}: {} {}", job_id, JobState_Name(final_state), final_reason);
  // Tear the job down on every rank (also after success: the workers free
  // the model and close the collective), then return the gang to the pool.
  // A worker is handed out again only once it reports it let go of the job.
  AbortJobRequest abort;
  abort.set_job_id(job_id);
  abort.set_reason(shutting_down ? "the coordinator is shutting down"
                                 : absl::StrCat("the job is ", JobState_Name(final_state),
                                                final_reason.empty() ? "" : ": " + final_reason));
  std::vector<std::thread> aborts;
  for (auto& c : job->clients) {
    if (c) aborts.emplace_back([c, abort] { c->AbortJob(abort).IgnoreError(); });
  }
  for (std::thread& t : aborts) t.join();
  workers_.Release(job->worker_ids);
  store_.ErasePrefix(absl::StrCat(job_id, "/"));
  std::lock_guard<std::mutex> lock(mu_);
  job->driver_done = true;
}

absl::StatusOr<SubmitJobResponse> Coordinator::SubmitJob(const SubmitJobRequest& request) {
  JobSpec spec = request.spec();
  std::vector<std::string> overrides(request.overrides().begin(), request.overrides().end());
  TY_RETURN_IF_ERROR(ApplyOverrides(overrides, &spec));
  ValidationOptions validation;
  validation.output_root = options_.output_root;
  TY_RETURN_IF_ERROR(ValidateAndNormalize(&spec, validation));
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  auto job = std::make_unique<Job>();
  job->sequence = next_sequence_++;
  job->info.set_job_id(JobIdFor(spec.name(), job->sequence));
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
  changed_.notify_all();
  return response;
}

absl::StatusOr<JobInfo> Coordinator::GetJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return UnknownJob(job_id);
  return it->second->info;
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
  std::lock_guard<std::mutex> lock(mu_);
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
    *response.add_jobs() = job->info;
    last_sequence = it->first;
  }
  return response;
}

absl::StatusOr<JobInfo> Coordinator::CancelJob(const std::string& job_id, const std::string& reason) {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  JobInfo info;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return UnknownJob(job_id);
    Job* job = it->second.get();
    if (IsFinal(job->info.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", job_id, "' already ended: ", JobState_Name(job->info.state())));
    }
    const std::string why = reason.empty() ? "cancelled by the user" : absl::StrCat("cancelled: ", reason);
    if (job->info.state() == PENDING || job->info.state() == RESTARTING) {
      // No attempt runs (a RESTARTING job's last one is over or tearing
      // down): final at once, never scheduled again.
      job->stop = true;
      SetStateLocked(job, CANCELLED, why);
    } else {
      StopLocked(job, CANCELLED, why);
    }
    info = job->info;
  }
  spdlog::info("job {}: cancel requested", job_id);
  return info;
}

absl::StatusOr<OpenSessionResponse> Coordinator::OpenSession(const OpenSessionRequest& original) {
  ValidationOptions paths;
  paths.output_root = options_.output_root;
  TY_ASSIGN_OR_RETURN(OpenSessionRequest request, NormalizeOpenSessionRequest(original, paths));
  const int num_workers = request.num_workers();
  std::string session_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
    if (!request.job_id().empty()) {
      auto it = jobs_.find(request.job_id());
      if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job_id: no job '", request.job_id(), "'"));
      if (it->second->info.latest_checkpoint().empty()) {
        return absl::FailedPreconditionError(absl::StrCat("job_id: job '", request.job_id(), "' has no checkpoint yet"));
      }
      request.set_checkpoint(it->second->info.latest_checkpoint());
    }
    if (request.checkpoint().empty()) return absl::InvalidArgumentError("checkpoint: required (or job_id)");
    // A random suffix: ids never repeat across coordinator restarts.
    session_id = absl::StrCat("session-", next_session_++, ".", absl::Hex(std::random_device()() & 0xffff));
  }
  // Idle workers, waiting a little for them (a worker that has just
  // finished a job becomes idle at its next heartbeat).
  std::vector<std::string> worker_ids;
  const absl::Time give_up = absl::Now() + absl::Seconds(request.wait_seconds());
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
      std::vector<std::string> idle = workers_.Idle();
      if (static_cast<int>(idle.size()) >= num_workers) {
        idle.resize(num_workers);
        if (workers_.Assign(idle, session_id).ok()) worker_ids = idle;
      }
    }
    if (!worker_ids.empty()) break;
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat("no ", num_workers, " idle worker(s) for a session within ",
                                                 request.wait_seconds(), " s; try again when a job has finished"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  Session session;
  session.id = session_id;
  session.worker_ids = worker_ids;
  session.idle_timeout = absl::Seconds(request.idle_timeout_seconds());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : worker_ids) {
      absl::StatusOr<WorkerRecord> record = workers_.Get(id);
      if (!record.ok()) {
        workers_.Release(worker_ids);
        return absl::UnavailableError(absl::StrCat("worker ", id, " left"));
      }
      session.clients.push_back(client_factory_(*record));
    }
  }
  // Every worker at once: with several, they meet in the store under the
  // session's id before loading the model.
  std::vector<absl::StatusOr<OpenSessionResponse>> opened =
      CallAll<OpenSessionResponse>(num_workers, [&](int rank) {
        WorkerOpenSessionRequest open;
        open.set_session_id(session_id);
        *open.mutable_request() = request;
        open.set_rank(rank);
        open.set_world_size(num_workers);
        return session.clients[rank]->OpenSession(open);
      });
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status failed = GroupStatus(opened, worker_ids); !failed.ok()) {
    // Those that opened let go again; all return to the pool.
    sessions_[session_id] = session;
    CloseSessionLocked(session_id, "it could not be opened");
    return absl::Status(failed.code(), absl::StrCat("opening the session: ", failed.message()));
  }
  session.last_used = options_.clock->Now();
  sessions_[session_id] = session;
  OpenSessionResponse response = *opened[0];
  response.set_worker_id(worker_ids[0]);
  for (const std::string& id : worker_ids) response.add_worker_ids(id);
  spdlog::info("session {}: opened on worker(s) {} ({}, step {})", session_id, absl::StrJoin(worker_ids, ", "),
               request.checkpoint(), response.step());
  return response;
}

absl::StatusOr<SessionResponse> Coordinator::RunSession(const SessionRequest& request) {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  std::vector<std::string> worker_ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(request.session_id());
    if (it == sessions_.end()) {
      auto closed = closed_sessions_.find(request.session_id());
      return absl::NotFoundError(absl::StrCat("no session '", request.session_id(), "'",
                                              closed == closed_sessions_.end() ? "" : ": closed, " + closed->second));
    }
    it->second.in_flight++;
    clients = it->second.clients;
    worker_ids = it->second.worker_ids;
  }
  std::vector<absl::StatusOr<SessionResponse>> responses = CallAll<SessionResponse>(
      static_cast<int>(clients.size()), [&](int rank) { return clients[rank]->RunSession(request); });
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(request.session_id());
  if (it != sessions_.end()) {
    it->second.in_flight--;
    it->second.last_used = options_.clock->Now();
  }
  absl::Status status = GroupStatus(responses, worker_ids);
  if (status.ok()) return std::move(*responses[0]);
  if (clients.size() == 1) return responses[0].status();
  bool same = true;
  for (const auto& r : responses) same = same && r.status().code() == responses[0].status().code();
  if (same) return responses[0].status();  // e.g. bad examples: every rank refused them alike
  // The workers no longer agree (one failed or is gone): the group is
  // broken.
  if (it != sessions_.end()) CloseSessionLocked(request.session_id(), absl::StrCat("a worker failed: ", status.message()));
  return absl::Status(status.code(), absl::StrCat(status.message(), "; the session is closed"));
}

absl::Status Coordinator::CloseSession(const std::string& session_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sessions_.count(session_id)) return absl::NotFoundError(absl::StrCat("no session '", session_id, "'"));
  CloseSessionLocked(session_id, "by its client");
  return absl::OkStatus();
}

void Coordinator::CloseSessionLocked(std::string session_id, const std::string& why) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return;
  Session session = it->second;
  sessions_.erase(it);
  closed_sessions_[session_id] = why;
  workers_.Release(session.worker_ids);  // DRAINING until each worker says it let go
  store_.ErasePrefix(absl::StrCat(session_id, "/"));
  spdlog::info("session {}: closed ({})", session_id, why);
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread closer([session, why, done] {
    AbortJobRequest abort;
    abort.set_job_id(session.id);
    abort.set_reason(absl::StrCat("the session is closed: ", why));
    CallAll<bool>(static_cast<int>(session.clients.size()), [&](int rank) -> absl::StatusOr<bool> {
      if (absl::Status s = session.clients[rank]->AbortJob(abort); !s.ok()) {
        spdlog::warn("session {}: worker {} did not confirm the close: {}", session.id, session.worker_ids[rank],
                     s.ToString());
      }
      return true;
    });
    *done = true;
  });
  session_closers_.push_back(Closer{std::move(closer), done});
}

absl::StatusOr<JobInfo> Coordinator::WaitForChange(const std::string& job_id, int64_t* version,
                                                   absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // The job may be deleted (retention) while this waits: look it up again.
  auto find = [&]() -> Job* {
    auto it = jobs_.find(job_id);
    return it == jobs_.end() ? nullptr : it->second.get();
  };
  if (find() == nullptr) return UnknownJob(job_id);
  if (*version > 0) {
    changed_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] {
      const Job* job = find();
      return job == nullptr || job->version > *version || shutting_down_;
    });
  }
  const Job* job = find();
  if (job == nullptr) return UnknownJob(job_id);
  *version = job->version;
  return job->info;
}

absl::StatusOr<RegisterWorkerResponse> Coordinator::RegisterWorker(const RegisterWorkerRequest& request) {
  TY_ASSIGN_OR_RETURN(std::string id, workers_.Register(request.host(), request.address(), request.device(),
                                                        request.pid(), request.held_job_id()));
  spdlog::info("worker {} registered: host {}, {}, device {}", id, request.host(), request.address(),
           request.device().empty() ? "cpu" : request.device());
  RegisterWorkerResponse response;
  response.set_worker_id(id);
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  changed_.notify_all();
  return response;
}

absl::StatusOr<HeartbeatResponse> Coordinator::Heartbeat(const HeartbeatRequest& request) {
  HeartbeatResponse response;
  absl::Status s = workers_.Heartbeat(request.worker_id(), request.job_id());
  if (absl::IsNotFound(s)) {
    response.set_reregister(true);
    return response;
  }
  TY_RETURN_IF_ERROR(s);
  if (!request.job_id().empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(request.job_id());
    // Rank 0's step inside a chunk: live progress for watchers.
    if (it != jobs_.end() && it->second->info.state() == RUNNING && !it->second->worker_ids.empty() &&
        it->second->worker_ids[0] == request.worker_id() && request.step() > it->second->info.step()) {
      it->second->info.set_step(request.step());
      it->second->version++;
      changed_.notify_all();
    }
  }
  return response;
}

}  // namespace trainyard
