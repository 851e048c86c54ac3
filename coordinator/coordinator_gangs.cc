// The Coordinator's workers and gangs: registration and heartbeats, the
// scheduler's tick (lost workers, gangs for queued jobs, attempts started),
// workers for sessions, and ELASTIC's joins and rank changes. The job
// table's own calls are in coordinator.cc.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void Coordinator::SchedulerLoop() {
  while (true) {
    Tick();
    MutexLock lock(&mu_);
    const absl::Time next = absl::Now() + options_.tick;
    while (!shutting_down_ && !changed_.WaitWithDeadline(&mu_, next)) {
    }
    if (shutting_down_) return;
  }
}

void Coordinator::Tick() {
  const absl::Time tick_start = absl::Now();
  absl::Cleanup time_tick = [this, tick_start] {
    if (metrics_.tick_seconds != nullptr)
      metrics_.tick_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - tick_start));
  };
  std::vector<WorkerRecord> lost = workers_.Expire();
  for (const WorkerRecord& w : lost) {
    spdlog::warn("worker {} ({} at {}) stopped heartbeating; removed from the pool", w.worker_id, w.host, w.address);
  }
  sessions_.Tick(lost);
  std::vector<std::thread> finished;
  absl::Cleanup join_finished = [&finished] {
    for (std::thread& t : finished) t.join();
  };
  MutexLock lock(&mu_);
  if (shutting_down_) return;
  for (auto& [id, job] : jobs_) {
    if (job->driver_done && job->driver.joinable()) finished.push_back(std::move(job->driver));
  }
  RetainLocked();
  ExpireAdoptionsLocked();
  for (const WorkerRecord& w : lost) {
    if (w.job_id.empty()) continue;
    auto it = jobs_.find(w.job_id);
    if (it == jobs_.end() || IsFinal(it->second->info.state())) continue;
    Job* job = it->second.get();
    if (job->adoption) {  // it may register again before the grace ends
      std::replace(job->adoption->worker_ids.begin(), job->adoption->worker_ids.end(), w.worker_id, std::string());
      continue;
    }
    const auto rank = std::find(job->worker_ids.begin(), job->worker_ids.end(), w.worker_id);
    if (rank == job->worker_ids.end()) continue;
    const std::string why = absl::StrCat(RankName(*job, static_cast<int>(rank - job->worker_ids.begin())),
                                         " stopped heartbeating (nothing heard for more than ",
                                         absl::FormatDuration(options_.heartbeat_timeout), ")");
    // An ELASTIC attempt drops the rank and goes on without it.
    if (job->attempt && job->driver.joinable() && !job->driver_done && job->attempt->WorkerLost(w.worker_id, why)) {
      continue;
    }
    StopLocked(job, FAILED, why, /*retryable=*/true);
  }
  AssignGangsLocked();
}

void Coordinator::AssignGangsLocked() {
  // The queue: jobs by sequence; a session behind the jobs submitted before
  // it arrived, before those submitted after.
  struct Entry {
    int64_t sequence;
    int64_t order;  // -1 for a job: it goes after the sessions that arrived before it
    Job* job;
    SessionWaiter* session;
    int num_workers() const {
      return job != nullptr ? std::max(job->info.spec().num_workers(), 1) : session->num_workers;
    }
  };
  std::vector<Entry> queue;
  for (auto& [id, job] : jobs_) {
    const bool waiting =
        (job->info.state() == PENDING && !job->stop) || (job->info.state() == RESTARTING && !job->driver.joinable());
    if (waiting) queue.push_back({job->sequence, std::numeric_limits<int64_t>::max(), job.get(), nullptr});
  }
  for (SessionWaiter* w : session_waiters_) {
    if (w->assigned.empty()) queue.push_back({w->before_sequence, w->order, nullptr, w});
  }
  if (queue.empty()) return;
  // A session that arrived when next_sequence_ was N waits behind job N-1
  // and before job N: (N, order) sorts before (N, max).
  std::sort(queue.begin(), queue.end(), [](const Entry& a, const Entry& b) {
    return std::make_pair(a.sequence, a.order) < std::make_pair(b.sequence, b.order);
  });
  std::vector<PendingJob> pending;
  for (const Entry& e : queue)
    pending.push_back({e.job != nullptr ? e.job->id : e.session->session_id, e.num_workers()});
  const std::vector<std::string> idle = workers_.Idle();
  const std::vector<GangAssignment> gangs = AssignGangs(pending, idle);
  size_t used = 0;
  for (size_t i = 0; i < gangs.size(); ++i) {
    const Entry& e = queue[i];
    if (e.job != nullptr) {
      StartJobLocked(e.job, gangs[i].worker_ids);
    } else if (absl::Status s = workers_.Assign(gangs[i].worker_ids, e.session->session_id); s.ok()) {
      e.session->assigned = gangs[i].worker_ids;
      changed_.SignalAll();
    } else {
      spdlog::warn("session {}: cannot assign its workers: {}", e.session->session_id, s.ToString());
    }
    used += gangs[i].worker_ids.size();
  }
  // Say why the head of the queue waits (a restarting job keeps saying why
  // it restarts).
  if (gangs.size() < queue.size() && queue[gangs.size()].job != nullptr &&
      queue[gangs.size()].job->info.state() == PENDING) {
    Job* head = queue[gangs.size()].job;
    const std::string reason =
        absl::StrCat("waiting for ", std::max(head->info.spec().num_workers(), 1), " idle workers (",
                     idle.size() - used, " idle of ", workers_.List().size(), " registered)");
    if (head->info.reason() != reason) {
      head->info.set_reason(reason);
      UpdateLocked(head);
    }
  }
}

