#include "worker/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace trainyard {

bool Membership::StillDriven() {
  if (worker_id_.empty()) return false;
  HeartbeatRequest beat;
  beat.set_worker_id(worker_id_);
  beat.set_job_id(options_.held_job ? options_.held_job() : std::string());
  beat.set_step(options_.step ? options_.step() : 0);
  beat.set_preemption_requested(true);
  absl::StatusOr<HeartbeatResponse> answer = link_->Heartbeat(beat);
  return answer.ok() && !answer->reregister();
}

absl::Duration Membership::Beat() {
  const std::string held = options_.held_job ? options_.held_job() : std::string();
  if (worker_id_.empty()) {
    RegisterWorkerRequest request;
    request.set_host(options_.host);
    request.set_address(options_.address);
    request.set_device(options_.device);
    request.set_pid(options_.pid);
    request.set_held_job_id(held);
    if (!held.empty()) {
      request.set_previous_worker_id(previous_worker_id_);
      request.set_held_attempt(options_.held_attempt ? options_.held_attempt() : 0);
    }
    absl::StatusOr<RegisterWorkerResponse> response = link_->Register(request);
    last_status_ = response.status();
    if (response.ok()) {
      last_contact_ = options_.clock->Now();
      worker_id_ = response->worker_id();
      const bool reregistered = !previous_worker_id_.empty();
      previous_worker_id_.clear();
      interval_ = absl::Milliseconds(std::max<int64_t>(response->heartbeat_interval_ms(), 50));
      spdlog::info("registered with the coordinator at {} as {} (serving on {})", options_.coordinator, worker_id_,
                   options_.address);
      if (!held.empty() && response->keep_held_job()) {
        spdlog::info("the coordinator adopts job {}: keeping it", held);
      } else if (!held.empty() && reregistered && options_.abort && held != orphaned_) {
        options_.abort(held, "the coordinator dropped this worker");
      }
    }
  } else {
    HeartbeatRequest request;
    request.set_worker_id(worker_id_);
    request.set_job_id(held);
    request.set_step(options_.step ? options_.step() : 0);
    absl::StatusOr<HeartbeatResponse> response = link_->Heartbeat(request);
    last_status_ = response.status();
    if (response.ok()) last_contact_ = options_.clock->Now();
    if (response.ok() && response->reregister()) {
      // The coordinator dropped this worker, or restarted: the registration
      // says which job this worker holds, and its answer whether it goes on.
      spdlog::warn("the coordinator does not know {}; registering again{}", worker_id_,
                   held.empty() ? "" : " with job " + held);
      previous_worker_id_ = worker_id_;
      worker_id_.clear();
      return absl::ZeroDuration();
    }
    if (response.ok() && response->let_go() && !held.empty() && held != let_go_ && options_.abort) {
      spdlog::warn("the coordinator no longer counts this worker among the ranks of job {}; letting go of it", held);
      options_.abort(held, "the coordinator no longer counts this worker among the job's ranks");
      let_go_ = held;
    }
  }
  // A coordinator gone for too long: no one will drive the held job again.
  if (!last_status_.ok() && !held.empty() && held != orphaned_ && options_.abort &&
      options_.clock->Now() - last_contact_ > options_.orphan_timeout) {
    spdlog::error("the coordinator at {} has been unreachable for more than {}; letting go of job {}",
                  options_.coordinator, absl::FormatDuration(options_.orphan_timeout), held);
    options_.abort(held, absl::StrCat("the coordinator was unreachable for more than ",
                                      absl::FormatDuration(options_.orphan_timeout)));
    orphaned_ = held;
  }
  if (!last_status_.ok() && options_.clock->Now() - last_warning_ > options_.warning_period) {
    spdlog::warn("coordinator {} unreachable: {}", options_.coordinator, last_status_.ToString());
    last_warning_ = options_.clock->Now();
  }
  if (!last_status_.ok() && !held.empty()) return std::min(interval_, options_.held_job_retry);
  return interval_;
}

}  // namespace trainyard
