// The coordinator: accepts jobs (JobService), keeps the worker pool
// (registration, heartbeats), hands out the rendezvous store, and drives
// every running job's gang of workers.
//
// One scheduler thread (Tick every `tick`): expires workers that stopped
// heartbeating (failing their jobs), then starts the oldest pending jobs on
// idle gangs (scheduler.h). Each started job gets a driver thread:
//
//   STARTING: StartJob on every rank (they build the model and data and join
//             the collective through the rendezvous store)
//   RUNNING:  RunSteps(first_step, n) on every rank, n up to the next
//             summary/eval/checkpoint boundary; Evaluate at eval periods;
//             the job's actions (early stopping, NaN) on rank 0's metrics
//   then SUCCEEDED, or FAILED / CANCELLED with a reason.
//
// A rank that reports a preemption (its worker got SIGTERM; every rank
// stopped after the same step and rank 0 wrote an emergency checkpoint)
// makes the job PREEMPTED; a lost worker or a broken collective fails the
// attempt. Either way, while `max_restarts` allows, the job goes to
// RESTARTING and is scheduled again (before younger jobs) on any idle
// gang, resuming from its newest checkpoint.
//
// A rank whose call fails, or whose worker stops heartbeating, ends the
// attempt (fault_tolerance ELASTIC training instead drops the rank and goes
// on with the others, job_driver.h): calls still in flight to the other
// ranks are cancelled, every rank is told to abort, and the gang goes back
// to the pool once each worker reports it has let go of the job; whether
// another attempt follows is attempt_policy.h's rule. Every state change is written to the job store
// (SQLite) before it is visible; a coordinator that restarts reloads every
// job: PENDING and RESTARTING jobs stay queued, jobs that were STARTING or
// RUNNING restart from their newest checkpoint (if restarts are left).
//
// Thread-safety: thread-safe.
#ifndef TRAINYARD_COORDINATOR_COORDINATOR_H_
#define TRAINYARD_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/store.h"
#include "common/background_threads.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "coordinator/job_driver.h"
#include "coordinator/job_store.h"
#include "coordinator/session_manager.h"
#include "coordinator/worker_client.h"
#include "coordinator/worker_registry.h"
#include "proto/job_service.pb.h"
#include "proto/worker.pb.h"

namespace trainyard {

struct CoordinatorOptions {
  std::string state_dir;    // holds jobs.db
  std::string output_root;  // absolute; jobs' output_dir must lie inside it
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // Training attempts' watchdog (coordinator/watchdog.h): a rank that
  // stopped, or a link cut between ranks, found in seconds.
  WatchdogOptions watchdog;
  absl::Duration tick = absl::Milliseconds(100);
  // A coordinator that restarts with the same state directory waits this
  // long for the ranks of each training job that was RUNNING to register
  // again holding it (their workers keep it through the outage) and
  // adopts them: the job goes on from where they are, with no restart.
  // Past it (a rank did not come back), the job restarts from its newest
  // checkpoint. 0: always restart. An ELASTIC job waits at most
  // heartbeat_timeout for its missing ranks (a worker silent that long is
  // lost by that rule anyway) once whole shard groups of min_workers or
  // more are back: they go on and regroup, and a missing rank that comes
  // back later joins as any idle worker does.
  absl::Duration adopt_grace = absl::Seconds(30);
  Clock* clock = Clock::Real();
  // Part of every worker id (see WorkerRegistry); nullopt: random per
  // process.
  std::optional<std::string> instance_id;
  // Retention of finished jobs' records, in memory and in jobs.db: a
  // finished job is deleted once `keep_finished_jobs` jobs have finished
  // after it, or `keep_finished_for` after it finished. 0 (either): no limit
  // of that kind. Running and queued jobs are always kept.
  int64_t keep_finished_jobs = 10000;
  absl::Duration keep_finished_for = absl::ZeroDuration();
  // Where the coordinator's metrics go (not owned; outlives it); nullptr:
  // none. jobs and workers by state, sessions, submissions, restarts,
  // finished jobs by state, scheduler tick time and scheduling delay.
  MetricsRegistry* metrics = nullptr;
};

bool IsFinal(JobState state);

class Coordinator : private JobDriverHost {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options,
                                                             WorkerClientFactory client_factory);
  ~Coordinator();  // Shutdown()

  // Starts the scheduler thread.
  void Start();
  // Stops scheduling, cancels running jobs' calls, aborts their workers
  // (best effort), joins every thread. Jobs that were running stay RUNNING
  // in the store; the next coordinator restarts them from their newest
  // checkpoint while restarts are left (Load). Idempotent. (A coordinator
  // that dies instead leaves the workers holding their jobs: the next one
  // adopts them, see adopt_grace.)
  void Shutdown();

  // One scheduling pass (what the scheduler thread does every tick).
  void Tick();

