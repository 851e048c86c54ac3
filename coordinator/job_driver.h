// One attempt of one job, driven from the coordinator on a thread of its
// own: StartJob on every rank; then, for training jobs, RunSteps in chunks up
// to the next summary, eval or checkpoint boundary, Evaluate at eval periods
// and the job's actions on rank 0's metrics (every action of the mode runs;
// when any halts, the job ends, an early stop after every rank wrote a
// checkpoint at its step); for EVALUATION and INFERENCE jobs one Infer
// (restore ALL: one per checkpoint, waiting for new ones). It ends the
// attempt with the job's final state, or with RESTARTING when it was
// preempted or lost a worker and restarts are left, tells every rank to let
// go (AbortJob, also after success), and returns.
//
// The driver owns no job record: it reports progress and state changes
// through its JobDriverHost (the Coordinator, which keeps the job table, the
// store and the watchers), and learns of a cancel, a lost worker or a
// shutdown through Stop/ShutDown.
//
// A rank's failure ends the attempt at once: calls still in flight to the
// others are cancelled, and the reason names the rank that caused it (a rank
// whose worker could not be reached, rather than its peers' collective
// errors; an error of its own rather than a peer's report of it).
//
// Thread-safety: Run on one thread; Stop and ShutDown from any thread.
#ifndef TRAINYARD_COORDINATOR_JOB_DRIVER_H_
#define TRAINYARD_COORDINATOR_JOB_DRIVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "coordinator/watchdog.h"
#include "coordinator/worker_client.h"
#include "proto/job_service.pb.h"
#include "proto/worker.pb.h"
#include "spec/actions.h"

namespace trainyard {

struct RejoinProbe;  // job_driver_elastic.cc

// The id of the `sequence`th job submitted to a coordinator under `name`:
// the name with characters other than [A-Za-z0-9._-] replaced by '-' (at
// most 48 of them; "job" when empty), then "-<sequence>". It names the job
// in every call, log line, checkpoint's metadata and rendezvous scope.
std::string JobIdFor(const std::string& name, int64_t sequence);

// What the coordinator knows when it starts an attempt.
struct AttemptPlan {
  std::string job_id;
  JobSpec spec;                                        // normalised
  int restarts = 0;                                    // attempts restarted so far (scopes the rendezvous)
  std::string restore_from;                            // a restart: the job's newest checkpoint; "" first attempt
  std::string latest_checkpoint;                       // the job's newest checkpoint so far ("" none)
  std::vector<std::shared_ptr<WorkerClient>> clients;  // rank order; nullptr: the worker left
  std::vector<std::string> workers;                    // rank order: DescribeWorker's, for messages
  std::vector<std::string> worker_ids;                 // rank order (ELASTIC: WorkerLost, joins)
  std::vector<std::string> addresses;                  // rank order: the workers' "host:port" (the watchdog's probes)
  WatchdogOptions watchdog;                            // training kinds only
  // A coordinator that restarted takes the running attempt over (Adopt on
  // every rank) instead of starting it: the ranks keep their state.
  bool adopt = false;
  int64_t recorded_step = 0;    // adopt: the job's metrics_step, the last chunk it recorded
  double adoption_seconds = 0;  // adopt: from the outage to the ranks' return (goodput's recovery)
  // adopt, ELASTIC, some ranks not back in time: each adopted rank's place
  // in the group it was in (rank order), that group's size, and the ranks
  // left behind (for the reason). The ranks adopted then regroup.
  std::vector<int> adopt_places;
  int adopt_world = 0;
  std::string adopt_lost;
};

// A worker given to a running ELASTIC attempt (JobDriverHost::AcquireWorkers).
struct JoiningWorker {
  std::string worker_id;
  std::shared_ptr<WorkerClient> client;
  std::string description;  // DescribeWorker's: "worker w4-b on host b, b:1234"
  std::string address;      // "host:port"
};

// The coordinator's side: the job's record.
class JobDriverHost {
 public:
  virtual ~JobDriverHost() = default;
  // Progress (step, metrics, checkpoint, ranks): applied to the job's record
  // under the coordinator's lock, visible to watchers at once, persisted
  // within a second.
  virtual void RecordProgress(const std::string& job_id, const std::function<void(JobInfo*)>& edit) = 0;
  // The job's goodput as its record reads now (GetJob's: wall time to now).
  virtual Goodput GoodputNow(const std::string& job_id) = 0;
  // A state change, after `edit` (if any): written to the job store before
  // it is visible.
  virtual void ChangeState(const std::string& job_id, JobState state, const std::string& reason,
                           const std::function<void(JobInfo*)>& edit = nullptr) = 0;
  // fault_tolerance ELASTIC. Up to `n` idle workers, a multiple of `unit`
  // of them (hybrid sharding: whole shard groups), now the job's (none
  // while an older job waits for a gang), none of those in `exclude`
  // (workers the watchdog found cut off from the job's ranks).
  virtual std::vector<JoiningWorker> AcquireWorkers(const std::string& job_id, int n, int unit,
                                                    const std::set<std::string>& exclude) = 0;
  // The attempt's ranks are now `worker_ids` (rank order); the job's other
  // workers (lost, or acquired and not joined) go back to the pool, but for
  // `joining` (acquired and building the job ahead of their join).
  virtual void SetRanks(const std::string& job_id, const std::vector<std::string>& worker_ids,
                        const std::vector<std::string>& joining) = 0;
  // Workers AcquireWorkers gave the job that will not join it (their build
  // failed): back to the pool.
  virtual void ReleaseWorkers(const std::string& job_id, const std::vector<std::string>& worker_ids) = 0;
  // A call of the group meeting in rendezvous `scope` (GroupScope) failed:
  // ranks still waiting there for their peers fail at once, with `reason`
  // (InMemoryStore::CloseScope), instead of at the collective timeout.
  virtual void CloseRendezvous(const std::string& scope, const std::string& reason) = 0;
};

class JobDriver {
 public:
  // restore { mode: ALL }: how often a job waiting for new checkpoints looks.
  static constexpr absl::Duration kCheckpointPollInterval = absl::Seconds(1);

