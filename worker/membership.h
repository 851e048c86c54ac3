// A worker's membership of the coordinator's pool: it registers, then
// heartbeats with the job it holds and its step; when the coordinator
// answers that it no longer knows the worker (it was silent for too long,
// or the coordinator restarted), whatever job the worker held is over: the
// job is aborted and the worker registers again. The coordinator is reached
// through CoordinatorLink (gRPC in worker/server.cc; fakes in tests), so
// the protocol is free of gRPC and tested on its own.
//
// Thread-safety: one thread calls Beat; the link and hooks are called on it.
#ifndef TRAINYARD_WORKER_MEMBERSHIP_H_
#define TRAINYARD_WORKER_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/worker.pb.h"

namespace trainyard {

// CoordinatorService's membership calls, each bounded by a deadline of its
// own.
class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;
  virtual absl::StatusOr<RegisterWorkerResponse> Register(const RegisterWorkerRequest& request) = 0;
  virtual absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request) = 0;
};

struct MembershipOptions {
  std::string coordinator;  // HOST:PORT, for logs
  // What the registration says of this worker.
  std::string host;
  std::string address;  // where its WorkerService listens
  std::string device;
  int32_t pid = 0;
  // The job this worker holds ("" none) and its step, read at each beat.
  std::function<std::string()> held_job;
  std::function<int64_t()> step;
  // Aborts the held job `job` with `reason` (the coordinator forgot it).
  std::function<void(const std::string& job, const std::string& reason)> abort;
  // Between beats until the coordinator says otherwise.
  absl::Duration interval = absl::Seconds(1);
  // An unreachable coordinator is logged at most this often.
  absl::Duration warning_period = absl::Seconds(10);
  Clock* clock = Clock::Real();
};

class Membership {
 public:
  // `link` is not owned and outlives this.
  Membership(CoordinatorLink* link, MembershipOptions options) : link_(link), options_(std::move(options)) {}

  // One round: registers while the worker has no id, else heartbeats. A
  // heartbeat answered with `reregister` aborts the held job and forgets the
  // id, so the next round registers again at once. Returns how long to wait
  // before the next round (the coordinator's heartbeat interval, at least
  // 50 ms; 0 after a reregister).
  absl::Duration Beat();

  // The id the coordinator gave this worker; "" while unregistered.
  const std::string& worker_id() const { return worker_id_; }
  // The last round's outcome (an unreachable coordinator's error).
  const absl::Status& last_status() const { return last_status_; }

 private:
  CoordinatorLink* link_;
  const MembershipOptions options_;
  std::string worker_id_;
  absl::Duration interval_ = options_.interval;
  absl::Status last_status_;
  absl::Time last_warning_ = absl::InfinitePast();
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MEMBERSHIP_H_
