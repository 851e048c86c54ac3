// WorkerCore's job, shared by the files that implement WorkerCore
// (worker_core.cc, worker_core_group.cc). Not part of its interface.
#ifndef TRAINYARD_WORKER_WORKER_CORE_JOB_H_
#define TRAINYARD_WORKER_WORKER_CORE_JOB_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "collective/collective.h"
#include "common/mutex.h"
#include "job/training_job.h"
#include "proto/job_service.pb.h"
#include "proto/worker.pb.h"
#include "worker/worker_core.h"

namespace trainyard {

struct WorkerCore::Formation {
  int generation = 0;
  absl::Time since;
  Mutex mu;
  CondVar changed;
  bool finished ABSL_GUARDED_BY(mu) = false;
  std::string aborted ABSL_GUARDED_BY(mu);  // the reason, once aborted
  absl::StatusOr<std::unique_ptr<Collective>> made ABSL_GUARDED_BY(mu);
};

struct WorkerCore::Job {
  std::string id;
  JobSpec spec;
  int rank = 0;
  int world_size = 1;
  std::atomic<bool> stop{false};     // the trainer's stop request (abort or preemption)
  std::atomic<bool> preempt{false};  // this worker was asked to stop: checkpoint first
  Mutex busy;                        // held while a call runs the job
  std::string stop_reason ABSL_GUARDED_BY(busy);
  int attempt = 0;
  int generation = 0;                      // ELASTIC: the group's (Regroup)
  std::unique_ptr<Collective> collective;  // changed under `busy` and `group_mu` (SwapCollective)
  // StartJob with `prepare`: the place the job was built for (until it
  // joins its group), and whether it waits for the StartJob with `join`
  // (under WorkerCore::mu_).
  std::unique_ptr<Collective> unconnected;
  bool prepared = false;
  std::unique_ptr<TrainingJob> training;  // declared after the collectives it uses
  // For the calls that do not take `busy` (Probe, LeaveGroup, AbortJob):
  // the collective in use and its generation.
  Mutex group_mu;
  Collective* group ABSL_GUARDED_BY(group_mu) = nullptr;
  int group_generation ABSL_GUARDED_BY(group_mu) = 0;
  // The group being formed, if any (FormGroup).
  std::shared_ptr<Formation> forming ABSL_GUARDED_BY(group_mu);
  // The group a Regroup formed, while the ranks agree and move state on it
  // before it replaces `group` (owned by that call), and its generation.
  Collective* entering ABSL_GUARDED_BY(group_mu) = nullptr;
  int entering_generation ABSL_GUARDED_BY(group_mu) = 0;
  // The last RunSteps answered (Adopt), and its first step.
  // A Regroup failed once it could have begun moving another rank's state
  // into this one (TrainingJob::StatePartlyReceived): this rank's state may
  // be partly overwritten, and it takes part in no other regroup (the
  // attempt restarts).
  bool state_unsure ABSL_GUARDED_BY(busy) = false;
  std::optional<RunStepsResponse> last_chunk ABSL_GUARDED_BY(busy);
  int64_t last_chunk_first_step ABSL_GUARDED_BY(busy) = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_WORKER_CORE_JOB_H_
