// WorkerCore's calls about a job's group rather than its work: the
// watchdog's Probe, LeaveGroup, and Adopt by a coordinator that restarted.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/reachability.h"
#include "worker/worker_core.h"
#include "worker/worker_core_job.h"

namespace trainyard {

absl::StatusOr<ProbeResponse> WorkerCore::Probe(const ProbeRequest& request) {
  if (!(request.connect_timeout_seconds() > 0 && request.connect_timeout_seconds() <= 60)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Probe: connect_timeout_seconds ", request.connect_timeout_seconds(), "; want (0, 60]"));
  }
  ProbeResponse response;
  const std::vector<std::string> peers(request.peers().begin(), request.peers().end());
  if (request.job_id().empty()) {  // reachability only (a worker cut off from a job, before it joins again)
    for (bool r : ReachableAddresses(peers, absl::Seconds(request.connect_timeout_seconds())))
      response.add_reachable(r);
    return response;
  }
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  response.set_step(step());
  {
    MutexLock lock(&job->group_mu);
    response.set_generation(job->group_generation);
    if (job->forming != nullptr) {
      // Forming its next group: blocked (on its peers) since it began.
      response.set_generation(job->forming->generation);
      response.set_collective_waiting(true);
      response.set_stalled_seconds(absl::ToDoubleSeconds(absl::Now() - job->forming->since));
    } else if (job->entering != nullptr || job->group != nullptr) {
      // Regrouping: the new group's progress (the old one is idle).
      Collective* in_use = job->entering != nullptr ? job->entering : job->group;
      if (job->entering != nullptr) response.set_generation(job->entering_generation);
      const CollectiveProgress p = in_use->Progress();
      response.set_collective_completed(p.completed);
      response.set_collective_waiting(p.waiting);
      response.set_stalled_seconds(absl::ToDoubleSeconds(p.stalled));
    }
  }
  for (bool r : ReachableAddresses(peers, absl::Seconds(request.connect_timeout_seconds()))) response.add_reachable(r);
  return response;
}

absl::StatusOr<LeaveGroupResponse> WorkerCore::LeaveGroup(const LeaveGroupRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  LeaveGroupResponse response;
  MutexLock lock(&job->group_mu);
  if (job->forming != nullptr && job->forming->generation == request.generation()) {
    spdlog::warn("job {}: aborting the forming of the group of generation {}: {}", job->id, request.generation(),
                 request.reason());
    MutexLock forming(&job->forming->mu);
    job->forming->aborted = request.reason().empty() ? "LeaveGroup" : request.reason();
    job->forming->changed.SignalAll();
    response.set_left(true);
    return response;
  }
  if (job->entering != nullptr && job->entering_generation == request.generation()) {
    spdlog::warn("job {}: aborting the collective of generation {} (regrouping): {}", job->id, request.generation(),
                 request.reason());
    job->entering->Abort(request.reason());
    response.set_left(true);
    return response;
  }
  if (job->group == nullptr || job->group_generation != request.generation()) return response;
  spdlog::warn("job {}: aborting the collective of generation {}: {}", job->id, request.generation(), request.reason());
  job->group->Abort(request.reason());
  response.set_left(true);
  return response;
}

absl::StatusOr<AdoptResponse> WorkerCore::Adopt(const AdoptRequest& request) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, Find(request.job_id()));
  if (request.attempt() != job->attempt) {
    return absl::FailedPreconditionError(
        absl::StrCat("Adopt: job ", job->id, " runs attempt ", job->attempt, " here, not ", request.attempt()));
  }
  MutexLock busy(&job->busy);  // the call the old coordinator started ends first
  // A preempted rank answers (its last chunk says so, or its next one
  // stops at once); an aborted one does not.
  if (job->stop && !job->preempt) {
    return absl::AbortedError(absl::StrCat("job ", job->id, " was aborted: ", job->stop_reason));
  }
  if (job->training == nullptr || job->training->trainer() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("Adopt: job ", job->id, " does not train"));
  }
  // An ELASTIC rank that left its failed group is adopted as such: the
  // coordinator regroups it.
  const bool left = job->collective == nullptr;
  if (!job->training->elastic()) TY_RETURN_IF_ERROR(CheckInGroup(*job));
  AdoptResponse response;
  response.set_rank(job->rank);
  response.set_world_size(job->world_size);
  response.set_generation(job->generation);
  response.set_step(job->training->step());
  response.set_left_group(left);
  if (job->last_chunk) {
    *response.mutable_last_chunk() = *job->last_chunk;
    response.set_last_chunk_first_step(job->last_chunk_first_step);
  }
  spdlog::info("job {}: adopted by a restarted coordinator at step {} (rank {} of {}{})", job->id, response.step(),
               job->rank, job->world_size, left ? ", out of its failed group" : "");
  return response;
}

}  // namespace trainyard
