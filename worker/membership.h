// A worker's membership of the coordinator's pool: it registers, then
// heartbeats with the job it holds and its step. When the coordinator
// answers that it no longer knows the worker (it was silent for too long,
// or the coordinator restarted), the worker registers again saying which
// job (and attempt) it holds and the id it had: a coordinator that
// restarted adopts the job (keep_held_job), else the job is aborted. A
// heartbeat answered `let_go` (the worker holds a job that is no longer its
// own, the coordinator's AbortJob having been lost) aborts it too, and so
// does a coordinator unreachable for longer than `orphan_timeout`. The coordinator is reached
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
  std::function<int()> held_attempt;
  // Aborts the held job `job` with `reason` (the coordinator forgot it).
  std::function<void(const std::string& job, const std::string& reason)> abort;
  // How long a held job outlives an unreachable coordinator (the time a
  // restarted coordinator has to come back and adopt it).
  absl::Duration orphan_timeout = absl::Minutes(5);
  // Between beats until the coordinator says otherwise.
  absl::Duration interval = absl::Seconds(1);
  // Between beats (at most `interval`) while the coordinator is unreachable
  // and this worker holds a job: a restarted coordinator adopts a running
  // job once every rank's worker has registered again.
  absl::Duration held_job_retry = absl::Milliseconds(200);
  // An unreachable coordinator is logged at most this often.
  absl::Duration warning_period = absl::Seconds(10);
  Clock* clock = Clock::Real();
};

class Membership {
 public:
  // `link` is not owned and outlives this.
  Membership(CoordinatorLink* link, MembershipOptions options)
      : link_(link), options_(std::move(options)), last_contact_(options_.clock->Now()) {}

  // One round: registers while the worker has no id, else heartbeats. A
  // heartbeat answered with `reregister` forgets the id, so the next round
  // registers again at once, with the held job; the held job is aborted
  // unless the registration's answer keeps it. Returns how long to wait
  // before the next round (the coordinator's heartbeat interval, at least
  // 50 ms; 0 after a reregister; held_job_retry while the coordinator is
  // unreachable and a job is held).
  absl::Duration Beat();

  // While the worker hands its held job back (it is stopping): one
  // heartbeat that says a preemption was asked, on the caller's thread in
  // place of Beat. True when a coordinator still knows this worker and so
  // drives its job (it answered, without `reregister`); false unregistered,
  // unanswered or forgotten: nothing will tear the job down.
  bool StillDriven();

  // The id the coordinator gave this worker; "" while unregistered.
  const std::string& worker_id() const { return worker_id_; }
  // The last round's outcome (an unreachable coordinator's error).
  const absl::Status& last_status() const { return last_status_; }

 private:
  CoordinatorLink* link_;
  const MembershipOptions options_;
  std::string worker_id_;
  std::string previous_worker_id_;  // before a reregister
  absl::Time last_contact_;         // the last answer from the coordinator
  std::string orphaned_;            // the job aborted for an unreachable coordinator
  std::string let_go_;              // the job aborted on the coordinator's `let_go`
  absl::Duration interval_ = options_.interval;
  absl::Status last_status_;
  absl::Time last_warning_ = absl::InfinitePast();
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_MEMBERSHIP_H_
