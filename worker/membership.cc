#include "worker/membership.h"

#include <algorithm>

#include "spdlog/spdlog.h"

namespace trainyard {

absl::Duration Membership::Beat() {
  const std::string held = options_.held_job ? options_.held_job() : std::string();
  if (worker_id_.empty()) {
    RegisterWorkerRequest request;
    request.set_host(options_.host);
    request.set_address(options_.address);
    request.set_device(options_.device);
    request.set_pid(options_.pid);
    request.set_held_job_id(held);
    absl::StatusOr<RegisterWorkerResponse> response = link_->Register(request);
    last_status_ = response.status();
    if (response.ok()) {
      worker_id_ = response->worker_id();
      interval_ = absl::Milliseconds(std::max<int64_t>(response->heartbeat_interval_ms(), 50));
      spdlog::info("registered with the coordinator at {} as {} (serving on {})", options_.coordinator, worker_id_,
                   options_.address);
    }
  } else {
    HeartbeatRequest request;
    request.set_worker_id(worker_id_);
    request.set_job_id(held);
    request.set_step(options_.step ? options_.step() : 0);
    absl::StatusOr<HeartbeatResponse> response = link_->Heartbeat(request);
    last_status_ = response.status();
    if (response.ok() && response->reregister()) {
      // The coordinator dropped this worker: whatever job it held is over.
      spdlog::warn("the coordinator does not know {}; registering again", worker_id_);
      if (!held.empty() && options_.abort) options_.abort(held, "the coordinator dropped this worker");
      worker_id_.clear();
      return absl::ZeroDuration();
    }
  }
  if (!last_status_.ok() && options_.clock->Now() - last_warning_ > options_.warning_period) {
    spdlog::warn("coordinator {} unreachable: {}", options_.coordinator, last_status_.ToString());
    last_warning_ = options_.clock->Now();
  }
  return interval_;
}

}  // namespace trainyard
