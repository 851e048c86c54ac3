// The coordinator's view of its workers: who registered, where they listen,
// whether they are idle, and when each was last heard from. Time comes from
// an injected Clock, so heartbeat expiry is tested without sleeping.
//
// Worker life cycle:
//   IDLE --Assign--> BUSY --Release--> DRAINING --heartbeat without a job--> IDLE
//   any --no heartbeat for `heartbeat_timeout`--> removed (returned by Expire)
// DRAINING exists because a worker tears a job down asynchronously: it is
// not handed a new job until it says it has none.
//
// Thread-safety: thread-safe.
#ifndef TRAINYARD_COORDINATOR_WORKER_REGISTRY_H_
#define TRAINYARD_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace trainyard {

struct WorkerRecord {
  enum class State { kIdle, kBusy, kDraining };
  std::string worker_id;
  std::string host;
  std::string address;
  std::string device;
  int32_t pid = 0;
  State state = State::kIdle;
  std::string job_id;  // BUSY/DRAINING: the job
  absl::Time last_heartbeat;
  int64_t sequence = 0;  // registration order
};

// "worker <id> on host <host>, <address>": how messages name a worker (a
// job's rank is "rank R (" this ")").
std::string DescribeWorker(const std::string& worker_id, const std::string& host, const std::string& address);

const char* WorkerStateName(WorkerRecord::State state);

class WorkerRegistry {
 public:
  // `instance` (e.g. a random token per coordinator process) is part of
  // every worker id, so that a worker registered with a previous
  // coordinator is never mistaken for one registered with this one.
  WorkerRegistry(Clock* clock, absl::Duration heartbeat_timeout, std::string instance = "")
      : clock_(clock), heartbeat_timeout_(heartbeat_timeout), instance_(std::move(instance)) {}

  // A new id for every registration (a restarted worker is a new worker):
  // "w<n>-<host>", with ".<instance>" appended when there is one.
  // A worker that still holds a job (`held_job_id`) starts DRAINING, or
  // BUSY with it when the job goes on there (`keep_job`: a job adopted
  // after a coordinator restart). kInvalidArgument naming the field for an
  // empty address.
  absl::StatusOr<std::string> Register(const std::string& host, const std::string& address, const std::string& device,
                                       int32_t pid, const std::string& held_job_id = "", bool keep_job = false);
  // kNotFound for an unknown (or expired) worker: it must register again.
  // `job_id` is the job the worker holds ("" = none); an idle worker that
  // reports one is DRAINING until it reports none. *let_go (optional): the
  // worker holds a job that is not its assignment (it is DRAINING, or BUSY
  // with another), which it should abort.
  absl::Status Heartbeat(const std::string& worker_id, const std::string& job_id, bool* let_go = nullptr);

  // Idle workers in registration order.
  std::vector<std::string> Idle() const;
  // kFailedPrecondition if a worker is not idle.
  absl::Status Assign(const std::vector<std::string>& worker_ids, const std::string& job_id);
  // The job is over for these workers; unknown ids are ignored.
  void Release(const std::vector<std::string>& worker_ids);

  // Removes and returns the workers not heard from for longer than the
  // heartbeat timeout.
  std::vector<WorkerRecord> Expire();

  absl::StatusOr<WorkerRecord> Get(const std::string& worker_id) const;
  std::vector<WorkerRecord> List() const;
  absl::Duration heartbeat_timeout() const { return heartbeat_timeout_; }

 private:
  Clock* clock_;
  const absl::Duration heartbeat_timeout_;
  const std::string instance_;
  mutable Mutex mu_;
  std::map<std::string, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_WORKER_REGISTRY_H_