absl::StatusOr<std::vector<std::string>> Coordinator::AcquireSessionWorkers(const std::string& session_id, int n,
                                                                            absl::Duration wait) {
  MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  SessionWaiter waiter;
  waiter.session_id = session_id;
  waiter.num_workers = std::max(n, 1);
  waiter.before_sequence = next_sequence_;
  waiter.order = next_waiter_++;
  session_waiters_.push_back(&waiter);
  // Served by this thread's passes (workers that are idle now, or become
  // idle at a heartbeat) and by the scheduler's.
  const absl::Time give_up = options_.clock->Now() + wait;
  while (waiter.assigned.empty() && !shutting_down_) {
    AssignGangsLocked();
    if (!waiter.assigned.empty()) break;
    const absl::Time now = options_.clock->Now();
    if (now >= give_up) break;
    options_.clock->WaitWithDeadline(&changed_, &mu_, std::min(give_up, now + absl::Milliseconds(50)));
  }
  session_waiters_.erase(std::find(session_waiters_.begin(), session_waiters_.end(), &waiter));
  if (!waiter.assigned.empty()) {
    if (!shutting_down_) return waiter.assigned;
    workers_.Release(waiter.assigned);
  }
  if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
  return absl::UnavailableError(absl::StrCat("no ", n, " idle worker(s) for a session within ",
                                             absl::ToDoubleSeconds(wait),
                                             " s (jobs submitted before it are served first); try again when a job "
                                             "has finished"));
}

void Coordinator::StartJobLocked(Job* job, const std::vector<std::string>& worker_ids) {
  if (absl::Status s = workers_.Assign(worker_ids, job->info.job_id()); !s.ok()) {
    spdlog::warn("job {}: cannot assign its gang: {}", job->info.job_id(), s.ToString());
    return;
  }
  AttemptPlan plan = PlanAttemptLocked(job, worker_ids);
  // A restart resumes from the job's own newest checkpoint.
  if (plan.restarts > 0) plan.restore_from = job->info.latest_checkpoint();
  SetStateLocked(job, STARTING, "");
  spdlog::info("job {}: starting on {} worker(s)", job->info.job_id(), worker_ids.size());
  job->attempt = std::make_shared<JobDriver>(std::move(plan), static_cast<JobDriverHost*>(this), options_.clock);
  job->driver = std::thread([this, job] { Drive(job); });
}

AttemptPlan Coordinator::PlanAttemptLocked(Job* job, const std::vector<std::string>& worker_ids) {
  job->worker_ids = worker_ids;
  job->stop = false;
  job->driver_done = false;
  job->info.clear_ranks();
  AttemptPlan plan;
  plan.job_id = job->info.job_id();
  plan.spec = job->info.spec();
  plan.restarts = job->info.restarts();
  plan.latest_checkpoint = job->info.latest_checkpoint();
  plan.watchdog = options_.watchdog;
  for (size_t r = 0; r < worker_ids.size(); ++r) {
    absl::StatusOr<WorkerRecord> w = workers_.Get(worker_ids[r]);
    RankInfo* rank = job->info.add_ranks();
    rank->set_rank(static_cast<int>(r));
    rank->set_worker_id(worker_ids[r]);
    if (w.ok()) {
      rank->set_host(w->host);
      rank->set_address(w->address);
      rank->set_device(w->device);
      plan.clients.push_back(client_factory_(*w));
      plan.workers.push_back(DescribeWorker(w->worker_id, w->host, w->address));
      plan.addresses.push_back(w->address);
    } else {
      plan.clients.push_back(nullptr);
      plan.workers.push_back(DescribeWorker(worker_ids[r], "", ""));
      plan.addresses.push_back("");
    }
    plan.worker_ids.push_back(worker_ids[r]);
  }
  return plan;
}

std::string Coordinator::RankName(const Job& job, int rank) const {
  if (rank < 0 || rank >= job.info.ranks_size()) return absl::StrCat("rank ", rank);
  const RankInfo& r = job.info.ranks(rank);
  return absl::StrCat("rank ", rank, " (", DescribeWorker(r.worker_id(), r.host(), r.address()), ")");
}