  // `clock` times the driver's bounded waits (CheckpointNow's timeout, the
  // grace for the other ranks to report a failure).
  JobDriver(AttemptPlan plan, JobDriverHost* host, Clock* clock = Clock::Real());

  // Runs the attempt to its end (see above) and tears it down on every rank.
  // After a ShutDown the job's state is left as it is, and a training
  // attempt that started is left running on its ranks: the next
  // coordinator adopts it (or restarts it from its newest checkpoint).
  void Run();

  // Ends the attempt at the next opportunity (calls in flight are
  // cancelled) in `state` with `reason`; `retryable`: another attempt may
  // follow if restarts are left (a lost worker), else the state is final (a
  // cancel). The first request wins.
  void Stop(JobState state, std::string reason, bool retryable);
  // The coordinator is stopping: end the attempt without a state change.
  void ShutDown();
  // The worker stopped heartbeating. An ELASTIC training attempt drops its
  // rank (its call in flight is cancelled and reports the loss) and
  // returns true; otherwise false, and the caller stops the attempt.
  bool WorkerLost(const std::string& worker_id, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

  // An on-demand checkpoint: written on every rank at the next boundary
  // between chunks, after which this returns its path and step. If the
  // attempt ends first: the final checkpoint of a job that succeeded, else
  // kFailedPrecondition with how it ended; kDeadlineExceeded after
  // `timeout`; kFailedPrecondition at once for a job that does not train.
  struct SavedCheckpoint {
    std::string path;
    int64_t step = 0;
  };
  absl::StatusOr<SavedCheckpoint> CheckpointNow(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct StopRequest {
    JobState state;
    std::string reason;
    bool retryable;
    bool shutdown;
  };
  // Runs call(rank) on every rank in parallel; returns once all succeed, or
  // at the first failure or stop (cancelling the calls still in flight). The
  // status names the rank that failed.
  // `each` (ELASTIC): on a failure the other ranks' calls are not
  // cancelled but awaited (they fail once their collective does, or are
  // lost), and every rank's outcome is returned in it.
  template <typename Response>
  using StartCall = std::function<void(int rank, WorkerClient::Done<Response> done)>;
  template <typename Response>
  absl::Status OnAllRanks(const char* what, const StartCall<Response>& call, std::vector<Response>* responses,
                          std::vector<absl::StatusOr<Response>>* each = nullptr);
  // ELASTIC: the ranks `keep` (in rank order) and `joining` form the
  // attempt's next group; on success *step is where they all are.
  // `why` is the reason recorded with it.
  absl::Status Regroup(const std::vector<int>& keep, const std::vector<JoiningWorker>& joining, int64_t* step,
                       const std::string& why);
  // Regroup's steps: the new members (the ranks left behind told to let go)
  // in the next generation; then Regroup on the kept ranks (the first
  // `kept`) and StartJob(join) on the joining ones, answers in rank order.
  void FormGroup(const std::vector<int>& keep, const std::vector<JoiningWorker>& joining, const std::string& why);
  absl::Status MeetAsGroup(int kept, std::vector<RegroupResponse>* answers,
                           std::vector<absl::StatusOr<RegroupResponse>>* each = nullptr);
  // ELASTIC, after MeetAsGroup failed (`each`: every rank's outcome, the
  // first `kept` ranks the ones already in the job): the ranks lost while
  // the group formed are left out and the others regroup again (joiners
  // join again); else `failure`.
  absl::Status RegroupWithoutLostRanks(const absl::Status& failure,
                                       const std::vector<absl::StatusOr<RegroupResponse>>& each, int kept,
                                       int64_t* step, const std::string& why);
  // ELASTIC: after a failed fan-out (RunSteps, Evaluate, SaveCheckpoint;
  // `statuses` every rank's outcome), the lost ranks are dropped and the
  // others regroup (true); false when the failure is not a lost rank, a
  // rank was preempted, or fewer than min_workers would be left: the
  // attempt ends with `failure`. `during` ends the recorded reason (" during
  // the evaluation of step N").
  absl::StatusOr<bool> SurviveLostRanks(const std::vector<absl::Status>& statuses, bool preempted,
                                        const absl::Status& failure, const std::string& during, int64_t* step);
  // SurviveLostRanks' choice: false if the attempt cannot go on; else the
  // ranks to keep (whole shard groups, at least min_workers) and what was
  // lost, one entry per rank left behind.
  bool Survivors(const std::vector<absl::Status>& statuses, bool preempted, const absl::Status& failure,
                 std::vector<int>* keep, std::vector<std::string>* lost);
  // ELASTIC, after StartJob failed with a lost rank: kAgain when the others
  // (whose starts failed with it) form the next group, to start again;
  // kStarted when they had all started and regrouped (*started: their
  // answers); kFailed when the attempt ends (a rank's own error, a
  // preemption, fewer than min_workers, or some survivors started and
  // others did not). *note: what was lost, for the job's reason.
  enum class StartOutcome { kFailed, kAgain, kStarted };
  StartOutcome SurviveFailedStart(const absl::Status& failure,
                                  const std::vector<absl::StatusOr<StartJobResponse>>& each,
                                  std::vector<StartJobResponse>* started, std::string* note);
  // ELASTIC, after `failure` of a fan-out at `step` outside RunSteps: OK
  // when the lost ranks were dropped and the others regrouped at `step`
  // (the caller repeats the call); else the failure (or the regroup's).
  template <typename Response>
  absl::Status SurviveFailedCall(const absl::Status& failure, const std::vector<absl::StatusOr<Response>>& each,
                                 const std::string& during, int64_t step);
  static bool Preempted(const RunStepsResponse& r) { return r.preempted(); }
  static bool Preempted(const EvaluateResponse& r) { return r.preempted(); }
  static bool Preempted(const SaveCheckpointResponse&) { return false; }
  static bool Preempted(const StartJobResponse&) { return false; }
  static bool Preempted(const RegroupResponse&) { return false; }
  // Every rank's status, and whether any answered `preempted`.
  template <typename Response>
  static std::vector<absl::Status> Statuses(const std::vector<absl::StatusOr<Response>>& each, bool* preempted) {
    std::vector<absl::Status> out;
    for (const auto& r : each) {
      out.push_back(r.status());
      if (r.ok() && Preempted(*r)) *preempted = true;
    }
    return out;
  }
  // ELASTIC, at a chunk boundary: the workers that built the job ahead
  // (PrepareJoiners) join, once every one of them has answered; those
  // whose build failed are let go and cut off (CutOffJoiner).
  absl::Status AdmitJoiners(int64_t* step);
  // ELASTIC: idle workers, up to num_workers ranks with those already
  // preparing, are given the job and build it ahead of their join
  // (StartJob with `prepare`) while the ranks train on. From AdmitJoiners
  // and, during a chunk, from the watchdog's rounds (WaitOrWatch).
  void PrepareJoiners() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> PreparingIds() const;
  // ELASTIC: a worker out of the job that is not to join it again as is:
  // one asked to stop (for good), or one cut off (dropped by the watchdog,
  // or lost while it joined) until a probe through `client` finds that it
  // reaches every rank (ExcludedJoiners).
  struct CutOffWorker {
    std::string description;
    bool for_good = false;
    bool cleared = false;                  // a probe found every rank reachable
    std::shared_ptr<WorkerClient> client;  // to probe it
    absl::Time next_probe;                 // not before
    absl::Duration backoff;                // doubles with each failed probe and each new cut
    std::shared_ptr<RejoinProbe> probe;    // in flight or answered
  };
  void CutOff(int rank, bool for_good);
  void CutOffJoiner(const std::string& worker_id, const std::string& description,
                    const std::shared_ptr<WorkerClient>& client, bool for_good);
  // The workers AcquireWorkers must not take now. A cut-off worker is
  // probed (is every rank's address reachable from it?) once its backoff
  // has passed: 1 s after the cut, doubling up to 60 s after each failed
  // probe and each further cut. The probe runs while the job trains; its
  // answer is read at the next boundary.
  std::set<std::string> ExcludedJoiners();
  bool elastic() const;
  void SetMembers(std::vector<std::shared_ptr<WorkerClient>> clients, std::vector<std::string> workers,
                  std::vector<std::string> worker_ids, std::vector<std::string> addresses) ABSL_LOCKS_EXCLUDED(mu_);
  // OnAllRanks' wait for its calls: one wait on changed_; for a training
  // job, when *next_watch passes, a probe round (Watch) first. `answered`:
  // which ranks' calls have answered; `after_failure`: one of them failed.
  void WaitOrWatch(absl::Time* next_watch, bool elastic_chunk, const std::vector<bool>& answered,
                   bool after_failure = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Probes every rank (watchdog.h) and acts on the verdict: an ELASTIC
  // chunk (`elastic_chunk`) drops the ranks (as lost, their calls
  // cancelled, never taken back in this attempt) and aborts the others'
  // collective (LeaveGroup), so they fail the chunk at once and regroup;
  // anything else ends the attempt for a restart. Ranks whose calls have
  // answered count neither as progress nor as stalled (Examine's
  // `finished`). After a failure (`after_failure`), ranks still blocked on
  // ranks that answered have their collective aborted
  // (BlockedOnAnsweredRanks). An ELASTIC chunk's ranks
  // are judged against the watchdog's elastic_stall, anything else against
  // its stall. Returns when the next round is due: after the round period,
  // or, when a rank is suspect (silent or cut off) but the others have not
  // been blocked long enough, once they have (UntilStalled).
  absl::Duration Watch(bool elastic_chunk, const std::vector<bool>& answered, bool after_failure)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One probe of each rank, due within `deadline`; the ranks marked in
  // `skip_wait` are not waited for (what they answer meanwhile counts;
  // otherwise they are silent). `as_of_end`: the same answers with each
  // blocked rank's stall advanced to the round's end.
  std::vector<absl::StatusOr<ProbeResponse>> ProbeRound(absl::Duration deadline, const std::vector<bool>& skip_wait,
                                                        std::vector<absl::StatusOr<ProbeResponse>>* as_of_end)
      ABSL_LOCKS_EXCLUDED(mu_);
  // ELASTIC, after a call failed, until `all_answered()` or a stop: the
  // survivors answer once their collective fails (at once when a peer's
  // process died; lost workers' calls are cancelled by WorkerLost), with
  // LeaveGroupsOfLostPeers, GiveUpOnCalls after kAbortGrace, and the
  // watchdog's rounds (WaitOrWatch) meanwhile. `answered`: per rank.
  void AwaitSurvivors(const std::function<bool()>& all_answered, const std::function<std::vector<bool>()>& answered,
                      absl::Time* next_watch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ELASTIC, after a call failed: when a rank whose call has answered is
  // lost (WorkerLost: its heartbeats stopped; the watchdog dropped it),
  // the ranks still in their calls can never complete a collective with
  // it: their collective is aborted at once (LeaveGroup), not after the
  // watchdog's stall. True when it did.
  bool LeaveGroupsOfLostPeers(const std::vector<bool>& answered) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long ranks whose collective was aborted that way may take to end
  // their calls. A transfer from the lost rank (a joiner receiving its
  // state) cannot be interrupted and would last until the collective
  // timeout: past this, GiveUpOnCalls.
  static constexpr absl::Duration kAbortGrace = absl::Seconds(1);
  // The ranks whose calls have not answered are taken as lost (their calls
  // cancelled); their workers are not cut off, and are idle again once
  // their calls end. Releases mu_ meanwhile.
  void GiveUpOnCalls(const std::vector<bool>& answered) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LeaveGroup to each of `ranks`, not waiting for the answers.
  void LeaveGroups(const std::vector<int>& ranks, const std::string& reason);
  // "rank R (worker ... on host ..., address)", for messages.
  std::string RankName(int rank) const;
  // Tells every rank to let go of the job; waits for every answer.
  void AbortEveryRank(const AbortJobRequest& abort);
  // The attempt's body; sets *final_state/*final_reason (when it ends the
  // job itself: success, an action, a preemption). Its phases follow.
  absl::Status Drive(JobState* final_state, std::string* final_reason);
  // How Drive ends the job itself.
  struct Ending {
    JobState* state;
    std::string* reason;
    // An action ended the job SUCCEEDED: a checkpoint at its step is due.
    bool stopped_early = false;
  };
  // StartJob on every rank; records what they restored (the job's newest
  // checkpoint, what was passed over) and RUNNING. The step they start at.
  absl::StatusOr<int64_t> StartRanks();
  // StartJob for `rank` of `world` in the current attempt and generation.
  StartJobRequest StartRequest(int rank, int world) const;
  // plan.adopt: Adopt on every rank (each answers once the call the old
  // coordinator started has ended); the ranks must agree on their places,
  // step and group (ELASTIC: they regroup when some were not back in time,
  // are at different steps or left their group). Records the chunk whose
  // answer never reached the old coordinator, and RUNNING. The step they
  // are at; a chunk that ended in a preemption meanwhile sets the ending
  // (PREEMPTED) instead.
  absl::StatusOr<int64_t> AdoptRanks(Ending* ending);
  // AdoptRanks' check: every rank at its place in the group the record
  // names (AttemptPlan::adopt_places) and of one generation; *regroup when
  // ELASTIC ranks must regroup. kUnavailable naming the rank otherwise.
  // `kept`: the ranks (indices of the members) that answered adopted[i].
  absl::Status CheckAdoptedPlaces(const std::vector<AdoptResponse>& adopted, const std::vector<int>& kept,
                                  bool* regroup) const;
  // ELASTIC, after Adopt failed with `failure` (`each`: every rank's
  // answer): the ranks that answered, when those lost (their workers gone
  // since they registered) leave whole shard groups of min_workers or more;
  // *adopted: their answers, *lost: what was lost. Else `failure`.
  absl::StatusOr<std::vector<int>> AdoptedSurvivors(const absl::Status& failure,
                                                    const std::vector<absl::StatusOr<AdoptResponse>>& each,
                                                    std::vector<AdoptResponse>* adopted, std::string* lost);
  // EVALUATION and INFERENCE: Infer on every rank; the metrics recorded,
  // *final_reason says what was decoded where.
  absl::Status RunInference(int64_t step, std::string* final_reason);
  // restore { mode: ALL }: Infer on every rank again and again, each call
  // the oldest checkpoint above the last one (so each is evaluated once,
  // also one saved while another is evaluated), its metrics recorded at its
  // step. When none is left it looks again every kCheckpointPollInterval
  // until none has come for restore.wait_seconds (0: ends at once); a stop
  // (a cancel) ends the wait at once. kFailedPrecondition when the job
  // found none to evaluate at all.
  absl::Status RunEveryCheckpoint(std::string* final_reason);
  // Infer on every rank (after_step for restore ALL).
  absl::Status InferOnEveryRank(int64_t after_step, std::vector<InferResponse>* inferred);
  // Rank 0's metrics of an inference at the checkpoint's `step` in the
  // job's record; the examples decoded on all ranks.
  int64_t RecordInference(int64_t step, const std::vector<InferResponse>& inferred);
  // Waits `d`; kAborted with the stop's reason as soon as the attempt is
  // stopped.
  absl::Status PauseUnlessStopped(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Why ServeCheckpointRequests saves: on-demand requests only (none asked:
  // no save), or always: the job stops early at the step, or the chunk's
  // own save was cut short by a lost rank (FinishChunkOnSurvivors).
  enum class SaveFor { kRequests, kStopping, kChunk };
  // On-demand checkpoints asked since the last chunk: one save on every
  // rank serves them all (CheckpointNow's callers are woken); with kStopping
  // or kChunk, the save is made even if none was asked.
  absl::Status ServeCheckpointRequests(int64_t step, SaveFor why = SaveFor::kRequests);
  // A chunk's results in the job's record: step, metrics, checkpoint (and a
  // failed write, logged when it changes), every rank's timings.
  // `account`: the chunk's goodput (ChunkGoodput), in the same update.
  void RecordChunk(int64_t step, const std::vector<RunStepsResponse>& ran,
                   const std::function<void(Goodput*)>& account);
  // A worker was asked to stop (`asked[r]`: rank r's was): every rank
  // stopped after `last_step` and the emergency `checkpoint` was written.
  // ELASTIC, when the others make whole shard groups and at least
  // min_workers: they regroup without the stopping ranks (true; *step: the
  // step they hold), which are not taken again in this attempt. Otherwise
  // the job ends PREEMPTED (RecordPreemption; false). `during` ends the
  // reason (`during_if_ended` instead when the job ends).
  absl::StatusOr<bool> SurvivePreemption(const std::vector<bool>& asked, int64_t last_step,
                                         const std::string& checkpoint,
                                         const google::protobuf::Map<std::string, double>& metrics,
                                         const std::string& during, const std::string& during_if_ended, Ending* ending,
                                         int64_t* step);
  // A worker was asked to stop: every rank stopped after `last_step` and
  // rank 0 wrote `checkpoint`; the job ends PREEMPTED naming the worker.
  void RecordPreemption(const std::vector<bool>& asked, int64_t last_step, const std::string& checkpoint,
                        const google::protobuf::Map<std::string, double>& metrics, const std::string& during,
                        Ending* ending);
  // RecordPreemption's record (the step, checkpoint and metrics); the
  // reason, naming the first stopping worker.
  std::string RecordStop(const std::vector<bool>& asked, int64_t last_step, const std::string& checkpoint,
                         const google::protobuf::Map<std::string, double>& metrics, const std::string& during);
  // Runs every action of each mode in `metrics` (in the modes' order) on
  // that mode's metrics, each action also after one halted; true when any
  // halts the job: the ending is set, FAILED if one of those fails it (no
  // checkpoint is due), else SUCCEEDED, with every halting action's reason.
  bool RunActions(ActionsByMode& actions, const std::map<ActionModeKind, MetricsByTask>& metrics, int64_t step,
                  Ending* ending);
  // Evaluate on every rank at `step`, the metrics recorded and the eval
  // actions (ACTION_TRAIN_EVAL's and ACTION_INFER_EVAL's) run; true when
  // the job ends (a preemption, or an action).
  absl::StatusOr<bool> EvaluateRanks(int64_t step, ActionsByMode& actions, Ending* ending);
  // A chunk of `n` steps from *step that failed (`run`; `each` every rank's
  // answer): ELASTIC drops the lost ranks and regroups the others (*step:
  // where they are), else `run` is returned. When the survivors had trained
  // every step (the loss came during the chunk's own checkpoint), they do
  // what the chunk still owed: its checkpoint (`save`) and the evaluation
  // due at its end. True when that evaluation ended the job.
  struct FailedChunk {
    absl::Status run;
    std::vector<absl::StatusOr<RunStepsResponse>> each;
    absl::Time start;
    int64_t n = 0;
    bool save = false;
    bool last = false;
  };
  absl::StatusOr<bool> SurviveFailedChunk(const FailedChunk& chunk, ActionsByMode& actions, Ending* ending,
                                          int64_t* step);
  std::optional<StopRequest> stop_request() ABSL_LOCKS_EXCLUDED(mu_);
  // Goodput (proto/job_service.proto): the seconds since `start` added to
  // the bucket of the job's record that `get`/`set` name.
  void Spent(double (Goodput::*get)() const, void (Goodput::*set)(double), absl::Time start);
  // The goodput edit of a chunk from `first_step` that completed `steps`
  // steps, started at `start` (coordinator/goodput.h, AccountChunk, with
  // rank 0's timings).
  std::function<void(Goodput*)> ChunkGoodput(int64_t first_step, int64_t steps, const RunStepsResponse& rank0,
                                             absl::Time start);
  // A chunk of `steps` from `first_step` that failed after `seconds`:
  // ELASTIC kept `kept` steps of it (the regroup's step less first_step);
  // -1 when the attempt ends (all of it is lost work). The kept steps at the
  // last chunk's pace are training, one step more is lost unless all were
  // kept, the rest is the wait until the fault was found (recovery).
  void AccountFailedChunk(int64_t first_step, int64_t steps, int64_t kept, double seconds);

  const AttemptPlan plan_;
  JobDriverHost* const host_;
  Clock* const clock_;
  // The attempt's ranks: the plan's, then (ELASTIC) the groups that
  // followed. Written by the driver's thread under mu_, read by it freely.
  std::vector<std::shared_ptr<WorkerClient>> clients_;
  std::vector<std::string> workers_;  // DescribeWorker's
  std::vector<std::string> worker_ids_;
  std::vector<std::string> addresses_;
  int generation_ = 0;    // ELASTIC: of the current group
  bool started_ = false;  // every rank started (or was adopted)
  int regroups_ = 0;
  std::string latest_checkpoint_;   // the newest durable checkpoint this attempt knows
  int64_t trained_to_ = 0;          // the step the training ended at (Drive returned OK)
  std::string checkpoint_failure_;  // as last reported to the job's record
  double seconds_per_step_ = 0;     // the last chunk's (goodput)
  // ELASTIC: workers building the job ahead of their join (PrepareJoiners),
  // with the rank and world size they build for and the build's outcome
  // once answered (the driver's thread only; the outcome under its mutex).
  struct PreparingJoiner {
    JoiningWorker worker;
    int rank = 0;
    int world = 0;
    struct Outcome {
      Mutex mu;
      std::optional<absl::Status> status ABSL_GUARDED_BY(mu);
    };
    std::shared_ptr<Outcome> outcome;
  };
  std::vector<PreparingJoiner> preparing_;
  // The watchdog's last round, when it found a suspect: of which group,
  // and which ranks did not answer (Watch; the driver's thread only).
  struct Suspects {
    int generation = -1;
    std::vector<bool> silent;
  } suspects_;

  Mutex mu_;
  CondVar changed_;  // every rank answered or one failed, or a stop was requested
  std::optional<StopRequest> stop_ ABSL_GUARDED_BY(mu_);
  // ELASTIC: workers that stopped heartbeating, and why.
  std::map<std::string, std::string> lost_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<WorkerClient>> member_clients_ ABSL_GUARDED_BY(mu_);
  // ELASTIC: workers not taken (back) into this attempt (ExcludedJoiners).
  std::map<std::string, CutOffWorker> cut_off_;
  // On-demand checkpoints: tickets asked and served, the last result, and
  // how the attempt ended (set once Drive returns).
  int64_t checkpoints_asked_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t checkpoints_served_ ABSL_GUARDED_BY(mu_) = 0;
  absl::StatusOr<SavedCheckpoint> last_saved_ ABSL_GUARDED_BY(mu_) = absl::UnknownError("none yet");
  std::optional<absl::StatusOr<SavedCheckpoint>> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_JOB_DRIVER_H_
