// What a worker does for the coordinator, free of gRPC: holds one job (or
// one interactive session) at a time, joins the job's collective (Gloo, or
// NCCL on a CUDA device), and runs the job's TrainingJob (job/training_job.h:
// the model, data, trainer, checkpoints) as the coordinator's calls say,
// translating to and from the WorkerService messages and recording the
// worker's metrics. worker_service.h adapts it to WorkerService.
//
// Checkpoints: StartJob restores the one the coordinator names (a restart)
// or the one the spec's `restore` selects; RunSteps writes one when asked
// (rank 0 writes, in the background when checkpoint.async; every rank
// contributes its data position), and the emergency one when a preemption
// was agreed.
//
// One job at a time. RunSteps/Evaluate of a job run one at a time; AbortJob
// returns at once: it raises the job's stop flag (the trainer stops at the
// next step boundary, on every rank at the same step) and tears the job
// down in the background. job_id() stays set until the teardown is done, so
// the coordinator hands out the worker again only when it is free.
//
// Thread-safety: thread-safe.
#ifndef TRAINYARD_WORKER_WORKER_CORE_H_
#define TRAINYARD_WORKER_WORKER_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective.h"
#include "collective/store.h"
#include "common/background_threads.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/job_service.pb.h"
#include "proto/worker.pb.h"

namespace trainyard {

struct TrainingJobOptions;  // job/training_job.h

struct WorkerCoreOptions {
  // The address the collective's connections use: this host's address as
  // the other ranks reach it.
  std::string host_address = "127.0.0.1";
  // Where parameters, optimizer state and batches live (common/torch/device.h).
  // On a CUDA device with more than one rank the collective is NCCL (CUDA
  // builds), else Gloo.
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  absl::Duration collective_timeout = absl::Seconds(60);
  // The rendezvous store for a scope ("<job id>/<attempt>").
  std::function<std::shared_ptr<Store>(const std::string& scope)> store_factory;
  // Step time, tokens/s, all-reduce and checkpoint times, steps (not
  // owned; outlives the core); nullptr: none.
  MetricsRegistry* metrics = nullptr;
  // For timing/mfu (TrainingJobOptions::peak_flops); 0: the device's known
  // peak, else measured.
  double peak_flops = 0;
};

class WorkerCore {
 public:
  explicit WorkerCore(WorkerCoreOptions options);
  ~WorkerCore();  // aborts the job, joins teardowns

  // kFailedPrecondition while another job or a session is held;
  // kInvalidArgument for a spec the worker cannot run (unknown task, a
  // batch that does not split over the world size, ...). With `prepare`
  // (and `join`): builds the job without its group and holds it; the
  // StartJob with `join` that follows (same job and attempt) forms the
  // group and receives the state, building again only when its place
  // changed in a way the built job cannot follow (sharded state).
  absl::StatusOr<StartJobResponse> StartJob(const StartJobRequest& request);
  // kFailedPrecondition if first_step is not the next step; kAborted when
  // the job was aborted meanwhile or a collective failed; kInternal when the
  // ranks' parameters differ after the chunk (checked every chunk).
  absl::StatusOr<RunStepsResponse> RunSteps(const RunStepsRequest& request);
  // fault_tolerance ELASTIC: this rank leaves its group for the request's
  // generation (TrainingJob::Regroup); every rank of the new group calls it
  // (or StartJob with `join`) at once. kInvalidArgument for a generation
  // that is not newer or another attempt; kAborted when the group fails
  // (the job keeps its old group and waits for AbortJob).
  absl::StatusOr<RegroupResponse> Regroup(const RegroupRequest& request);
  absl::StatusOr<EvaluateResponse> Evaluate(const EvaluateRequest& request);
  // EVALUATION and INFERENCE jobs: decodes and scores this rank's shard of
  // inference.split (examples r, r+W, ... in the split's order, at most
  // inference.num_batches batches), writes it as JSON lines
  // (index, input, target, prediction, prediction_score, target_score), and
  // on rank 0, after a barrier, merges the shards in order into
  // output_dir/inference/<task>-<split>.jsonl. EVALUATION then computes the
  // task's metric functions (and mean_log_likelihood of the targets),
  // written as TensorBoard scalars under output_dir/inference_eval/<task>/
  // at the checkpoint's step and as output_dir/inference_eval/<task>-<split>.json.
  absl::StatusOr<InferResponse> Infer(const InferRequest& request);
  // Every rank of a training job calls it between chunks: rank 0 writes
  // checkpoint_<step> (proto/worker.proto). kFailedPrecondition when `step`
  // is not the job's step or the job does not train.
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& request);
  // Also aborts the job's collective: a call blocked in it ends at once.
  absl::Status AbortJob(const AbortJobRequest& request);
  // The coordinator's watchdog: this rank's collective progress and which
  // peers' addresses it reaches (worker/reachability.h); answered while a
  // chunk runs (it does not wait for the running call).
  // kInvalidArgument for a connect timeout outside (0, 60] s.
  absl::StatusOr<ProbeResponse> Probe(const ProbeRequest& request);
  // fault_tolerance ELASTIC: aborts the collective of the request's
  // generation (left: false when the rank holds another), so the call
  // blocked in it fails with kAborted and the rank leaves the group as
  // after any collective failure; Regroup follows.
  absl::StatusOr<LeaveGroupResponse> LeaveGroup(const LeaveGroupRequest& request);
  // A coordinator that restarted takes over the running attempt: once the
  // call in flight (the old coordinator's) has ended, this rank's place,
  // step and last chunk's answer. kFailedPrecondition for another attempt
  // or a job that does not train; kAborted for a job aborted or a rank out
  // of its group.
  absl::StatusOr<AdoptResponse> Adopt(const AdoptRequest& request);