std::vector<JoiningWorker> Coordinator::AcquireWorkers(const std::string& job_id, int n, int unit,
                                                       const std::set<std::string>& exclude) {
  MutexLock lock(&mu_);
  Job* job = FindLocked(job_id);
  if (shutting_down_ || job == nullptr || job->stop || n <= 0) return {};
  // Older jobs waiting for a gang come first.
  for (const auto& [id, other] : jobs_) {
    const bool waiting = other->info.state() == PENDING || other->info.state() == RESTARTING;
    if (waiting && other->sequence < job->sequence) return {};
  }
  std::vector<std::string> idle = workers_.Idle();
  idle.erase(std::remove_if(idle.begin(), idle.end(), [&](const std::string& id) { return exclude.count(id) > 0; }),
             idle.end());
  n = std::min(n, static_cast<int>(idle.size()));
  n -= n % std::max(unit, 1);
  if (n <= 0) return {};
  idle.resize(static_cast<size_t>(n));
  if (absl::Status s = workers_.Assign(idle, job_id); !s.ok()) {
    spdlog::warn("job {}: cannot take idle workers: {}", job_id, s.ToString());
    return {};
  }
  std::vector<JoiningWorker> out;
  for (const std::string& id : idle) {
    absl::StatusOr<WorkerRecord> w = workers_.Get(id);
    job->worker_ids.push_back(id);
    if (!w.ok()) continue;
    out.push_back(
        {id, std::shared_ptr<WorkerClient>(client_factory_(*w)), DescribeWorker(id, w->host, w->address), w->address});
  }
  return out;
}

void Coordinator::CloseRendezvous(const std::string& scope, const std::string& reason) {
  store_.CloseScope(scope, reason);
}

void Coordinator::ReleaseWorkers(const std::string& job_id, const std::vector<std::string>& worker_ids) {
  MutexLock lock(&mu_);
  Job* job = FindLocked(job_id);
  if (job == nullptr) return;
  std::vector<std::string> gone;
  for (const std::string& id : worker_ids) {
    auto it = std::find(job->worker_ids.begin(), job->worker_ids.end(), id);
    if (it == job->worker_ids.end()) continue;
    job->worker_ids.erase(it);
    gone.push_back(id);
  }
  workers_.Release(gone);
}

void Coordinator::SetRanks(const std::string& job_id, const std::vector<std::string>& worker_ids,
                           const std::vector<std::string>& joining) {
  MutexLock lock(&mu_);
  Job* job = FindLocked(job_id);
  if (job == nullptr) return;
  std::vector<std::string> gone;
  for (const std::string& id : job->worker_ids) {
    const bool held = std::find(worker_ids.begin(), worker_ids.end(), id) != worker_ids.end() ||
                      std::find(joining.begin(), joining.end(), id) != joining.end();
    if (!held) gone.push_back(id);
  }
  workers_.Release(gone);
  job->worker_ids = worker_ids;
  job->worker_ids.insert(job->worker_ids.end(), joining.begin(), joining.end());
  job->info.clear_ranks();
  for (size_t r = 0; r < worker_ids.size(); ++r) {
    RankInfo* rank = job->info.add_ranks();
    rank->set_rank(static_cast<int>(r));
    rank->set_worker_id(worker_ids[r]);
    if (absl::StatusOr<WorkerRecord> w = workers_.Get(worker_ids[r]); w.ok()) {
      rank->set_host(w->host);
      rank->set_address(w->address);
      rank->set_device(w->device);
    }
  }
  job->info.set_regroups(job->info.regroups() + 1);
  UpdateLocked(job, /*durable=*/false);
}

absl::StatusOr<RegisterWorkerResponse> Coordinator::RegisterWorker(const RegisterWorkerRequest& request) {
  MutexLock lock(&mu_);
  // A rank of a job the previous coordinator drove keeps it (BUSY).
  const auto [adopting, rank] = AdoptionSlotLocked(request);
  TY_ASSIGN_OR_RETURN(std::string id, workers_.Register(request.host(), request.address(), request.device(),
                                                        request.pid(), request.held_job_id(), adopting != nullptr));
  spdlog::info("worker {} registered: host {}, {}, device {}{}", id, request.host(), request.address(),
               request.device().empty() ? "cpu" : request.device(),
               request.held_job_id().empty() ? "" : absl::StrCat(", holding job ", request.held_job_id()));
  RegisterWorkerResponse response;
  response.set_worker_id(id);
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  if (adopting != nullptr) {
    response.set_keep_held_job(true);
    AdoptRankLocked(adopting, rank, id);
  }
  changed_.SignalAll();
  return response;
}

absl::StatusOr<HeartbeatResponse> Coordinator::Heartbeat(const HeartbeatRequest& request) {
  HeartbeatResponse response;
  bool let_go = false;
  absl::Status s = workers_.Heartbeat(request.worker_id(), request.job_id(), &let_go);
  if (absl::IsNotFound(s)) {
    response.set_reregister(true);
    return response;
  }
  TY_RETURN_IF_ERROR(s);
  response.set_let_go(let_go);
  if (!request.job_id().empty()) {
    MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    // Rank 0's step inside a chunk: live progress for watchers.
    if (it != jobs_.end() && it->second->info.state() == RUNNING && !it->second->worker_ids.empty() &&
        it->second->worker_ids[0] == request.worker_id() && request.step() > it->second->info.step()) {
      it->second->info.set_step(request.step());
      it->second->version++;
      changed_.SignalAll();
    }
  }
  return response;
}

}  // namespace trainyard
