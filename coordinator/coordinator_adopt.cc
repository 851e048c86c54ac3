// The Coordinator's adoption of running jobs after a restart: the workers
// of a training job that was RUNNING keep it through the outage (their
// --orphan-timeout); when the coordinator comes back with the same state
// directory, each registers again saying which job, attempt and previous
// worker id it holds. Once every rank of the attempt is back, a driver
// takes the attempt over where the ranks are (JobDriver::AdoptRanks): no
// restart, no step lost. A rank that does not come back within
// adopt_grace makes the job restart from its newest checkpoint, as before;
// an ELASTIC job instead goes on with the ranks that came back (whole
// shard groups, min_workers or more), which regroup.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/attempt_policy.h"
#include "coordinator/coordinator.h"
#include "coordinator/fan_out.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec.h"

namespace trainyard {

bool Coordinator::AwaitAdoptionLocked(Job* job) {
  const JobInfo& info = job->info;
  if (options_.adopt_grace <= absl::ZeroDuration() || info.state() != RUNNING || !IsTrainingKind(info.spec().kind()) ||
      info.ranks_size() == 0) {
    return false;
  }
  for (const RankInfo& r : info.ranks()) {
    if (r.worker_id().empty()) return false;
  }
  Job::Adoption adoption;
  adoption.deadline = options_.clock->Now() + options_.adopt_grace;
  adoption.survivors_deadline = options_.clock->Now() + std::min(options_.heartbeat_timeout, options_.adopt_grace);
  adoption.down_since = absl::FromUnixMillis(info.update_time_unix_ms());
  adoption.worker_ids.assign(static_cast<size_t>(info.ranks_size()), "");
  job->adoption = std::move(adoption);
  job->info.set_reason(absl::StrCat("the coordinator restarted; waiting up to ",
                                    absl::FormatDuration(options_.adopt_grace), " for the ", info.ranks_size(),
                                    " rank(s) of attempt ", info.restarts(), " to come back"));
  spdlog::info("job {}: {}", job->id, job->info.reason());
  return true;
}

std::pair<Coordinator::Job*, int> Coordinator::AdoptionSlotLocked(const RegisterWorkerRequest& request) {
  if (request.held_job_id().empty() || request.previous_worker_id().empty()) return {nullptr, -1};
  Job* job = FindLocked(request.held_job_id());
  if (job == nullptr || !job->adoption || job->stop || request.held_attempt() != job->info.restarts()) {
    return {nullptr, -1};
  }
  for (int r = 0; r < job->info.ranks_size(); ++r) {
    if (job->info.ranks(r).worker_id() == request.previous_worker_id() &&
        job->adoption->worker_ids[static_cast<size_t>(r)].empty()) {
      return {job, r};
    }
  }
  return {nullptr, -1};
}

void Coordinator::AdoptRankLocked(Job* job, int rank, const std::string& worker_id) {
  job->adoption->worker_ids[static_cast<size_t>(rank)] = worker_id;
  // The record names the rank's new id at once (a coordinator that
  // restarts again matches the id the worker has now).
  RankInfo* info = job->info.mutable_ranks(rank);
  info->set_worker_id(worker_id);
  if (absl::StatusOr<WorkerRecord> w = workers_.Get(worker_id); w.ok()) {
    info->set_host(w->host);
    info->set_address(w->address);
  }
  const std::vector<std::string> ids = job->adoption->worker_ids;
  const auto back = std::count_if(ids.begin(), ids.end(), [](const std::string& id) { return !id.empty(); });
  spdlog::info("job {}: rank {} is back ({} of {})", job->id, rank, back, ids.size());
  if (back < static_cast<int64_t>(ids.size())) {
    UpdateLocked(job, /*durable=*/false);
    return;
  }
  job->info.set_reason(absl::StrCat("adopting its ", ids.size(), " rank(s) after a coordinator restart"));
  StartAdoptionLocked(job, ids, nullptr);
}

void Coordinator::StartAdoptionLocked(Job* job, const std::vector<std::string>& ids,
                                      const std::function<void(AttemptPlan*)>& edit) {
  const absl::Time now = options_.clock->Now();
  const double outage = absl::ToDoubleSeconds(now - std::min(job->adoption->down_since, now));
  job->adoption.reset();
  AttemptPlan plan = PlanAttemptLocked(job, ids);
  plan.adopt = true;
  plan.recorded_step = job->info.metrics_step();
  plan.adoption_seconds = outage;
  if (edit) edit(&plan);
  UpdateLocked(job);
  job->attempt = std::make_shared<JobDriver>(std::move(plan), static_cast<JobDriverHost*>(this), options_.clock);
  job->driver = std::thread([this, job] { Drive(job); });
}

bool Coordinator::AdoptSurvivorsLocked(Job* job, const std::string& lost) {
  const JobSpec& spec = job->info.spec();
  if (!IsElasticTraining(spec)) return false;
  const std::vector<std::string> ids = job->adoption->worker_ids;
  const int world = static_cast<int>(ids.size());
  const int unit = ShardGroupSize(spec, spec.num_workers());
  if (world % unit != 0) return false;
  // Whole shard groups only (replicated: every rank back).
  std::vector<int> places;
  std::vector<std::string> kept, dropped;
  for (int g = 0; g < world; g += unit) {
    const bool whole =
        std::all_of(ids.begin() + g, ids.begin() + g + unit, [](const std::string& id) { return !id.empty(); });
    for (int r = g; r < g + unit; ++r) {
      if (whole) places.push_back(r);
      if (!ids[r].empty()) (whole ? kept : dropped).push_back(ids[r]);
    }
  }
  if (kept.empty() || static_cast<int>(kept.size()) < std::max(spec.fault_tolerance().min_workers(), 1)) return false;
  if (!dropped.empty()) LetGoOfAdoptionLocked(job->id, dropped);
  job->info.set_reason(
      absl::StrCat("adopting ", kept.size(), " of its ", world, " rank(s) after a coordinator restart; ", lost));
  spdlog::warn("job {}: {}", job->id, job->info.reason());
  StartAdoptionLocked(job, kept, [&](AttemptPlan* plan) {
    plan->adopt_places = places;
    plan->adopt_world = world;
    plan->adopt_lost = lost;
  });
  return true;
}

void Coordinator::ExpireAdoptionsLocked() {
  const absl::Time now = options_.clock->Now();
  for (auto& [id, job] : jobs_) {
    if (!job->adoption) continue;
    // ELASTIC: the ranks back go on after the heartbeat timeout.
    const bool expired = now >= job->adoption->deadline;
    if (!expired && !(IsElasticTraining(job->info.spec()) && now >= job->adoption->survivors_deadline)) continue;
    const std::vector<std::string>& ids = job->adoption->worker_ids;
    std::vector<int> missing;
    for (size_t r = 0; r < ids.size(); ++r) {
      if (ids[r].empty()) missing.push_back(static_cast<int>(r));
    }
    const absl::Duration waited =
        expired ? options_.adopt_grace : std::min(options_.heartbeat_timeout, options_.adopt_grace);
    const std::string why = absl::StrCat("the coordinator restarted while the job was RUNNING and ", missing.size(),
                                         " of its ", ids.size(), " rank(s) did not come back within ",
                                         absl::FormatDuration(waited), " (", RankName(*job, missing.front()), ")");
    if (AdoptSurvivorsLocked(job.get(), why)) continue;
    if (!expired) continue;  // fewer than min_workers back: wait for the rest
    EndAdoptionLocked(job.get());
    // max_restarts is normalised: set, default 3.
    const NextAttempt next =
        AfterRetryableEnd(why, job->info.restarts(), job->info.spec().max_restarts(), job->info.latest_checkpoint());
    job->info.set_restarts(next.restarts);
    job->info.clear_ranks();
    spdlog::warn("job {}: {} {}", job->id, JobState_Name(next.state), next.reason);
    SetStateLocked(job.get(), next.state, next.reason);
  }
}

void Coordinator::EndAdoptionLocked(Job* job) {
  std::vector<std::string> back;
  for (const std::string& id : job->adoption->worker_ids) {
    if (!id.empty()) back.push_back(id);
  }
  job->adoption.reset();
  LetGoOfAdoptionLocked(job->id, back);
}

void Coordinator::LetGoOfAdoptionLocked(const std::string& job_id, const std::vector<std::string>& worker_ids) {
  std::vector<std::shared_ptr<WorkerClient>> clients;
  for (const std::string& id : worker_ids) {
    if (absl::StatusOr<WorkerRecord> w = workers_.Get(id); w.ok()) clients.emplace_back(client_factory_(*w));
  }
  // In the background: the workers report at their heartbeats when they
  // let go (DRAINING until then).
  farewells_.Start([clients, job_id] {
    AbortJobRequest abort;
    abort.set_job_id(job_id);
    abort.set_reason("the restarted coordinator did not adopt the job");
    for (const absl::Status& told : AbortOnEveryWorker(clients, abort)) {
      if (!told.ok()) spdlog::warn("job {}: a worker did not confirm it let go: {}", job_id, told.ToString());
    }
  });
  workers_.Release(worker_ids);
}

}  // namespace trainyard
