// Interactive sessions (JobService OpenSession/RunSession/CloseSession): an
// InteractiveModel on a checkpoint, held by a group of idle workers
// (data-parallel, meeting in the rendezvous store under the session's id)
// until its client closes it, it stays idle for longer than its timeout, or
// one of its workers is lost. Workers come from the same pool and the same
// queue as jobs' gangs (acquire_workers: the coordinator's scheduler, oldest
// first); a closed session's workers go back to the pool once each says it
// let go.
//
// Thread-safety: thread-safe.
#ifndef TRAINYARD_COORDINATOR_SESSION_MANAGER_H_
#define TRAINYARD_COORDINATOR_SESSION_MANAGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/store.h"
#include "common/background_threads.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/worker_client.h"
#include "coordinator/worker_registry.h"
#include "proto/job_service.pb.h"

namespace trainyard {

struct SessionManagerOptions {
  std::string output_root;  // sessions' output_dir must lie inside it
  Clock* clock = Clock::Real();
  WorkerRegistry* workers = nullptr;  // not owned
  WorkerClientFactory client_factory;
  InMemoryStore* store = nullptr;  // not owned: the rendezvous store
  // A job's newest checkpoint (OpenSession by job_id): kNotFound for an
  // unknown job, "" when it has none yet.
  std::function<absl::StatusOr<std::string>(const std::string& job_id)> job_checkpoint;
  // `n` workers for a session, now assigned to it in `workers`, waiting up
  // to `wait` in the scheduler's queue (behind older jobs): kUnavailable
  // saying why when none came in time.
  std::function<absl::StatusOr<std::vector<std::string>>(const std::string& session_id, int n, absl::Duration wait)>
      acquire_workers;
};

class SessionManager {
 public:
  explicit SessionManager(SessionManagerOptions options) : options_(std::move(options)) {}
  ~SessionManager();  // Shutdown()

  // Opens a session on a checkpoint (or a job's newest one) on num_workers
  // idle workers, waiting up to wait_seconds for them. kUnavailable when not
  // enough become idle in time or the manager is shut down;
  // kInvalidArgument naming the field for bad options; a worker's error
  // (naming the rank that caused it) if it cannot load the checkpoint (the
  // workers return to the pool).
  absl::StatusOr<OpenSessionResponse> Open(const OpenSessionRequest& request);
  // Runs the call on every worker of the session at once and returns rank
  // 0's answer. kNotFound for an unknown or closed session (saying why). An
  // error on every rank alike (bad examples) leaves the session open; ranks
  // that disagree (a worker failed) close it.
  absl::StatusOr<SessionResponse> Run(const SessionRequest& request);
  absl::Status Close(const std::string& session_id);

  // The scheduler's pass: closes sessions idle for longer than their
  // timeout and those holding a `lost` worker; joins finished closers.
  void Tick(const std::vector<WorkerRecord>& lost);
  // Closes every session and waits until each worker was told. Idempotent.
  void Shutdown();

  size_t open_sessions() const;
  // Closed sessions whose reason Run still names.
  size_t closed_sessions_remembered() const;
  static constexpr size_t kClosedKept = 1024;

 private:
  struct Session {
    std::string id;
    std::vector<std::string> worker_ids;  // in rank order
    std::vector<std::shared_ptr<WorkerClient>> clients;
    absl::Duration idle_timeout;
    absl::Time last_used;
    int in_flight = 0;  // calls running: never idle while one runs
  };
  // Ends a session (caller holds mu_): its workers are told to drop it (in
  // the background) and return to the pool once each says it holds nothing.
  // (By value: callers pass ids that live in the map entry it erases.)
  void CloseLocked(std::string session_id, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionManagerOptions options_;
  mutable Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // Recently closed sessions: id -> why (Run names it), at most kClosedKept.
  std::map<std::string, std::string> closed_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> closed_order_ ABSL_GUARDED_BY(mu_);  // oldest first
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  // Each close tells the session's workers on a thread of its own; joined
  // as they end (Tick) and by Shutdown.
  BackgroundThreads closers_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_SESSION_MANAGER_H_