  // ---- JobService ----
  // kInvalidArgument listing every problem of the spec.
  absl::StatusOr<SubmitJobResponse> SubmitJob(const SubmitJobRequest& request);
  absl::StatusOr<JobInfo> GetJob(const std::string& job_id);
  // A page of jobs, newest first. kInvalidArgument for a page_size out of
  // range or a page_token that no ListJobs returned.
  absl::StatusOr<ListJobsResponse> ListJobs(const ListJobsRequest& request);
  // kFailedPrecondition if the job already ended.
  absl::StatusOr<JobInfo> CancelJob(const std::string& job_id, const std::string& reason);
  // A checkpoint of a RUNNING training job at its next boundary between
  // chunks (JobDriver::CheckpointNow); kFailedPrecondition in any other
  // state, kInvalidArgument for a timeout out of 1..86400 s.
  absl::StatusOr<CheckpointJobResponse> CheckpointJob(const CheckpointJobRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the job changes after `*version` (0 = return at once) or
  // `timeout` passes; returns the job and sets `*version`.
  absl::StatusOr<JobInfo> WaitForChange(const std::string& job_id, int64_t* version, absl::Duration timeout);

  // ---- Interactive sessions ----
  // Opens a session on a checkpoint (or a job's newest one) on
  // num_workers idle workers (a data-parallel group), which hold it until
  // CloseSession or until no call came for idle_timeout_seconds.
  // kUnavailable when not enough workers become idle in time;
  // kInvalidArgument naming the field for bad options; a worker's error if
  // it cannot load the checkpoint (the workers return to the pool).
  absl::StatusOr<OpenSessionResponse> OpenSession(const OpenSessionRequest& request);
  // Runs the call on every worker of the session at once and returns rank
  // 0's answer. kNotFound for an unknown or closed session (naming why: idle
  // timeout, lost worker). An error on every rank (bad examples) leaves the
  // session open; ranks that disagree (a worker failed) close it.
  absl::StatusOr<SessionResponse> RunSession(const SessionRequest& request);
  absl::Status CloseSession(const std::string& session_id);

  // ---- CoordinatorService ----
  absl::StatusOr<RegisterWorkerResponse> RegisterWorker(const RegisterWorkerRequest& request);
  absl::StatusOr<HeartbeatResponse> Heartbeat(const HeartbeatRequest& request);
  Store* store() { return &store_; }

  WorkerRegistry* workers() { return &workers_; }

 private:
  struct Job {
    std::string id;  // never changes (readable without the lock)
    JobInfo info;
    int64_t sequence = 0;
    int64_t version = 1;
    bool stop = false;  // cancel or failure requested (its attempt winds down)
    std::vector<std::string> worker_ids;
    std::shared_ptr<JobDriver> attempt;  // the current or last attempt
    std::thread driver;                  // runs `attempt`
    bool driver_done = false;            // the driver returned; Tick joins it
    absl::Time queued_since;             // entered PENDING or RESTARTING (scheduling delay)
    // A RUNNING training job the previous coordinator drove, waiting for
    // its ranks' workers to register again (adopt_grace).
    struct Adoption {
      absl::Time deadline;
      absl::Time survivors_deadline;        // ELASTIC: from here the ranks back go on
      absl::Time down_since;                // the record's last update before the outage
      std::vector<std::string> worker_ids;  // by rank; "" until it registered
    };
    std::optional<Adoption> adoption;
  };

  Coordinator(CoordinatorOptions options, WorkerClientFactory factory, std::unique_ptr<JobStore> db);
  void DefineMetrics();
  // A job's newest checkpoint, for sessions opened by job id.
  absl::StatusOr<std::string> JobCheckpoint(const std::string& job_id);
  // A session's workers (SessionManagerOptions::acquire_workers): the
  // session waits in the same queue as jobs, behind every job submitted
  // before it, for up to `wait`. kUnavailable when none came in time or
  // the coordinator is shutting down.
  absl::StatusOr<std::vector<std::string>> AcquireSessionWorkers(const std::string& session_id, int n,
                                                                 absl::Duration wait) ABSL_LOCKS_EXCLUDED(mu_);
  // Hands idle workers to the queue's head, oldest first (scheduler.h): jobs
  // waiting for a gang (PENDING, or RESTARTING between attempts) and
  // sessions waiting for workers, in the order they arrived.
  void AssignGangsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Load() ABSL_LOCKS_EXCLUDED(mu_);
  void SchedulerLoop();
  void StartJobLocked(Job* job, const std::vector<std::string>& worker_ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An attempt of the job on these workers (rank order); the job's ranks
  // and worker_ids set to them.
  AttemptPlan PlanAttemptLocked(Job* job, const std::vector<std::string>& worker_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ---- Adoption after a restart (coordinator_adopt.cc) ----
  // Load: a RUNNING training job waits for its ranks (true), unless
  // adoption is off or its record names no ranks.
  bool AwaitAdoptionLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job and rank a registering worker holds, when it is a rank of a
  // job waiting for adoption (same attempt, the id the record names);
  // else {nullptr, -1}.
  std::pair<Job*, int> AdoptionSlotLocked(const RegisterWorkerRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker `worker_id` is the job's rank; once every rank is back, the
  // attempt is adopted (a driver with AttemptPlan::adopt).
  void AdoptRankLocked(Job* job, int rank, const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick: jobs whose ranks did not all come back in time restart; an
  // ELASTIC one goes on with the whole shard groups that came back, when
  // they are min_workers or more (AdoptSurvivorsLocked).
  void ExpireAdoptionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AdoptSurvivorsLocked(Job* job, const std::string& lost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A driver takes the attempt over on `ids` (AttemptPlan::adopt); `edit`
  // completes its plan.
  void StartAdoptionLocked(Job* job, const std::vector<std::string>& ids, const std::function<void(AttemptPlan*)>& edit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job is no longer waiting: the workers that came back let go of it.
  void EndAdoptionLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells `worker_ids`, back holding the job, to let go of it (in the
  // background) and returns them to the pool.
  void LetGoOfAdoptionLocked(const std::string& job_id, const std::vector<std::string>& worker_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job of that id; nullptr if there is none (or no longer: retention).
  Job* FindLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The driver thread of an attempt: runs it, then returns the gang to the
  // pool.
  void Drive(Job* job);
  // JobDriverHost.
  void RecordProgress(const std::string& job_id, const std::function<void(JobInfo*)>& edit) override;
  Goodput GoodputNow(const std::string& job_id) override;
  void ChangeState(const std::string& job_id, JobState state, const std::string& reason,
                   const std::function<void(JobInfo*)>& edit) override;
  std::vector<JoiningWorker> AcquireWorkers(const std::string& job_id, int n, int unit,
                                            const std::set<std::string>& exclude) override;
  void SetRanks(const std::string& job_id, const std::vector<std::string>& worker_ids,
                const std::vector<std::string>& joining) override;
  void ReleaseWorkers(const std::string& job_id, const std::vector<std::string>& worker_ids) override;
  void CloseRendezvous(const std::string& scope, const std::string& reason) override;
  // Records a change (caller holds mu_): bumps the version, wakes watchers,
  // and persists: at once when `durable` (state changes), else soon, by the
  // persister thread (progress: steps and metrics, so that a chunk boundary
  // never waits for an fsync).
  void UpdateLocked(Job* job, bool durable = true) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersisterLoop();
  // The job's record as clients see it: goodput's wall time, rest and
  // ratio filled in as of now.
  JobInfo ViewLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStateLocked(Job* job, JobState state, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes the finished jobs past the retention policy (caller holds mu_);
  // their records leave jobs.db on the persister's next pass. A job whose
  // driver has not been joined yet is kept until it has.
  void RetainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kNotFound for a job id this coordinator does not know (saying how long
  // finished jobs are kept, when that is limited).
  absl::Status UnknownJob(const std::string& job_id) const;
  // Requests the job's attempt to stop in `state` (a cancel; a lost
  // worker, `retryable`: restarted if restarts are left).
  void StopLocked(Job* job, JobState state, const std::string& reason, bool retryable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string RankName(const Job& job, int rank) const;

  CoordinatorOptions options_;
  WorkerClientFactory client_factory_;
  std::unique_ptr<JobStore> db_;
  WorkerRegistry workers_;
  InMemoryStore store_;

  // The job table. A Job's fields are read and written under mu_ too,
  // except `id` (immutable) and `attempt` and `driver`, which only the
  // scheduler and Shutdown touch, also under mu_.
  Mutex mu_;
  CondVar changed_;  // a job changed, or shutting down
  std::map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Job*> by_sequence_ ABSL_GUARDED_BY(mu_);  // jobs_ by sequence
  // Finished jobs by (end time, sequence): the retention order.
  std::set<std::pair<int64_t, int64_t>> finished_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> to_delete_ ABSL_GUARDED_BY(mu_);  // for the persister
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // Sessions waiting for workers (AcquireSessionWorkers), each queued
  // behind the jobs whose sequence is below `before_sequence`.
  struct SessionWaiter {
    std::string session_id;
    int num_workers = 1;
    int64_t before_sequence = 0;        // next_sequence_ when it arrived
    int64_t order = 0;                  // among sessions that arrived between the same jobs
    std::vector<std::string> assigned;  // set by AssignGangsLocked
  };
  std::vector<SessionWaiter*> session_waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);  // to persist
  SessionManager sessions_;
  // AbortJob to the workers of a job that was not adopted after all.
  BackgroundThreads farewells_;
  std::thread scheduler_;
  std::thread persister_;
  struct Metrics {
    Counter* submitted = nullptr;
    Counter* restarts = nullptr;
    Counter* finished = nullptr;
    Histogram* tick_seconds = nullptr;
    Histogram* scheduling_delay = nullptr;
  } metrics_;  // all set or all null
};

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_COORDINATOR_H_