  // Interactive sessions: an InteractiveModel on a checkpoint, held instead
  // of a job (kFailedPrecondition while either is held). job_id() reports
  // the session's id, so heartbeats and re-registration treat it as a job;
  // AbortJob with that id closes it. RunSession calls run one at a time.
  absl::StatusOr<OpenSessionResponse> OpenSession(const WorkerOpenSessionRequest& request);
  absl::StatusOr<SessionResponse> RunSession(const SessionRequest& request);
  // This worker is asked to stop (SIGTERM: a preemption): the job's ranks
  // agree to stop after the current step, write an emergency checkpoint for
  // it, and RunSteps reports `preempted`. Returns at once.
  void Preempt();

  // The job held ("" = none), its attempt and its last completed step, for
  // heartbeats and registration.
  std::string job_id() const;
  int attempt() const;
  int64_t step() const;
  // Background threads (teardowns) not yet joined: those still running and
  // those that ended since the last one started.
  size_t background_threads() const { return teardowns_.held(); }

 private:
  struct Job;
  absl::StatusOr<std::shared_ptr<Job>> Find(const std::string& job_id);
  // OK when the worker holds neither a job nor a session; else
  // kFailedPrecondition naming the one it holds. A job or a session claims
  // the worker by setting job_/session_ under the same lock.
  absl::Status CheckFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ELASTIC, after a chunk failed with its collective: this rank closes its
  // connections to the group (in the background), so that peers blocked on
  // it fail at once instead of at the collective timeout; the job keeps its
  // state for Regroup, and other calls are refused (kAborted) until then.
  void DropGroup(Job* job) ABSL_LOCKS_EXCLUDED(mu_);
  // Makes `next` the job's collective of `generation` (the caller holds
  // job->busy) and returns the old one, to be dropped in the background (it
  // may wait for a lost peer until its timeout).
  static std::shared_ptr<Collective> SwapCollective(Job* job, std::unique_ptr<Collective> next, int generation);
  static absl::Status CheckInGroup(const Job& job);
  // A StartJob that failed with `failure` lets go of `job`: the worker is
  // free at once; its training job and groups are closed in the
  // background. Returns `failure`.
  absl::Status ReleaseFailedStart(const std::shared_ptr<Job>& job, absl::Status failure) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's collective for `scope`: local for one rank, else NCCL on a
  // CUDA device, Gloo otherwise; without `connect`, an
  // UnconnectedCollective (the place only).
  absl::StatusOr<std::unique_ptr<Collective>> MakeCollective(const std::string& scope, int rank, int world,
                                                             bool connect = true);
  // A training job's collective: MakeCollective, and with
  // data_parallel.shard_group_size G (HSDP) a HybridCollective holding also
  // the rank's shard group and replica set (scopes "<scope>/shard-group-N"
  // and "<scope>/replica-set-N").
  absl::StatusOr<std::unique_ptr<Collective>> MakeJobCollective(const std::string& scope, int rank, int world,
                                                                const JobSpec& spec, bool connect = true);
  // StartJob with `prepare`: builds `job` on an unconnected collective of
  // its rank and world and holds it (`prepared`) for the StartJob with
  // `join` that follows. Holds job->busy.
  absl::StatusOr<StartJobResponse> PrepareJob(const std::shared_ptr<Job>& job, const StartJobRequest& request);
  // The options `job`'s TrainingJob is built with.
  TrainingJobOptions TrainingOptions(Job* job) const;
  // StartJob's group, build (unless `prepared` holds the job built for this
  // place) and restore or join. Holds job->busy.
  absl::StatusOr<StartJobResponse> BuildAndStart(const std::shared_ptr<Job>& job, const StartJobRequest& request,
                                                 bool prepared);
  // Ends `job` (the caller holds mu_): its collective aborted, its training
  // closed in the background, then the worker is free.
  void TearDownLocked(const std::shared_ptr<Job>& job, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MakeJobCollective for `job`'s group of `generation`, on a thread of its
  // own: while it forms, Probe reports the rank blocked (since the start),
  // and LeaveGroup of that generation ends the wait at once with kAborted
  // (the thread finishes in the background: Gloo's connections to a peer
  // that stopped wait for the collective timeout).
  struct Formation;
  absl::StatusOr<std::unique_ptr<Collective>> FormGroup(Job* job, int rank, int world, int generation);

  WorkerCoreOptions options_;
  mutable Mutex mu_;
  std::shared_ptr<Job> job_ ABSL_GUARDED_BY(mu_);
  struct Session;
  struct Metrics {
    Counter* steps = nullptr;
    Histogram* step_seconds = nullptr;
    Gauge* tokens_per_second = nullptr;
    Histogram* allreduce_seconds = nullptr;
    Histogram* checkpoint_seconds = nullptr;
  } metrics_;  // all set or all null
  std::shared_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  // Aborts, session closes and groups left: joined as they end, and all of
  // them by the destructor.
  BackgroundThreads teardowns_;
  // Groups being formed (FormGroup), joined as they end.
  BackgroundThreads formations_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_WORKER_CORE_H_
