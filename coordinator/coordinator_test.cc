// The coordinator's logic against fake workers (no sockets): job life
// cycle, chunking, queueing, cancel, failures, heartbeat expiry with an
// injected clock, and restarts over the SQLite store. One file (longer
// than most) because every case shares the fake worker and the fixture
// above, and together they are the coordinator's behaviour as specified.
#include "coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "common/testing/status_matchers.h"
#include "coordinator/testing/fake_worker_client.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What one fake worker was asked to do, and how it answers (when a call
// completes is the test's: coordinator/testing/fake_worker_client.h).
struct Script {
  std::mutex mu;
  std::vector<std::string> calls;  // "start r/w", "run first+n ckpt", "eval step", "abort"
  absl::Status fail_run_at_step = absl::OkStatus();
  int64_t fail_step = -1;  // RunSteps with this first_step fails
  double loss_at_end = 0;  // reported loss: 100 / last_step unless NaN asked
  bool nan_loss = false;
  int64_t preempt_step = -1;       // RunSteps from this step reports a preemption
  bool asked_to_stop = false;      // ... and this worker is the one asked
  int64_t preempt_eval_step = -1;  // Evaluate at this step reports a preemption
  // Evaluate at this step answers this (else digits_to_words/loss = 1000 / step).
  std::map<int64_t, EvaluateResponse> evaluate_at;
  // Evaluate / SaveCheckpoint at this step fails once with this status.
  std::map<int64_t, absl::Status> fail_eval_once;
  std::map<int64_t, absl::Status> fail_save_once;
  int rank = -1;
  std::vector<std::string> restored;  // StartJob's restore_checkpoint, per attempt
  // StartJob reports it restored this instead of the named checkpoint, having
  // passed over the named one (a damaged newest checkpoint).
  std::string restores_instead;
  // RunSteps ending at this step reports this checkpoint_failure.
  std::map<int64_t, std::string> checkpoint_failure_at;
  bool fail_once = false;          // fail_step fails only the first time
  absl::Status fail_start_once;    // the first StartJob (not a join) fails with this
  bool left_group = false;         // Adopt says the rank left its group
  absl::Status fail_regroup_once;  // the first Regroup fails with this
  // The failing RunSteps trained its steps first (a loss during the chunk's
  // own checkpoint): Regroup then reports the chunk's end.
  bool fail_after_steps = false;
  std::vector<Goodput> goodputs;  // the RunSteps requests' goodput (rank 0's only)
  int64_t step = 0;               // the last chunk's end (Regroup reports it)
  uint64_t digest = 7;            // Regroup's and a join's state digest
  // restore ALL: the checkpoint steps Infer finds (ascending); empty for
  // a job that restores one.
  std::vector<int64_t> checkpoints;
  int world = 0;  // StartJob's world size (Adopt reports it)
  // Adopt reports this as the last chunk answered, from this first step.
  std::optional<RunStepsResponse> last_chunk;
  int64_t last_chunk_first_step = 0;
  absl::Status fail_adopt;      // Adopt answers this
  absl::Status fail_join_once;  // the first join (StartJob with join) fails with this
  bool reaches_peers = false;   // a reachability probe's answer for every peer
  // A join reports the step this worker's last chunk ended at (a rank of
  // the group joined), whichever boundary the join comes at.
  std::shared_ptr<Script> joins_at_step_of;
};

class ScriptedResponder : public FakeWorker::Responder {
 public:
  explicit ScriptedResponder(std::shared_ptr<Script> w) : w_(std::move(w)) {}
  absl::StatusOr<StartJobResponse> StartJob(const StartJobRequest& r) override {
    Record(absl::StrCat("start ", r.rank(), "/", r.world_size(), r.join() ? " join" : "",
                        r.generation() > 0 ? absl::StrCat(" g", r.generation()) : "", r.prepare() ? " prepare" : ""));
    std::lock_guard<std::mutex> lock(w_->mu);
    if (r.join()) {  // receives the group's state: reports the step it was told to expect
      if (!w_->fail_join_once.ok()) return std::exchange(w_->fail_join_once, absl::OkStatus());
      StartJobResponse response;
      response.set_start_step(w_->step);
      if (w_->joins_at_step_of != nullptr) {
        std::lock_guard<std::mutex> group(w_->joins_at_step_of->mu);
        response.set_start_step(w_->joins_at_step_of->step);
      }
      response.mutable_joined()->set_source_rank(0);
      response.mutable_joined()->set_state_digest(w_->digest);
      w_->rank = r.rank();
      return response;
    }
    w_->restored.push_back(r.restore_checkpoint());
    if (!w_->fail_start_once.ok()) return std::exchange(w_->fail_start_once, absl::OkStatus());
    w_->rank = r.rank();
    w_->world = r.world_size();
    StartJobResponse response;
    // A restart resumes at the checkpoint's step ("ckpt_<step>").
    std::string restored = r.restore_checkpoint();
    if (!restored.empty() && !w_->restores_instead.empty()) {
      response.add_passed_over(absl::StrCat(restored, " passed over: params.safetensors: SHA-256 mismatch"));
      restored = w_->restores_instead;
    }
    if (!restored.empty()) response.set_start_step(std::stoll(restored.substr(5)));
    response.set_restored_checkpoint(restored);
    return response;
  }
  absl::StatusOr<ProbeResponse> Probe(const ProbeRequest& r) override {
    if (!r.job_id().empty()) return FakeWorker::Responder::Probe(r);  // the watchdog's: not scripted
    Record(absl::StrCat("probe ", absl::StrJoin(r.peers(), ",")));
    std::lock_guard<std::mutex> lock(w_->mu);
    ProbeResponse response;
    for (int i = 0; i < r.peers_size(); ++i) response.add_reachable(w_->reaches_peers);
    return response;
  }
  absl::StatusOr<RunStepsResponse> RunSteps(const RunStepsRequest& r) override {
    Record(absl::StrCat("run ", r.first_step(), "+", r.num_steps(), r.save_checkpoint() ? " ckpt" : ""));
    std::lock_guard<std::mutex> lock(w_->mu);
    if (r.has_goodput()) w_->goodputs.push_back(r.goodput());
    if (r.first_step() == w_->fail_step) {
      if (w_->fail_once) w_->fail_step = -1;
      if (w_->fail_after_steps) w_->step = r.first_step() + r.num_steps();
      return w_->fail_run_at_step;
    }
    if (r.first_step() == w_->preempt_step) {
      w_->preempt_step = -1;
      RunStepsResponse response;
      response.set_last_step(r.first_step() + 3);  // stopped 3 steps into the chunk
      w_->step = response.last_step();
      response.set_preempted(true);
      response.set_asked_to_stop(w_->asked_to_stop);
      if (w_->rank == 0) response.set_checkpoint(absl::StrCat("ckpt_", r.first_step() + 3));
      return response;
    }
    RunStepsResponse response;
    response.set_last_step(r.first_step() + r.num_steps());
    w_->step = response.last_step();
    (*response.mutable_metrics())["loss"] =
        w_->nan_loss ? std::nan("") : 100.0 / static_cast<double>(response.last_step());
    if (r.save_checkpoint()) response.set_checkpoint(absl::StrCat("ckpt_", response.last_step()));
    response.set_seconds_per_step(0.25);
    response.set_compute_seconds_per_step(0.125);
    response.set_collective_seconds_per_step(0.0625);
    if (auto it = w_->checkpoint_failure_at.find(response.last_step()); it != w_->checkpoint_failure_at.end()) {
      response.set_checkpoint_failure(it->second);
    }
    return response;
  }
  absl::StatusOr<OpenSessionResponse> OpenSession(const WorkerOpenSessionRequest& r) override {
    Record(absl::StrCat("open ", r.request().checkpoint(), " ", r.rank(), "/", r.world_size()));
    if (r.request().checkpoint() == "bad") return absl::NotFoundError("bad: no such checkpoint");
    {
      std::lock_guard<std::mutex> lock(w_->mu);
      w_->rank = r.rank();
      // A data-parallel open fails on rank 1 (its peers report kAborted).
      if (r.request().checkpoint() == "bad-on-rank-1") {
        if (r.rank() == 1) return absl::DataLossError("rank 1 cannot read it");
        return absl::AbortedError("creating the interactive model failed on rank(s) 1");
      }
    }
    OpenSessionResponse response;
    response.set_session_id(r.session_id());
    response.set_step(7);
    return response;
  }
  absl::StatusOr<SessionResponse> RunSession(const SessionRequest& r) override {
    Record(absl::StrCat("session ", SessionRequest::Op_Name(r.op())));
    std::lock_guard<std::mutex> lock(w_->mu);
    SessionResponse response;
    for (const auto& e : r.examples()) {
      if (e.input() == "refused") return absl::InvalidArgumentError("example 0: refused");  // alike on every rank
      if (e.input() == "crash" && w_->rank == 1) return absl::UnavailableError("rank 1 is gone");
      // Rank 0 fails on its own while rank 1's worker vanishes.
      if (e.input() == "split") {
        if (w_->rank == 0) return absl::InvalidArgumentError("rank 0 refused it");
        if (w_->rank == 1) return absl::UnavailableError("rank 1 is gone");
      }
      response.add_predictions(absl::StrCat("p", w_->rank, ":", e.input()));
    }
    return response;
  }
  absl::StatusOr<InferResponse> Infer(const InferRequest& r) override {
    std::unique_lock<std::mutex> lock(w_->mu);
    InferResponse response;
    response.set_examples(10);
    std::string name = "t-validation";
    if (!w_->checkpoints.empty()) {  // restore ALL: the oldest above after_step
      auto next = std::upper_bound(w_->checkpoints.begin(), w_->checkpoints.end(), r.after_step());
      response.set_after_step(r.after_step());
      response.set_checkpoint_step(next == w_->checkpoints.end() ? -1 : *next);
      name = absl::StrCat(name, "-", response.checkpoint_step());
    }
    if (w_->rank == 0) {
      response.set_output(absl::StrCat("out/inference/", name, ".jsonl"));
      (*response.mutable_metrics())["t/exact_match"] = 75.0;
    }
    const bool every_checkpoint = !w_->checkpoints.empty();
    lock.unlock();
    Record(every_checkpoint ? absl::StrCat("infer after ", r.after_step(), ": ", response.checkpoint_step()) : "infer");
    return response;
  }
  absl::StatusOr<SaveCheckpointResponse> SaveCheckpoint(const SaveCheckpointRequest& r) override {
    Record(absl::StrCat("save ", r.step(), r.wait() ? " wait" : ""));
    std::lock_guard<std::mutex> lock(w_->mu);
    if (auto it = w_->fail_save_once.find(r.step()); it != w_->fail_save_once.end()) {
      absl::Status failed = it->second;
      w_->fail_save_once.erase(it);
      return failed;
    }
    SaveCheckpointResponse response;
    if (w_->rank == 0) response.set_path(absl::StrCat("ckpt_", r.step()));
    return response;
  }
  absl::StatusOr<EvaluateResponse> Evaluate(const EvaluateRequest& r) override {
    Record(absl::StrCat("eval ", r.step()));
    EvaluateResponse response;
    std::lock_guard<std::mutex> lock(w_->mu);
    if (auto it = w_->fail_eval_once.find(r.step()); it != w_->fail_eval_once.end()) {
      absl::Status failed = it->second;
      w_->fail_eval_once.erase(it);
      return failed;
    }
    if (r.step() == w_->preempt_eval_step) {
      w_->preempt_eval_step = -1;
      response.set_preempted(true);
      response.set_asked_to_stop(w_->asked_to_stop);
      if (w_->rank == 0) response.set_checkpoint(absl::StrCat("ckpt_", r.step()));
      return response;
    }
    if (auto it = w_->evaluate_at.find(r.step()); it != w_->evaluate_at.end()) return it->second;
    (*response.mutable_metrics())["digits_to_words/loss"] = 1000.0 / r.step();
    return response;
  }
  absl::StatusOr<RegroupResponse> Regroup(const RegroupRequest& r) override {
    Record(absl::StrCat("regroup ", r.rank(), "/", r.world_size(), " g", r.generation()));
    std::lock_guard<std::mutex> lock(w_->mu);
    if (!w_->fail_regroup_once.ok()) return std::exchange(w_->fail_regroup_once, absl::OkStatus());
    w_->rank = r.rank();
    RegroupResponse response;
    response.set_step(w_->step);
    response.set_source_rank(-1);
    response.set_state_digest(w_->digest);
    return response;
  }
  absl::Status AbortJob(const AbortJobRequest&) override {
    Record("abort");
    return absl::OkStatus();
  }
  absl::StatusOr<AdoptResponse> Adopt(const AdoptRequest& r) override {
    Record(absl::StrCat("adopt attempt ", r.attempt()));
    std::lock_guard<std::mutex> lock(w_->mu);
    if (!w_->fail_adopt.ok()) return w_->fail_adopt;
    AdoptResponse response;
    response.set_rank(w_->rank);
    response.set_world_size(w_->world);
    response.set_step(w_->step);
    response.set_left_group(w_->left_group);
    if (w_->last_chunk) {
      *response.mutable_last_chunk() = *w_->last_chunk;
      response.set_last_chunk_first_step(w_->last_chunk_first_step);
    }
    return response;
  }

 private:
  void Record(std::string call) {
    std::lock_guard<std::mutex> lock(w_->mu);
    w_->calls.push_back(std::move(call));
  }
  std::shared_ptr<Script> w_;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options_.state_dir = dir_;
    options_.output_root = dir_;
    options_.tick = absl::Milliseconds(5);
    options_.clock = &clock_;
    options_.instance_id = "";  // ids without a random part, for the messages below
  }

  std::unique_ptr<Coordinator> Make() {
    auto c = Coordinator::Create(options_, [this](const WorkerRecord& w) {
      std::lock_guard<std::mutex> lock(mu_);
      return fakes_.at(w.address)->Connect();
    });
    EXPECT_THAT(c.status(), IsOk());
    return std::move(*c);
  }

  // A fake worker `name` (listening at `name`), whose script the caller
  // fills in before it registers.
  std::shared_ptr<Script> NewWorker(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    workers_[name] = std::make_shared<Script>();
    fakes_[name] = std::make_shared<FakeWorker>(std::make_shared<ScriptedResponder>(workers_[name]));
    all_fakes_.push_back(fakes_[name]);
    return workers_[name];
  }
  // Registers a fake worker (its script set up by `script` first); returns
  // its id.
  std::string AddWorker(Coordinator* c, const std::string& name, int64_t step = 0,
                        const std::function<void(Script*)>& script = nullptr) {
    std::shared_ptr<Script> w = NewWorker(name);
    w->step = step;
    if (script) script(w.get());
    RegisterWorkerRequest r;
    r.set_host(name);
    r.set_address(name);
    return c->RegisterWorker(r)->worker_id();
  }
  // A 2-worker job (workers "a" and "b", ids w1-a and w2-b) RUNNING when
  // its coordinator shuts down; returns its id.
  std::string RunningWhenTheCoordinatorStops(const SubmitJobRequest& spec = Spec(2, 100),
                                             const std::vector<std::string>& names = {"a", "b"}) {
    auto c = Make();
    for (const std::string& n : names) AddWorker(c.get(), n);
    for (const std::string& n : names) Fake(n)->Hold(WorkerMethod::kRunSteps);
    const std::string job = c->SubmitJob(spec)->job_id();
    c->Tick();
    WaitForState(c.get(), job, RUNNING);
    c->Shutdown();
    return job;
  }

  // A worker of a job the previous coordinator ran registers with this one
  // holding the job (a fresh fake and script under the same name, at
  // `rank` of `world` at `step`); returns the answer.
  RegisterWorkerResponse Reregister(Coordinator* c, const std::string& name, const std::string& job,
                                    const std::string& previous_id, int attempt, int rank, int world, int64_t step,
                                    std::optional<RunStepsResponse> last_chunk = std::nullopt) {
    std::shared_ptr<Script> w = NewWorker(name);
    w->last_chunk = std::move(last_chunk);
    w->step = step;
    w->rank = rank;
    w->world = world;
    RegisterWorkerRequest r;
    r.set_host(name);
    r.set_address(name);
    r.set_held_job_id(job);
    r.set_previous_worker_id(previous_id);
    r.set_held_attempt(attempt);
    absl::StatusOr<RegisterWorkerResponse> response = c->RegisterWorker(r);
    EXPECT_THAT(response.status(), IsOk());
    return response.ok() ? *response : RegisterWorkerResponse();
  }
  std::shared_ptr<Script> Worker(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return workers_[name];
  }
  // How and when `name`'s calls complete.
  FakeWorker* Fake(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return fakes_.at(name).get();
  }
  std::vector<Goodput> Goodputs(const std::string& name) {
    auto w = Worker(name);
    std::lock_guard<std::mutex> lock(w->mu);
    return w->goodputs;
  }
  std::vector<std::string> Calls(const std::string& name) {
    auto w = Worker(name);
    std::lock_guard<std::mutex> lock(w->mu);
    return w->calls;
  }

  // Waits (10 s bound) for `name`'s held RunSteps call and takes it.
  std::unique_ptr<FakeWorker::HeldCall> HeldRun(const std::string& name) {
    std::unique_ptr<FakeWorker::HeldCall> held = Fake(name)->WaitForHeld(WorkerMethod::kRunSteps, absl::Seconds(10));
    if (held == nullptr) ADD_FAILURE() << name << "'s RunSteps was not held within 10 s";
    return held;
  }

  // An ELASTIC job on workers a, b, c (ids: theirs) with every rank held in
  // its second chunk (the calls, by name), then b silent past the 10 s
  // heartbeat timeout while a and c heartbeat: the coordinator takes b for
  // lost. Empty if a call was not held.
  std::map<std::string, std::unique_ptr<FakeWorker::HeldCall>> LoseBInTheSecondChunk(
      Coordinator* c, const std::vector<std::string>& ids) {
    std::map<std::string, std::unique_ptr<FakeWorker::HeldCall>> held;
    for (const char* n : {"a", "b", "c"}) Fake(n)->HoldCall(WorkerMethod::kRunSteps, 2);
    EXPECT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
    c->Tick();
    for (const char* n : {"a", "b", "c"}) {
      held[n] = HeldRun(n);
      if (held[n] == nullptr) return {};
    }
    EXPECT_EQ(Fake("a")->calls(WorkerMethod::kLeaveGroup), 0);  // before b is lost
    clock_.AdvanceTime(absl::Seconds(6));
    for (const std::string& w : {ids[0], ids[2]}) {
      HeartbeatRequest hb;
      hb.set_worker_id(w);
      hb.set_job_id("test-job-1");
      EXPECT_THAT(c->Heartbeat(hb).status(), IsOk());
    }
    clock_.AdvanceTime(absl::Seconds(5));  // b: 11 s of silence
    c->Tick();
    return held;
  }

  // The job's final state is published before its ranks are torn down:
  // waits (10 s bound) until `name` was told to abort.
  std::vector<std::string> CallsAfterAbort(const std::string& name) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::vector<std::string> calls = Calls(name);
    while ((calls.empty() || calls.back() != "abort") && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
      calls = Calls(name);
    }
    return calls;
  }

  static SubmitJobRequest Spec(int workers, int64_t steps) {
    SubmitJobRequest r;
    JobSpec* s = r.mutable_spec();
    s->set_name("test-job");
    s->mutable_model()->set_preset("tiny");
    s->set_task("digits_to_words");
    s->mutable_feature_lengths()->set_inputs(16);
    s->mutable_feature_lengths()->set_targets(32);
    s->set_batch_size(8);
    s->set_num_workers(workers);
    s->set_total_steps(steps);
    s->set_summary_period(20);
    s->set_output_dir("runs/x");
    return r;
  }

  // Spec's job on 3 workers with fault_tolerance ELASTIC (batch 12).
  static SubmitJobRequest ElasticSpec(int min_workers) {
    SubmitJobRequest r = Spec(3, 100);
    JobSpec* s = r.mutable_spec();
    s->set_batch_size(12);
    s->mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
    if (min_workers > 0) s->mutable_fault_tolerance()->set_min_workers(min_workers);
    return r;
  }

  // Polls until the job reaches `state` (10 s bound).
  JobInfo WaitForState(Coordinator* c, const std::string& id, JobState state) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    JobInfo info;
    while (absl::Now() < deadline) {
      info = *c->GetJob(id);
      if (info.state() == state) return info;
      absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << id << " is " << JobState_Name(info.state()) << " (" << info.reason() << "), wanted "
                  << JobState_Name(state);
    return info;
  }

  // `call` on a thread of its own; once it waits on the injected clock, the
  // clock moves past `wait`. The call's result (no real time slept).
  template <typename Call>
  auto AfterTimeout(absl::Duration wait, Call call) {
    decltype(call()) result = absl::UnknownError("not run");
    std::thread caller([&] { result = call(); });
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (clock_.num_waiters() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    clock_.AdvanceTime(wait + absl::Seconds(1));
    caller.join();
    return result;
  }

  std::string dir_;
  CoordinatorOptions options_;
  SimulatedClock clock_{absl::FromUnixSeconds(1000000)};
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Script>> workers_;
  std::map<std::string, std::shared_ptr<FakeWorker>> fakes_;
  // Every fake made, alive until the test ends (a name added again gets a
  // new one while the old one's clients may still be in use).
  std::vector<std::shared_ptr<FakeWorker>> all_fakes_;
};

TEST_F(CoordinatorTest, RunsAJobInChunksToTheBoundariesAndSucceeds) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  SubmitJobRequest request = Spec(2, 100);
  request.mutable_spec()->set_eval_period(50);
  request.mutable_spec()->set_checkpoint_period(30);
  request.add_overrides("seed=7");
  auto submitted = c->SubmitJob(request);
  ASSERT_THAT(submitted.status(), IsOk());
  EXPECT_EQ(submitted->job_id(), "test-job-1");
  EXPECT_EQ(submitted->normalized_spec().seed(), 7);
  EXPECT_EQ(submitted->normalized_spec().output_dir(), dir_ + "/runs/x");
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.step(), 100);
  EXPECT_DOUBLE_EQ(done.metrics().at("loss"), 1.0);
  EXPECT_DOUBLE_EQ(done.metrics().at("training_eval/digits_to_words/loss"), 10.0);
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_100");
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(done.ranks(1).host(), "b");
  EXPECT_EQ(done.ranks(1).last_step_seconds(), 0.25);
  EXPECT_EQ(done.ranks(1).last_compute_seconds(), 0.125);
  EXPECT_EQ(done.ranks(1).last_collective_seconds(), 0.0625);
  // Boundaries: summaries every 20, evals every 50, checkpoints every 30.
  const std::vector<std::string> want = {"start 0/2",      "run 0+20",       "run 20+10 ckpt", "run 30+10",
                                         "run 40+10",      "eval 50",        "run 50+10 ckpt", "run 60+20",
                                         "run 80+10 ckpt", "run 90+10 ckpt", "eval 100",       "abort"};
  EXPECT_EQ(CallsAfterAbort("a"), want);
  std::vector<std::string> want_b = want;
  want_b[0] = "start 1/2";
  EXPECT_EQ(CallsAfterAbort("b"), want_b);
}

TEST_F(CoordinatorTest, JobsQueueUntilAGangIsFreeAndRunOnDisjointGangs) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  const std::string b = AddWorker(c.get(), "b");
  const std::string d = AddWorker(c.get(), "d");
  Fake("a")->Hold(WorkerMethod::kRunSteps);
  Fake("b")->Hold(WorkerMethod::kRunSteps);
  const std::string first = c->SubmitJob(Spec(2, 10))->job_id();
  const std::string second = c->SubmitJob(Spec(2, 10))->job_id();
  const std::string third = c->SubmitJob(Spec(1, 10))->job_id();
  c->Tick();
  EXPECT_NE(c->GetJob(first)->state(), PENDING);
  // Second waits for 2 idle workers (1 is idle); third waits behind it.
  EXPECT_EQ(c->GetJob(second)->state(), PENDING);
  EXPECT_THAT(c->GetJob(second)->reason(), HasSubstr("waiting for 2 idle workers (1 idle of 3 registered)"));
  EXPECT_EQ(c->GetJob(third)->state(), PENDING);
  WaitForState(c.get(), first, RUNNING);
  // Cancel the first: its gang drains, comes back idle, the second starts.
  ASSERT_THAT(c->CancelJob(first, "").status(), IsOk());
  JobInfo cancelled = WaitForState(c.get(), first, CANCELLED);
  EXPECT_EQ(cancelled.reason(), "cancelled by the user");
  Fake("a")->StopHolding(WorkerMethod::kRunSteps);
  Fake("b")->StopHolding(WorkerMethod::kRunSteps);
  c->Tick();
  // a and b are busy or draining until they say they hold no job.
  EXPECT_EQ(c->GetJob(second)->state(), PENDING);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob(second)->state() == PENDING && absl::Now() < deadline) {
    for (const std::string& w : {a, b, d}) {
      HeartbeatRequest hb;
      hb.set_worker_id(w);
      ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
    }
    c->Tick();
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(c->workers()->Get(a)->job_id, second);
  EXPECT_NE(c->GetJob(second)->state(), PENDING);
  EXPECT_NE(c->GetJob(third)->state(), PENDING);
  WaitForState(c.get(), second, SUCCEEDED);
  WaitForState(c.get(), third, SUCCEEDED);
  EXPECT_EQ(Calls("d")[0], "start 0/1");
  EXPECT_THAT(c->CancelJob(second, "").status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(c->CancelJob("nope", "").status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

TEST_F(CoordinatorTest, AFailingRankFailsTheJobNamingItAndAbortsTheOthers) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  // The first chunk passes; in the second rank 1 fails, while rank 0 would
  // wait forever in its collective: the coordinator cancels its call.
  Fake("a")->HoldCall(WorkerMethod::kRunSteps, 2);
  Worker("b")->fail_step = 20;
  Worker("b")->fail_run_at_step = absl::InternalError("out of memory");
  const std::string id = c->SubmitJob(Spec(2, 100))->job_id();
  c->Start();
  // Rank 0's peers get 2 s (on the injected clock) to report before the
  // driver cancels what is still in flight.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (clock_.num_waiters() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  clock_.AdvanceTime(absl::Seconds(2));
  JobInfo failed = WaitForState(c.get(), id, FAILED);
  EXPECT_THAT(failed.reason(), HasSubstr("rank 1 (worker w2-b on host b, b): RunSteps failed: out of memory"));
  EXPECT_EQ(Fake("a")->calls(WorkerMethod::kRunSteps), 2);
  EXPECT_EQ(failed.step(), 20);
  EXPECT_EQ(CallsAfterAbort("a").back(), "abort");
  EXPECT_EQ(CallsAfterAbort("b").back(), "abort");
}

TEST_F(CoordinatorTest, ASilentWorkerFailsItsJobAfterTheHeartbeatTimeout) {
  options_.heartbeat_timeout = absl::Seconds(10);
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  Fake("a")->Hold(WorkerMethod::kRunSteps);
  Fake("b")->Hold(WorkerMethod::kRunSteps);
  SubmitJobRequest request = Spec(2, 100);
  request.mutable_spec()->set_max_restarts(0);
  const std::string id = c->SubmitJob(request)->job_id();
  c->Tick();
  WaitForState(c.get(), id, RUNNING);
  clock_.AdvanceTime(absl::Seconds(6));
  HeartbeatRequest hb;
  hb.set_worker_id(a);
  hb.set_job_id(id);
  ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
  clock_.AdvanceTime(absl::Seconds(5));  // b: 11 s of silence
  c->Tick();
  JobInfo failed = WaitForState(c.get(), id, FAILED);
  EXPECT_THAT(failed.reason(), HasSubstr("rank 1 (worker w2-b on host b, b) stopped heartbeating"));
  EXPECT_THAT(failed.reason(), HasSubstr("(no restarts left: max_restarts 0)"));
  EXPECT_EQ(c->workers()->List().size(), 1u);
  // The unknown worker is told to register again.
  hb.set_worker_id("w2-b");
  EXPECT_TRUE(c->Heartbeat(hb)->reregister());
}

TEST_F(CoordinatorTest, APreemptedJobRestartsFromItsEmergencyCheckpoint) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  const std::string b = AddWorker(c.get(), "b");
  // b gets SIGTERM during the second chunk: every rank stops after step 23.
  Worker("b")->preempt_step = 20;
  Worker("b")->asked_to_stop = true;
  Worker("a")->preempt_step = 20;
  const std::string id = c->SubmitJob(Spec(2, 60))->job_id();
  c->Start();
  // PREEMPTED, then RESTARTING, then running again on the (same, drained) gang.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob(id)->restarts() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  JobInfo restarting = *c->GetJob(id);
  EXPECT_EQ(restarting.restarts(), 1);
  EXPECT_THAT(restarting.reason(),
              HasSubstr("rank 1 (worker w2-b on host b, b) was asked to stop; emergency checkpoint at step 23: "
                        "ckpt_23; restart 1 of 3 from ckpt_23"));
  // The drained workers say they hold no job; the job gets its gang again.
  while (c->GetJob(id)->state() != SUCCEEDED && absl::Now() < deadline + absl::Seconds(10)) {
    for (const std::string& w : {a, b}) {
      HeartbeatRequest hb;
      hb.set_worker_id(w);
      ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  JobInfo done = *c->GetJob(id);
  EXPECT_EQ(done.state(), SUCCEEDED);
  EXPECT_EQ(done.step(), 60);
  EXPECT_EQ(done.restarts(), 1);
  std::lock_guard<std::mutex> lock(Worker("a")->mu);
  EXPECT_EQ(Worker("a")->restored, (std::vector<std::string>{"", "ckpt_23"}));
  EXPECT_THAT(c->CancelJob(id, "").status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
  // The resumed attempt starts at step 23 and runs to the next boundary.
  std::vector<std::string> calls = Worker("a")->calls;
  EXPECT_NE(std::find(calls.begin(), calls.end(), "run 23+17"), calls.end());
}

TEST_F(CoordinatorTest, APreemptionDuringEvaluationRestartsFromThatStep) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  const std::string b = AddWorker(c.get(), "b");
  Worker("a")->preempt_eval_step = 20;
  Worker("a")->asked_to_stop = true;
  Worker("b")->preempt_eval_step = 20;
  SubmitJobRequest request = Spec(2, 40);
  request.mutable_spec()->set_eval_period(20);
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob(id)->restarts() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_THAT(c->GetJob(id)->reason(),
              HasSubstr("rank 0 (worker w1-a on host a, a) was asked to stop; emergency checkpoint at step 20 "
                        "(during the evaluation of step 20, which is not repeated): ckpt_20; restart 1 of 3 from "
                        "ckpt_20"));
  while (c->GetJob(id)->state() != SUCCEEDED && absl::Now() < deadline + absl::Seconds(10)) {
    for (const std::string& w : {a, b}) {
      HeartbeatRequest hb;
      hb.set_worker_id(w);
      ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(c->GetJob(id)->state(), SUCCEEDED);
  std::lock_guard<std::mutex> lock(Worker("a")->mu);
  EXPECT_EQ(Worker("a")->restored, (std::vector<std::string>{"", "ckpt_20"}));
  // (The final teardown may still be on its way: SUCCEEDED is set first.)
  const std::vector<std::string>& calls = Worker("a")->calls;
  ASSERT_GE(calls.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(calls.begin(), calls.begin() + 7),
            (std::vector<std::string>{"start 0/2", "run 0+20", "eval 20", "abort", "start 0/2", "run 20+20 ckpt",
                                      "eval 40"}));
}

// An EVALUATION job with restore { mode: ALL wait_seconds: 5 } on two ranks.
SubmitJobRequest EveryCheckpointSpec() {
  SubmitJobRequest request;
  JobSpec* s = request.mutable_spec();
  s->set_name("every");
  s->mutable_model()->set_preset("tiny");
  s->set_task("digits_to_words");
  s->mutable_feature_lengths()->set_inputs(16);
  s->mutable_feature_lengths()->set_targets(16);
  s->set_batch_size(4);
  s->set_num_workers(2);
  s->set_kind(EVALUATION);
  s->set_output_dir("runs/every");
  s->mutable_restore()->set_mode(RestoreConfig::ALL);
  s->mutable_restore()->set_path("ckpts");
  s->mutable_restore()->set_wait_seconds(5);
  return request;
}

TEST_F(CoordinatorTest, AnEvaluationOfEveryCheckpointTakesEachOnceAndWaitsForNewOnes) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  for (const char* w : {"a", "b"}) {
    std::lock_guard<std::mutex> lock(Worker(w)->mu);
    Worker(w)->checkpoints = {20, 100};
  }
  const std::string id = c->SubmitJob(EveryCheckpointSpec())->job_id();
  c->Start();
  auto called = [&](const std::string& call) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      std::vector<std::string> calls = Calls("a");
      if (std::find(calls.begin(), calls.end(), call) != calls.end() && clock_.num_waiters() > 0) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    ADD_FAILURE() << "no " << call << " followed by a wait within 10 s";
    return false;
  };
  // Both there are evaluated; then the driver waits on the injected clock
  // (no time passes: it looked once).
  ASSERT_TRUE(called("infer after 100: -1"));
  EXPECT_EQ(c->GetJob(id)->state(), RUNNING);
  EXPECT_EQ(c->GetJob(id)->metrics_step(), 100);
  // A checkpoint saved meanwhile: the next look, a second later, takes it.
  for (const char* w : {"a", "b"}) {
    std::lock_guard<std::mutex> lock(Worker(w)->mu);
    Worker(w)->checkpoints.push_back(1000);
  }
  clock_.AdvanceTime(absl::Seconds(1));
  ASSERT_TRUE(called("infer after 1000: -1"));
  EXPECT_EQ(c->GetJob(id)->state(), RUNNING);
  // None more for wait_seconds: the job ends.
  clock_.AdvanceTime(absl::Seconds(5));
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  EXPECT_EQ(done.reason(),
            "3 checkpoint(s) of ckpts evaluated: steps 20, 100, 1000; 20 example(s) decoded each; the last "
            "predictions in out/inference/t-validation-1000.jsonl");
  EXPECT_EQ(done.metrics_step(), 1000);
  EXPECT_EQ(done.metrics().at("t/exact_match"), 75.0);
  // Every rank was asked for each checkpoint once, in order.
  for (const char* w : {"a", "b"}) {
    std::vector<std::string> found;
    for (const std::string& call : CallsAfterAbort(w)) {
      if (absl::StartsWith(call, "infer") && !absl::EndsWith(call, ": -1")) found.push_back(call);
    }
    EXPECT_EQ(found, (std::vector<std::string>{"infer after -1: 20", "infer after 20: 100", "infer after 100: 1000"}))
        << w;
  }
}

TEST_F(CoordinatorTest, ACancelEndsTheWaitForCheckpointsAtOnce) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  for (const char* w : {"a", "b"}) {
    std::lock_guard<std::mutex> lock(Worker(w)->mu);
    Worker(w)->checkpoints = {20};
  }
  SubmitJobRequest request = EveryCheckpointSpec();
  request.mutable_spec()->mutable_restore()->set_wait_seconds(3600);
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (clock_.num_waiters() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_GT(clock_.num_waiters(), 0);
  // The injected clock stands still: only the cancel can end the wait.
  ASSERT_THAT(c->CancelJob(id, "").status(), IsOk());
  JobInfo done = WaitForState(c.get(), id, CANCELLED);
  EXPECT_EQ(done.reason(), "cancelled by the user");
  EXPECT_EQ(CallsAfterAbort("a").back(), "abort");
}

TEST_F(CoordinatorTest, AnEvaluationOfEveryCheckpointThatFindsNoneFails) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  for (const char* w : {"a", "b"}) {
    std::lock_guard<std::mutex> lock(Worker(w)->mu);
    Worker(w)->checkpoints = {-5};  // nothing above -1: none to find
  }
  SubmitJobRequest request = EveryCheckpointSpec();
  request.mutable_spec()->mutable_restore()->set_wait_seconds(0);
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  JobInfo done = WaitForState(c.get(), id, FAILED);
  EXPECT_EQ(done.reason(), "FAILED_PRECONDITION: restore: no checkpoint to evaluate was found under ckpts (mode ALL)");
}

TEST_F(CoordinatorTest, CancellingARestartingJobEndsItWithoutAnotherAttempt) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  const std::string b = AddWorker(c.get(), "b");
  Worker("a")->preempt_step = 20;
  Worker("b")->preempt_step = 20;
  Worker("b")->asked_to_stop = true;
  const std::string id = c->SubmitJob(Spec(2, 60))->job_id();
  c->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob(id)->state() != RESTARTING && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(c->GetJob(id)->state(), RESTARTING);
  absl::StatusOr<JobInfo> cancelled = c->CancelJob(id, "");
  ASSERT_THAT(cancelled.status(), IsOk());
  EXPECT_EQ(cancelled->state(), CANCELLED);
  EXPECT_EQ(cancelled->reason(), "cancelled by the user");
  // The drained workers come back; nothing starts the job again.
  for (int i = 0; i < 50; ++i) {
    for (const std::string& w : {a, b}) {
      HeartbeatRequest hb;
      hb.set_worker_id(w);
      ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(c->GetJob(id)->state(), CANCELLED);
  std::lock_guard<std::mutex> lock(Worker("b")->mu);
  EXPECT_EQ(std::count(Worker("b")->calls.begin(), Worker("b")->calls.end(), "start 1/2"), 1);
}

TEST_F(CoordinatorTest, AnEvaluationJobRunsInferOnEveryRank) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  SubmitJobRequest request = Spec(2, 1);
  request.mutable_spec()->set_kind(EVALUATION);
  request.mutable_spec()->mutable_restore()->set_mode(RestoreConfig::SPECIFIC);
  request.mutable_spec()->mutable_restore()->set_path("ckpt_40");
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob(id)->state() != SUCCEEDED && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  JobInfo done = *c->GetJob(id);
  EXPECT_EQ(done.state(), SUCCEEDED);
  EXPECT_EQ(done.reason(), "20 example(s) decoded; predictions in out/inference/t-validation.jsonl");
  EXPECT_EQ(done.metrics().at("t/exact_match"), 75.0);
  std::lock_guard<std::mutex> lock(Worker("b")->mu);
  EXPECT_EQ(std::vector<std::string>(Worker("b")->calls.begin(), Worker("b")->calls.begin() + 2),
            (std::vector<std::string>{"start 1/2", "infer"}));
}

TEST_F(CoordinatorTest, SessionsHoldAWorkerUntilClosedOrIdle) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  OpenSessionRequest open;
  EXPECT_THAT(c->OpenSession(open).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint: required")));
  open.set_wait_seconds(601);
  open.set_checkpoint("ckpt_7");
  EXPECT_THAT(c->OpenSession(open).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("wait_seconds: 601; allowed 1..600")));
  open.set_wait_seconds(1);
  open.set_checkpoint("bad");
  EXPECT_THAT(c->OpenSession(open).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("opening the session: worker w1-a: bad:")));
  // The failed open gave the worker back (draining until its heartbeat).
  HeartbeatRequest hb;
  hb.set_worker_id(a);
  ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
  open.set_checkpoint("ckpt_7");
  open.set_idle_timeout_seconds(60);
  open.set_wait_seconds(1);
  absl::StatusOr<OpenSessionResponse> s = c->OpenSession(open);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_EQ(s->worker_id(), a);
  EXPECT_EQ(s->step(), 7);
  // The worker is taken: a second session waits, then gives up.
  EXPECT_THAT(AfterTimeout(absl::Seconds(1), [&] { return c->OpenSession(open); }).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no 1 idle worker(s) for a session within 1 s")));
  SessionRequest run;
  run.set_session_id(s->session_id());
  run.set_op(SessionRequest::PREDICT);
  run.add_examples()->set_input("12");
  absl::StatusOr<SessionResponse> r = c->RunSession(run);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->predictions(0), "p0:12");
  // Idle for longer than its timeout: closed by the scheduler.
  clock_.AdvanceTime(absl::Seconds(61));
  hb.set_job_id(s->session_id());
  ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
  c->Tick();
  EXPECT_THAT(c->RunSession(run).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("closed, idle for more than 1m")));
  EXPECT_THAT(c->CloseSession(s->session_id()), StatusCodeIs(absl::StatusCode::kNotFound));
  // Once the worker says it let go, it serves the next session.
  hb.set_job_id("");
  ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
  s = c->OpenSession(open);
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_THAT(c->CloseSession(s->session_id()), IsOk());
  c->Shutdown();  // joins the closers
  std::lock_guard<std::mutex> lock(Worker("a")->mu);
  // The failed open, the idle timeout, the close.
  EXPECT_EQ(std::count(Worker("a")->calls.begin(), Worker("a")->calls.end(), "abort"), 3);
}

// A JobDriverHost says what an ELASTIC attempt gets: no default that
// silently gives it nothing.
class ProgressOnlyHost : public JobDriverHost {
 public:
  void RecordProgress(const std::string&, const std::function<void(JobInfo*)>&) override {}
  Goodput GoodputNow(const std::string&) override { return Goodput(); }
  void ChangeState(const std::string&, JobState, const std::string&, const std::function<void(JobInfo*)>&) override {}
};
static_assert(
    std::is_abstract_v<ProgressOnlyHost>,
    "JobDriverHost::AcquireWorkers, SetRanks, ReleaseWorkers and CloseRendezvous must be implemented by every host");

TEST_F(CoordinatorTest, ASessionWaitsInTheQueueBehindOlderJobs) {
  auto c = Make();
  AddWorker(c.get(), "a");
  // A job that needs two workers heads the queue with one registered ...
  absl::StatusOr<SubmitJobResponse> job = c->SubmitJob(Spec(2, 40));
  ASSERT_THAT(job.status(), IsOk());
  c->Tick();
  EXPECT_EQ(c->GetJob(job->job_id())->state(), PENDING);
  // ... so a session asking for the idle one waits behind it, as a job
  // would, and gives up after its wait.
  OpenSessionRequest open;
  open.set_checkpoint("ckpt_7");
  open.set_wait_seconds(1);
  EXPECT_THAT(AfterTimeout(absl::Seconds(1), [&] { return c->OpenSession(open); }).status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("no 1 idle worker(s) for a session within 1 s (jobs submitted before it are served "
                                 "first)")));
  EXPECT_TRUE(Calls("a").empty());  // the session never took it
  AddWorker(c.get(), "b");
  c->Tick();
  WaitForState(c.get(), job->job_id(), SUCCEEDED);
}

TEST_F(CoordinatorTest, ASessionBlamesTheRankAJobWould) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  OpenSessionRequest open;
  open.set_checkpoint("ckpt_7");
  open.set_wait_seconds(1);
  open.set_batch_size(2);
  open.set_num_workers(2);
  absl::StatusOr<OpenSessionResponse> s = c->OpenSession(open);
  ASSERT_THAT(s.status(), IsOk());
  SessionRequest run;
  run.set_session_id(s->session_id());
  run.set_op(SessionRequest::PREDICT);
  run.add_examples()->set_input("split");
  // Rank 0's own error and rank 1's vanished worker: rank 1 caused it
  // (rank_blame.h), as in a job, not the first rank that failed.
  EXPECT_THAT(c->RunSession(run).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 (worker w2-b): rank 1 is gone")));
}

TEST_F(CoordinatorTest, ACoordinatorRemembersOnlyRecentClosedSessions) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  OpenSessionRequest open;
  open.set_checkpoint("ckpt_7");
  open.set_wait_seconds(5);
  HeartbeatRequest hb;
  hb.set_worker_id(a);
  std::vector<std::string> ids;
  for (size_t i = 0; i < SessionManager::kClosedKept + 2; ++i) {
    absl::StatusOr<OpenSessionResponse> s = c->OpenSession(open);
    ASSERT_THAT(s.status(), IsOk()) << "session " << i;
    ids.push_back(s->session_id());
    ASSERT_THAT(c->CloseSession(s->session_id()), IsOk());
    ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());  // the worker let go
  }
  SessionRequest run;
  run.set_op(SessionRequest::PREDICT);
  run.set_session_id(ids.back());
  EXPECT_THAT(c->RunSession(run).status(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("closed, by its client")));
  // The oldest two were forgotten: unknown, not "closed".
  run.set_session_id(ids[1]);
  EXPECT_THAT(c->RunSession(run).status(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("no session '")));
  EXPECT_THAT(c->RunSession(run).status(), Not(StatusIs(absl::StatusCode::kNotFound, HasSubstr("closed"))));
  run.set_session_id(ids[2]);
  EXPECT_THAT(c->RunSession(run).status(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("closed, by its client")));
}

TEST_F(CoordinatorTest, ADataParallelSessionRunsOnEveryWorker) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  const std::string b = AddWorker(c.get(), "b");
  OpenSessionRequest open;
  open.set_checkpoint("ckpt_7");
  open.set_wait_seconds(1);
  open.set_batch_size(3);
  open.set_num_workers(2);
  EXPECT_THAT(c->OpenSession(open).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                      HasSubstr("batch_size: 3 is not a multiple of num_workers 2")));
  open.set_batch_size(4);
  open.set_num_workers(3);
  EXPECT_THAT(c->OpenSession(open).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a multiple of num_workers 3")));
  open.set_batch_size(6);
  EXPECT_THAT(AfterTimeout(absl::Seconds(1), [&] { return c->OpenSession(open); }).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no 3 idle worker(s) for a session within 1 s")));
  // One rank fails to open: the root cause is reported, not its peer's
  // kAborted, and both workers are given back.
  open.set_num_workers(2);
  open.set_checkpoint("bad-on-rank-1");
  EXPECT_THAT(c->OpenSession(open).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("opening the session: rank 1 (worker ")));
  for (const std::string& w : {a, b}) {
    HeartbeatRequest hb;
    hb.set_worker_id(w);
    ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
  }
  open.set_checkpoint("ckpt_7");
  absl::StatusOr<OpenSessionResponse> s = c->OpenSession(open);
  ASSERT_THAT(s.status(), IsOk());
  ASSERT_EQ(s->worker_ids_size(), 2);
  EXPECT_EQ(s->worker_id(), s->worker_ids(0));
  EXPECT_NE(s->worker_ids(0), s->worker_ids(1));
  SessionRequest run;
  run.set_session_id(s->session_id());
  run.set_op(SessionRequest::PREDICT);
  run.add_examples()->set_input("12");
  absl::StatusOr<SessionResponse> r = c->RunSession(run);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->predictions(0), "p0:12");  // rank 0's answer
  for (const char* w : {"a", "b"}) {
    std::lock_guard<std::mutex> lock(Worker(w)->mu);
    EXPECT_EQ(std::count(Worker(w)->calls.begin(), Worker(w)->calls.end(), "session PREDICT"), 1) << w;
  }
  // Refused alike by every rank: the session stays open.
  run.mutable_examples(0)->set_input("refused");
  EXPECT_THAT(c->RunSession(run).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("refused")));
  run.mutable_examples(0)->set_input("12");
  ASSERT_THAT(c->RunSession(run).status(), IsOk());
  // One rank fails: the group is broken and the session closes.
  run.mutable_examples(0)->set_input("crash");
  EXPECT_THAT(c->RunSession(run).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 is gone; the session is closed")));
  EXPECT_THAT(c->RunSession(run).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("closed, a worker failed: rank 1 (worker")));
  c->Shutdown();
  for (const char* w : {"a", "b"}) {
    std::lock_guard<std::mutex> lock(Worker(w)->mu);
    EXPECT_EQ(std::count(Worker(w)->calls.begin(), Worker(w)->calls.end(),
                         "open ckpt_7 " + std::to_string(Worker(w)->rank) + "/2"),
              1)
        << w;
    EXPECT_EQ(std::count(Worker(w)->calls.begin(), Worker(w)->calls.end(), "abort"), 2) << w;
  }
}

TEST_F(CoordinatorTest, TerminateOnNanFailsTheJobWithoutACheckpoint) {
  auto c = Make();
  AddWorker(c.get(), "a");
  Worker("a")->nan_loss = true;
  SubmitJobRequest request = Spec(1, 100);
  ActionConfig* nan = request.mutable_spec()->add_actions();
  nan->set_on(ACTION_TRAIN);
  nan->mutable_terminate_on_nan()->set_task("train");
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  JobInfo failed = WaitForState(c.get(), id, FAILED);
  EXPECT_EQ(failed.step(), 20);
  EXPECT_EQ(failed.reason(), "train/loss is nan at step 20");
  // A diverged state is not saved.
  EXPECT_EQ(failed.latest_checkpoint(), "");
  EXPECT_EQ(CallsAfterAbort("a"), (std::vector<std::string>{"start 0/1", "run 0+20", "abort"}));
}

// An ACTION_TRAIN_EVAL early stopping with patience `patience` on
// digits_to_words/`metric`.
void AddEarlyStopping(JobSpec* spec, const std::string& metric, EarlyStopping::Mode mode, int patience) {
  ActionConfig* action = spec->add_actions();
  action->set_on(ACTION_TRAIN_EVAL);
  action->mutable_early_stopping()->set_task("digits_to_words");
  action->mutable_early_stopping()->set_metric(metric);
  action->mutable_early_stopping()->set_mode(mode);
  action->mutable_early_stopping()->set_patience(patience);
}

// Evaluate's answer: digits_to_words/loss and /accuracy.
EvaluateResponse Evaluated(double loss, double accuracy) {
  EvaluateResponse response;
  (*response.mutable_metrics())["digits_to_words/loss"] = loss;
  (*response.mutable_metrics())["digits_to_words/accuracy"] = accuracy;
  return response;
}

TEST_F(CoordinatorTest, AnEarlyStoppedJobWritesACheckpointAtItsStoppingStep) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  SubmitJobRequest request = Spec(2, 100);
  request.mutable_spec()->set_eval_period(20);  // checkpoint_period 0: only the final checkpoint
  AddEarlyStopping(request.mutable_spec(), "loss", EarlyStopping::MIN, 1);
  // The eval loss improves at 40, not at 60: the job stops there.
  for (const char* w : {"a", "b"}) {
    Worker(w)->evaluate_at = {{20, Evaluated(5, 0)}, {40, Evaluated(4, 0)}, {60, Evaluated(4.5, 0)}};
  }
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  EXPECT_EQ(done.step(), 60);
  EXPECT_EQ(done.reason(), "early stopping at step 60: digits_to_words/loss has not improved on 4 for 1 evaluations");
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_60");
  // Every rank writes step 60's checkpoint before the job's teardown.
  std::vector<std::string> want = {"start 0/2", "run 0+20", "eval 20",      "run 20+20", "eval 40",
                                   "run 40+20", "eval 60",  "save 60 wait", "abort"};
  EXPECT_EQ(CallsAfterAbort("a"), want);
  want[0] = "start 1/2";
  EXPECT_EQ(CallsAfterAbort("b"), want);
}

TEST_F(CoordinatorTest, AnEarlyStopAtASynchronousCheckpointIsNotSavedTwice) {
  auto c = Make();
  AddWorker(c.get(), "a");
  SubmitJobRequest request = Spec(1, 100);
  request.mutable_spec()->set_eval_period(20);
  request.mutable_spec()->set_checkpoint_period(60);
  request.mutable_spec()->mutable_checkpoint()->set_async(false);
  AddEarlyStopping(request.mutable_spec(), "loss", EarlyStopping::MIN, 1);
  Worker("a")->evaluate_at = {{20, Evaluated(5, 0)}, {40, Evaluated(4, 0)}, {60, Evaluated(4.5, 0)}};
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_60");
  EXPECT_EQ(CallsAfterAbort("a"), (std::vector<std::string>{"start 0/1", "run 0+20", "eval 20", "run 20+20", "eval 40",
                                                            "run 40+20 ckpt", "eval 60", "abort"}));
}

TEST_F(CoordinatorTest, EveryActionOfTheModeRunsAndTheReasonNamesEachThatHalted) {
  auto c = Make();
  AddWorker(c.get(), "a");
  SubmitJobRequest request = Spec(1, 100);
  request.mutable_spec()->set_eval_period(20);
  AddEarlyStopping(request.mutable_spec(), "loss", EarlyStopping::MIN, 1);
  AddEarlyStopping(request.mutable_spec(), "accuracy", EarlyStopping::MAX, 2);
  // The loss stalls at 60 only; the accuracy at 40 and 60, so both halt at
  // 60 (the second counting its own stalls).
  Worker("a")->evaluate_at = {{20, Evaluated(5, 0.6)}, {40, Evaluated(4, 0.55)}, {60, Evaluated(4.5, 0.5)}};
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  EXPECT_EQ(done.step(), 60);
  EXPECT_EQ(done.reason(),
            "early stopping at step 60: digits_to_words/loss has not improved on 4 for 1 evaluations; "
            "early stopping at step 60: digits_to_words/accuracy has not improved on 0.6 for 2 evaluations");
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_60");
}

TEST_F(CoordinatorTest, AnEvaluationRunsTheTrainEvalAndTheInferEvalActions) {
  auto c = Make();
  AddWorker(c.get(), "a");
  SubmitJobRequest request = Spec(1, 100);
  request.mutable_spec()->set_eval_period(20);
  request.mutable_spec()->mutable_eval()->set_infer_metrics(true);
  AddEarlyStopping(request.mutable_spec(), "loss", EarlyStopping::MIN, 1);
  ActionConfig* infer = request.mutable_spec()->add_actions();
  infer->set_on(ACTION_INFER_EVAL);
  infer->mutable_early_stopping()->set_task("digits_to_words");
  infer->mutable_early_stopping()->set_metric("exact_match");
  infer->mutable_early_stopping()->set_mode(EarlyStopping::MAX);
  infer->mutable_early_stopping()->set_patience(1);
  // Both stall at 40.
  Worker("a")->evaluate_at = {{20, Evaluated(5, 0)}, {40, Evaluated(6, 0)}};
  (*Worker("a")->evaluate_at[20].mutable_infer_metrics())["digits_to_words/exact_match"] = 50;
  (*Worker("a")->evaluate_at[40].mutable_infer_metrics())["digits_to_words/exact_match"] = 40;
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  EXPECT_EQ(done.step(), 40);
  EXPECT_EQ(done.reason(),
            "early stopping at step 40: digits_to_words/loss has not improved on 5 for 1 evaluations; "
            "early stopping at step 40: digits_to_words/exact_match has not improved on 50 for 1 evaluations");
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_40");
}

TEST_F(CoordinatorTest, BadSpecsAreRefusedListingTheFields) {
  auto c = Make();
  SubmitJobRequest request = Spec(1, 10);
  request.mutable_spec()->set_batch_size(-1);
  request.mutable_spec()->set_output_dir("../escape");
  auto r = c->SubmitJob(request);
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size")));
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output_dir")));
  request = Spec(1, 10);
  request.add_overrides("no_such_field=1");
  EXPECT_THAT(c->SubmitJob(request).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(c->ListJobs({})->jobs_size(), 0);
}

TEST_F(CoordinatorTest, ARestartedCoordinatorKnowsEveryJob) {
  std::string running, pending, done;
  {
    auto c = Make();
    AddWorker(c.get(), "a");
    Fake("a")->Hold(WorkerMethod::kRunSteps);
    done = c->SubmitJob(Spec(1, 10))->job_id();
    ASSERT_THAT(c->CancelJob(done, "not needed").status(), IsOk());
    running = c->SubmitJob(Spec(1, 10))->job_id();
    pending = c->SubmitJob(Spec(1, 10))->job_id();
    c->Tick();
    WaitForState(c.get(), running, RUNNING);
    c->Shutdown();
  }
  auto c = Make();
  ListJobsResponse all = *c->ListJobs({});
  ASSERT_EQ(all.jobs_size(), 3);
  EXPECT_EQ(all.jobs(0).job_id(), pending);  // newest first
  EXPECT_EQ(c->GetJob(pending)->state(), PENDING);
  EXPECT_EQ(c->GetJob(done)->state(), CANCELLED);
  EXPECT_EQ(c->GetJob(done)->reason(), "cancelled: not needed");
  // The running job waits for its rank to come back; when it does not,
  // the job resumes on a new gang (from its newest checkpoint).
  EXPECT_EQ(c->GetJob(running)->state(), RUNNING);
  EXPECT_EQ(c->GetJob(running)->reason(),
            "the coordinator restarted; waiting up to 30s for the 1 rank(s) of attempt 0 to come back");
  clock_.AdvanceTime(absl::Seconds(30));
  c->Tick();
  EXPECT_EQ(c->GetJob(running)->state(), RESTARTING);
  EXPECT_EQ(c->GetJob(running)->restarts(), 1);
  EXPECT_EQ(c->GetJob(running)->reason(),
            "the coordinator restarted while the job was RUNNING and 1 of its 1 rank(s) did not come back within 30s "
            "(rank 0 (worker w1-a on host a, a)); restart 1 of 3 from scratch");
  // New ids continue after the old ones.
  EXPECT_EQ(c->SubmitJob(Spec(1, 10))->job_id(), "test-job-4");
  ListJobsRequest only_pending;
  only_pending.add_states(PENDING);
  EXPECT_EQ(c->ListJobs(only_pending)->jobs_size(), 2);
}

TEST_F(CoordinatorTest, ARestartedCoordinatorAdoptsTheRunningJobWhenItsRanksComeBack) {
  const std::string job = RunningWhenTheCoordinatorStops();
  // The ranks were left running (not told to abort).
  EXPECT_EQ(Calls("a"), (std::vector<std::string>{"start 0/2"}));
  clock_.AdvanceTime(absl::Seconds(12));  // the outage
  auto c = Make();
  EXPECT_EQ(c->GetJob(job)->state(), RUNNING);
  // The ranks finished the chunk 0+20 meanwhile; its answer never arrived.
  // A worker holding another attempt, or naming an id the record does not
  // have, is not adopted.
  EXPECT_FALSE(Reregister(c.get(), "x", job, "w1-a", 1, 0, 2, 20).keep_held_job());
  EXPECT_FALSE(Reregister(c.get(), "y", job, "w9-y", 0, 0, 2, 20).keep_held_job());
  RunStepsResponse chunk;
  chunk.set_last_step(20);
  (*chunk.mutable_metrics())["loss"] = 5;
  chunk.set_seconds_per_step(0.25);
  EXPECT_TRUE(Reregister(c.get(), "b", job, "w2-b", 0, 1, 2, 20, chunk).keep_held_job());
  EXPECT_EQ(c->GetJob(job)->ranks(1).worker_id(), "w3-b");  // the record names the new id at once
  EXPECT_EQ(c->GetJob(job)->state(), RUNNING);
  // Rank 0 comes back last: the attempt is adopted.
  EXPECT_TRUE(Reregister(c.get(), "a", job, "w1-a", 0, 0, 2, 20, chunk).keep_held_job());
  const JobInfo done = WaitForState(c.get(), job, SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.step(), 100);
  EXPECT_EQ(CallsAfterAbort("a"), (std::vector<std::string>{"adopt attempt 0", "run 20+20", "run 40+20", "run 60+20",
                                                            "run 80+20 ckpt", "abort"}));
  EXPECT_EQ(CallsAfterAbort("b")[0], "adopt attempt 0");
  // The 20 steps trained during the outage are productive; the rest of the
  // 12 s outage is recovery.
  EXPECT_DOUBLE_EQ(done.goodput().productive_seconds(), 5.0);
  EXPECT_NEAR(done.goodput().recovery_seconds(), 7.0, 1e-3);
}

TEST_F(CoordinatorTest, AJobWhoseRanksDoNotAllComeBackRestartsAndTheOnesBackLetGo) {
  const std::string job = RunningWhenTheCoordinatorStops();
  auto c = Make();
  EXPECT_TRUE(Reregister(c.get(), "a", job, "w1-a", 0, 0, 2, 20).keep_held_job());
  HeartbeatRequest beat;
  beat.set_worker_id("w1-a");  // this coordinator's id for it (no instance part in these tests)
  beat.set_job_id(job);
  for (int i = 0; i < 29; ++i) {
    clock_.AdvanceTime(absl::Seconds(1));
    ASSERT_FALSE(c->Heartbeat(beat)->reregister());
    c->Tick();
  }
  EXPECT_EQ(c->GetJob(job)->state(), RUNNING);
  clock_.AdvanceTime(absl::Seconds(1));
  c->Tick();
  const JobInfo info = *c->GetJob(job);
  EXPECT_EQ(info.state(), RESTARTING);
  EXPECT_EQ(info.restarts(), 1);
  EXPECT_EQ(info.reason(),
            "the coordinator restarted while the job was RUNNING and 1 of its 2 rank(s) did not come back within 30s "
            "(rank 1 (worker w2-b on host b, b)); restart 1 of 3 from scratch");
  EXPECT_EQ(CallsAfterAbort("a"), (std::vector<std::string>{"abort"}));
  // It drains: a new gang only once it reports it let go.
  EXPECT_EQ(c->workers()->Get("w1-a")->state, WorkerRecord::State::kDraining);
}

// ELASTIC: the ranks back within the heartbeat timeout (10 s here, under
// the 30 s adopt_grace) are adopted then without the one that is not, and
// regroup (no restart, no step lost).
TEST_F(CoordinatorTest, ARestartedCoordinatorAdoptsTheElasticRanksThatCameBackAndRegroupsThem) {
  const std::string job = RunningWhenTheCoordinatorStops(ElasticSpec(0), {"a", "b", "c"});
  auto c = Make();
  EXPECT_TRUE(Reregister(c.get(), "a", job, "w1-a", 0, 0, 3, 20).keep_held_job());
  EXPECT_TRUE(Reregister(c.get(), "c", job, "w3-c", 0, 2, 3, 20).keep_held_job());
  for (int i = 0; i < 10; ++i) {
    EXPECT_THAT(c->GetJob(job)->reason(), HasSubstr("the coordinator restarted; waiting up to 30s")) << i << " s";
    clock_.AdvanceTime(absl::Seconds(1));
    for (const char* id : {"w1-a", "w2-c"}) {
      HeartbeatRequest beat;
      beat.set_worker_id(id);
      beat.set_job_id(job);
      ASSERT_FALSE(c->Heartbeat(beat)->reregister());
    }
    c->Tick();
  }
  EXPECT_THAT(c->GetJob(job)->reason(),
              HasSubstr("adopting 2 of its 3 rank(s) after a coordinator restart; the coordinator restarted while the "
                        "job was RUNNING and 1 of its 3 rank(s) did not come back within 10s (rank 1 (worker w2-b on "
                        "host b, b))"));
  const JobInfo done = WaitForState(c.get(), job, SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(done.step(), 100);
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(done.ranks(1).host(), "c");
  EXPECT_EQ(CallsAfterAbort("c"), (std::vector<std::string>{"adopt attempt 0", "regroup 1/2 g1", "run 20+20",
                                                            "run 40+20", "run 60+20", "run 80+20 ckpt", "abort"}));
}

// ELASTIC: a rank lost after it registered again, before its Adopt (its
// worker killed right after the coordinator came back), is left out; the
// others are adopted and regroup, no restart.
TEST_F(CoordinatorTest, ElasticAdoptsTheOtherRanksWhenOneIsLostDuringTheAdoption) {
  const std::string job = RunningWhenTheCoordinatorStops(ElasticSpec(0), {"a", "b", "c"});
  auto c = Make();
  EXPECT_TRUE(Reregister(c.get(), "a", job, "w1-a", 0, 0, 3, 20).keep_held_job());
  EXPECT_TRUE(Reregister(c.get(), "b", job, "w2-b", 0, 1, 3, 20).keep_held_job());
  {
    std::lock_guard<std::mutex> lock(Worker("b")->mu);
    Worker("b")->fail_adopt = absl::UnavailableError("failed to connect to all addresses");
  }
  EXPECT_TRUE(Reregister(c.get(), "c", job, "w3-c", 0, 2, 3, 20).keep_held_job());
  const JobInfo done = WaitForState(c.get(), job, SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(done.ranks(0).host(), "a");
  EXPECT_EQ(done.ranks(1).host(), "c");
  EXPECT_EQ(CallsAfterAbort("c")[0], "adopt attempt 0");
  EXPECT_EQ(CallsAfterAbort("c")[1], "regroup 1/2 g1");
  EXPECT_EQ(CallsAfterAbort("c")[2], "run 20+20");
  EXPECT_EQ(CallsAfterAbort("b")[0], "adopt attempt 0");
  EXPECT_EQ(CallsAfterAbort("b")[1], "abort");
}

// A rank that left its group (its chunk failed on a peer lost while no
// coordinator listened) is adopted out of it, and the ranks regroup.
TEST_F(CoordinatorTest, ElasticRanksAtDifferentStepsOrOutOfTheirGroupAreAdoptedAndRegroup) {
  SubmitJobRequest spec = ElasticSpec(0);
  spec.mutable_spec()->set_num_workers(2);
  const std::string job = RunningWhenTheCoordinatorStops(spec, {"a", "b"});
  auto c = Make();
  EXPECT_TRUE(Reregister(c.get(), "a", job, "w1-a", 0, 0, 2, 20).keep_held_job());
  Worker("a")->left_group = true;
  EXPECT_TRUE(Reregister(c.get(), "b", job, "w2-b", 0, 1, 2, 20).keep_held_job());
  const JobInfo done = WaitForState(c.get(), job, SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(CallsAfterAbort("b"), (std::vector<std::string>{"adopt attempt 0", "regroup 1/2 g1", "run 20+20",
                                                            "run 40+20", "run 60+20", "run 80+20 ckpt", "abort"}));
}

TEST_F(CoordinatorTest, WaitForChangeWakesOnChangesAndTimesOut) {
  auto c = Make();
  const std::string id = c->SubmitJob(Spec(1, 10))->job_id();
  int64_t version = 0;
  ASSERT_THAT(c->WaitForChange(id, &version, absl::Seconds(1)).status(), IsOk());
  const int64_t first = version;
  const absl::Time start = absl::Now();
  ASSERT_THAT(c->WaitForChange(id, &version, absl::Milliseconds(50)).status(), IsOk());
  EXPECT_EQ(version, first);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  ASSERT_THAT(c->CancelJob(id, "").status(), IsOk());
  auto info = c->WaitForChange(id, &version, absl::Seconds(10));
  EXPECT_GT(version, first);
  EXPECT_EQ(info->state(), CANCELLED);
  EXPECT_THAT(c->WaitForChange("nope", &version, absl::Seconds(1)).status(), StatusCodeIs(absl::StatusCode::kNotFound));
}

TEST_F(CoordinatorTest, ListJobsPagesNewestFirst) {
  auto c = Make();
  for (int i = 0; i < 7; ++i) ASSERT_THAT(c->SubmitJob(Spec(1, 10)).status(), IsOk());
  ASSERT_THAT(c->CancelJob("test-job-2", "").status(), IsOk());
  ASSERT_THAT(c->CancelJob("test-job-5", "").status(), IsOk());
  std::vector<std::string> seen;
  ListJobsRequest request;
  request.set_page_size(3);
  std::vector<int> page_sizes;
  while (true) {
    absl::StatusOr<ListJobsResponse> page = c->ListJobs(request);
    ASSERT_THAT(page.status(), IsOk());
    page_sizes.push_back(page->jobs_size());
    for (const JobInfo& j : page->jobs()) seen.push_back(j.job_id());
    if (page->next_page_token().empty()) break;
    request.set_page_token(page->next_page_token());
  }
  EXPECT_EQ(page_sizes, (std::vector<int>{3, 3, 1}));
  EXPECT_EQ(seen, (std::vector<std::string>{"test-job-7", "test-job-6", "test-job-5", "test-job-4", "test-job-3",
                                            "test-job-2", "test-job-1"}));
  // A filter pages over the matching jobs only; a full last page has no
  // next token.
  ListJobsRequest cancelled;
  cancelled.add_states(CANCELLED);
  cancelled.set_page_size(1);
  absl::StatusOr<ListJobsResponse> first = c->ListJobs(cancelled);
  ASSERT_THAT(first.status(), IsOk());
  ASSERT_EQ(first->jobs_size(), 1);
  EXPECT_EQ(first->jobs(0).job_id(), "test-job-5");
  cancelled.set_page_token(first->next_page_token());
  absl::StatusOr<ListJobsResponse> second = c->ListJobs(cancelled);
  ASSERT_EQ(second->jobs_size(), 1);
  EXPECT_EQ(second->jobs(0).job_id(), "test-job-2");
  EXPECT_EQ(second->next_page_token(), "");
  // The default page is 100; bad sizes and tokens are refused by name.
  EXPECT_EQ(c->ListJobs({})->jobs_size(), 7);
  ListJobsRequest bad;
  bad.set_page_size(1001);
  EXPECT_THAT(c->ListJobs(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("page_size: 1001; allowed 0..1000")));
  bad.set_page_size(0);
  bad.set_page_token("yesterday");
  EXPECT_THAT(c->ListJobs(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("page_token: 'yesterday'")));
}

TEST_F(CoordinatorTest, FinishedJobsAreKeptByCountInMemoryAndInTheDatabase) {
  options_.keep_finished_jobs = 2;
  {
    auto c = Make();
    for (int i = 0; i < 5; ++i) ASSERT_THAT(c->SubmitJob(Spec(1, 10)).status(), IsOk());
    // Jobs 1..4 finish in the order 3, 1, 4, 2; job 5 stays queued.
    for (const char* id : {"test-job-3", "test-job-1", "test-job-4", "test-job-2"}) {
      ASSERT_THAT(c->CancelJob(id, "").status(), IsOk());
      clock_.AdvanceTime(absl::Seconds(1));
    }
    // The two that finished last are kept, and the queued one.
    std::vector<std::string> ids;
    const ListJobsResponse all = *c->ListJobs({});
    for (const JobInfo& j : all.jobs()) ids.push_back(j.job_id());
    EXPECT_EQ(ids, (std::vector<std::string>{"test-job-5", "test-job-4", "test-job-2"}));
    EXPECT_THAT(
        c->GetJob("test-job-3").status(),
        StatusIs(absl::StatusCode::kNotFound, HasSubstr("no job 'test-job-3' (finished jobs are kept: the newest 2)")));
    EXPECT_GT(c->GetJob("test-job-4")->end_time_unix_ms(), 0);
    EXPECT_EQ(c->GetJob("test-job-5")->end_time_unix_ms(), 0);
    c->Shutdown();
  }
  // jobs.db kept the same three; new ids never reuse deleted ones.
  {
    options_.keep_finished_jobs = 0;  // no limit: whatever is left in jobs.db shows
    auto c = Make();
    std::vector<std::string> ids;
    const ListJobsResponse all = *c->ListJobs({});
    for (const JobInfo& j : all.jobs()) ids.push_back(j.job_id());
    EXPECT_EQ(ids, (std::vector<std::string>{"test-job-5", "test-job-4", "test-job-2"}));
    ASSERT_THAT(c->CancelJob("test-job-5", "").status(), IsOk());
    c->Shutdown();
  }
  {
    options_.keep_finished_jobs = 1;  // applied when the coordinator loads
    auto c = Make();
    ASSERT_EQ(c->ListJobs({})->jobs_size(), 1);
    EXPECT_EQ(c->ListJobs({})->jobs(0).job_id(), "test-job-5");
    c->Shutdown();
  }
  {
    auto c = Make();
    ASSERT_THAT(c->CancelJob("test-job-5", "").status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
    c->Shutdown();
  }
  // Every record gone, then a new job: its id is still the 6th.
  {
    options_.keep_finished_jobs = 1;
    auto c = Make();
    EXPECT_EQ(c->SubmitJob(Spec(1, 10))->job_id(), "test-job-6");
    ASSERT_THAT(c->CancelJob("test-job-6", "").status(), IsOk());  // deletes test-job-5
    c->Shutdown();
  }
  {
    auto c = Make();
    EXPECT_EQ(c->SubmitJob(Spec(1, 10))->job_id(), "test-job-7");
  }
}

TEST_F(CoordinatorTest, FinishedJobsAreKeptByAge) {
  options_.keep_finished_jobs = 0;
  options_.keep_finished_for = absl::Hours(1);
  auto c = Make();
  const std::string old_job = c->SubmitJob(Spec(1, 10))->job_id();
  const std::string queued = c->SubmitJob(Spec(1, 10))->job_id();
  ASSERT_THAT(c->CancelJob(old_job, "").status(), IsOk());
  clock_.AdvanceTime(absl::Minutes(59));
  const std::string recent = c->SubmitJob(Spec(1, 10))->job_id();
  ASSERT_THAT(c->CancelJob(recent, "").status(), IsOk());
  c->Tick();
  EXPECT_EQ(c->ListJobs({})->jobs_size(), 3);
  clock_.AdvanceTime(absl::Minutes(2));  // old_job finished 61 minutes ago
  c->Tick();
  EXPECT_THAT(c->GetJob(old_job).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("those that finished within the last 1h")));
  EXPECT_THAT(c->GetJob(recent).status(), IsOk());
  EXPECT_EQ(c->GetJob(queued)->state(), PENDING);  // queued jobs are never deleted
  clock_.AdvanceTime(absl::Hours(10));
  c->Tick();
  EXPECT_EQ(c->ListJobs({})->jobs_size(), 1);
  EXPECT_EQ(c->GetJob(queued)->state(), PENDING);
}

TEST_F(CoordinatorTest, AJobDeletedWhileWatchedEndsTheWatch) {
  options_.keep_finished_jobs = 1;
  auto c = Make();
  const std::string first = c->SubmitJob(Spec(1, 10))->job_id();
  ASSERT_THAT(c->CancelJob(first, "").status(), IsOk());
  int64_t version = 0;
  ASSERT_THAT(c->WaitForChange(first, &version, absl::Seconds(1)).status(), IsOk());
  std::thread deleter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    const std::string second = c->SubmitJob(Spec(1, 10))->job_id();
    ASSERT_THAT(c->CancelJob(second, "").status(), IsOk());  // deletes `first`
  });
  const absl::Time start = absl::Now();
  EXPECT_THAT(c->WaitForChange(first, &version, absl::Seconds(30)).status(), StatusCodeIs(absl::StatusCode::kNotFound));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  deleter.join();
}

TEST_F(CoordinatorTest, AFailedCheckpointWriteIsInTheJobUntilAWriteSucceeds) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  Worker("b")->checkpoint_failure_at[40] = "runs/x/checkpoint_40: No space left on device";
  Fake("a")->HoldCall(WorkerMethod::kRunSteps, 3);  // the chunk after the failure waits while the test looks
  SubmitJobRequest request = Spec(2, 100);
  request.mutable_spec()->set_checkpoint_period(20);
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  std::unique_ptr<FakeWorker::HeldCall> held = HeldRun("a");
  ASSERT_NE(held, nullptr);
  JobInfo running = *c->GetJob(id);
  EXPECT_EQ(running.state(), RUNNING);
  EXPECT_EQ(running.step(), 40);
  int b_rank;
  {
    std::lock_guard<std::mutex> lock(Worker("b")->mu);
    b_rank = Worker("b")->rank;
  }
  EXPECT_EQ(running.checkpoint_failure(),
            absl::StrCat("rank ", b_rank, ": runs/x/checkpoint_40: No space left on device"));
  held->Respond();
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  EXPECT_EQ(done.checkpoint_failure(), "");  // the write at step 60 succeeded
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_100");
}

TEST_F(CoordinatorTest, ARestartRecordsTheCheckpointTheWorkersRestored) {
  auto c = Make();
  const std::string a = AddWorker(c.get(), "a");
  Worker("a")->fail_step = 40;
  Worker("a")->fail_run_at_step = absl::UnavailableError("connection reset");
  Worker("a")->restores_instead = "ckpt_20";  // ckpt_40 turns out damaged
  // The first attempt fails at step 40 with ckpt_40 recorded; the restart
  // names ckpt_40, the worker passes over it and restores ckpt_20. The
  // restart's first chunk (the 4th RunSteps) waits while the test looks.
  Fake("a")->HoldCall(WorkerMethod::kRunSteps, 4);
  SubmitJobRequest request = Spec(1, 60);
  request.mutable_spec()->set_checkpoint_period(20);
  const std::string id = c->SubmitJob(request)->job_id();
  c->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob(id)->restarts() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  {
    std::lock_guard<std::mutex> lock(Worker("a")->mu);
    Worker("a")->fail_step = -1;
  }
  std::unique_ptr<FakeWorker::HeldCall> held;
  while (held == nullptr && absl::Now() < deadline + absl::Seconds(10)) {
    held = Fake("a")->WaitForHeld(WorkerMethod::kRunSteps, absl::Milliseconds(2));
    HeartbeatRequest hb;  // the drained worker says it holds no job
    hb.set_worker_id(a);
    ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
  }
  ASSERT_NE(held, nullptr);
  JobInfo running = *c->GetJob(id);
  EXPECT_EQ(running.state(), RUNNING);
  EXPECT_EQ(running.step(), 20);
  EXPECT_EQ(running.latest_checkpoint(), "ckpt_20");
  EXPECT_THAT(running.reason(),
              HasSubstr("restored ckpt_20; passed over ckpt_40 passed over: params.safetensors: SHA-256 mismatch"));
  held->Respond();
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_60");
  std::lock_guard<std::mutex> lock(Worker("a")->mu);
  EXPECT_EQ(Worker("a")->restored, (std::vector<std::string>{"", "ckpt_40"}));
  std::vector<std::string> runs;
  for (const std::string& call : Worker("a")->calls) {
    if (call.rfind("run ", 0) == 0) runs.push_back(call);
  }
  // The second attempt runs from step 20, not 40.
  EXPECT_EQ(runs, (std::vector<std::string>{"run 0+20 ckpt", "run 20+20 ckpt", "run 40+20 ckpt", "run 20+20 ckpt",
                                            "run 40+20 ckpt"}));
}

TEST_F(CoordinatorTest, ACheckpointRequestGivesUpAfterItsTimeoutOnTheInjectedClock) {
  auto c = Make();
  AddWorker(c.get(), "a");
  Fake("a")->HoldCall(WorkerMethod::kRunSteps, 1);  // the first chunk does not end: no boundary
  const std::string id = c->SubmitJob(Spec(1, 60))->job_id();
  c->Start();
  std::unique_ptr<FakeWorker::HeldCall> held = HeldRun("a");
  ASSERT_NE(held, nullptr);
  CheckpointJobRequest request;
  request.set_job_id(id);
  // (Under the 10 s heartbeat timeout of the same clock: the worker is not
  // taken for lost meanwhile.)
  request.set_timeout_seconds(5);
  EXPECT_THAT(
      AfterTimeout(absl::Seconds(5), [&] { return c->CheckpointJob(request); }).status(),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("did not reach a boundary between chunks within 5s")));
  held->Respond();
  WaitForState(c.get(), id, SUCCEEDED);
}

TEST_F(CoordinatorTest, ACheckpointOnRequestIsWrittenOnEveryRankAtTheNextBoundary) {
  auto c = Make();
  AddWorker(c.get(), "a");
  AddWorker(c.get(), "b");
  CheckpointJobRequest unknown;
  unknown.set_job_id("nope-1");
  EXPECT_THAT(c->CheckpointJob(unknown).status(), StatusCodeIs(absl::StatusCode::kNotFound));
  // The second chunk (steps 20..40) waits until the request is in.
  Fake("a")->HoldCall(WorkerMethod::kRunSteps, 2);
  const std::string id = c->SubmitJob(Spec(2, 60))->job_id();
  CheckpointJobRequest request;
  request.set_job_id(id);
  EXPECT_THAT(c->CheckpointJob(request).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is PENDING; only a RUNNING job can write a checkpoint on request")));
  c->Start();
  std::unique_ptr<FakeWorker::HeldCall> held = HeldRun("a");
  ASSERT_NE(held, nullptr);
  absl::StatusOr<CheckpointJobResponse> saved;
  std::thread asker([&] { saved = c->CheckpointJob(request); });
  // The request waits for the boundary (on the injected clock).
  const absl::Time asked = absl::Now() + absl::Seconds(10);
  while (clock_.num_waiters() == 0 && absl::Now() < asked) absl::SleepFor(absl::Milliseconds(1));
  held->Respond();
  asker.join();
  ASSERT_THAT(saved.status(), IsOk());
  EXPECT_EQ(saved->path(), "ckpt_40");
  EXPECT_EQ(saved->step(), 40);
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  for (const char* w : {"a", "b"}) {
    const std::vector<std::string> calls = CallsAfterAbort(w);
    EXPECT_EQ(std::count(calls.begin(), calls.end(), "save 40 wait"), 1) << w;
    auto save = std::find(calls.begin(), calls.end(), "save 40 wait");
    ASSERT_NE(save, calls.end());
    EXPECT_EQ(*std::next(save), "run 40+20 ckpt") << w;  // then the last chunk
  }
  // After the job: refused, naming the state.
  EXPECT_THAT(c->CheckpointJob(request).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is SUCCEEDED")));
  request.set_timeout_seconds(-1);
  EXPECT_THAT(c->CheckpointJob(request).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout_seconds: -1; allowed 1..86400")));
}

// fault_tolerance ELASTIC: a rank whose worker vanished (UNAVAILABLE) while
// its peers' collective failed (ABORTED) is dropped; the others regroup and
// go on from their step, without a restart; an idle worker joins at the
// next boundary.
void LoseRankAt(Script* lost, std::vector<Script*> peers, int64_t step) {
  lost->fail_step = step;
  lost->fail_run_at_step = absl::UnavailableError("Socket closed");
  for (Script* w : peers) {
    w->fail_step = step;
    w->fail_once = true;
    w->fail_run_at_step = absl::AbortedError("collective failed (a peer left or stalled)");
  }
}

TEST_F(CoordinatorTest, ElasticDropsALostRankAndGoesOnWithoutARestart) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("b").get(), {Worker("a").get(), Worker("c").get()}, 40);
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(done.step(), 100);
  EXPECT_EQ(done.goodput().recomputed_steps(), 1);  // the step the chunk from 40 was in
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(done.ranks(0).host(), "a");
  EXPECT_EQ(done.ranks(1).host(), "c");
  EXPECT_EQ(CallsAfterAbort("c"),
            (std::vector<std::string>{"start 2/3", "run 0+20", "run 20+20", "run 40+20", "regroup 1/2 g1", "run 40+20",
                                      "run 60+20", "run 80+20 ckpt", "abort"}));
  // The lost rank is told to let go (in case its worker still lives).
  EXPECT_EQ(CallsAfterAbort("b").back(), "abort");
}

TEST_F(CoordinatorTest, ElasticBelowMinWorkersRestartsAsRestartDoes) {
  auto c = Make();
  std::vector<std::string> ids;
  for (const char* n : {"a", "b", "c"}) ids.push_back(AddWorker(c.get(), n));
  LoseRankAt(Worker("b").get(), {Worker("a").get(), Worker("c").get()}, 40);
  Worker("b")->fail_once = true;
  ASSERT_THAT(c->SubmitJob(ElasticSpec(3)).status(), IsOk());
  c->Start();
  // The drained workers say they hold no job; the job gets its gang again.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob("test-job-1")->state() != SUCCEEDED && absl::Now() < deadline) {
    for (const std::string& w : ids) {
      HeartbeatRequest hb;
      hb.set_worker_id(w);
      ASSERT_THAT(c->Heartbeat(hb).status(), IsOk());
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  JobInfo done = *c->GetJob("test-job-1");
  EXPECT_EQ(done.state(), SUCCEEDED) << done.reason();
  EXPECT_EQ(done.restarts(), 1);
  EXPECT_EQ(done.regroups(), 0);
  EXPECT_THAT(Calls("a"), ::testing::Not(::testing::Contains(HasSubstr("regroup"))));
}

TEST_F(CoordinatorTest, ElasticAdmitsAnIdleWorkerWhichReceivesTheState) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("a").get(), {Worker("b").get(), Worker("c").get()}, 40);
  Fake("b")->HoldCall(WorkerMethod::kRunSteps, 4);  // the first chunk at 2 ranks (40+20) waits
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  // The replacement registers while the job runs at 2 ranks: it builds the
  // job ahead (StartJob with `prepare`, as rank 2 of 3) while the ranks
  // train on, and at the first boundary after its build answered it joins
  // and receives the state.
  std::unique_ptr<FakeWorker::HeldCall> held = HeldRun("b");
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(c->GetJob("test-job-1")->regroups(), 1);
  AddWorker(c.get(), "d", 0, [&](Script* d) { d->joins_at_step_of = Worker("b"); });
  held->Respond();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 2);
  ASSERT_EQ(done.ranks_size(), 3);
  EXPECT_EQ(done.ranks(0).host(), "b");
  EXPECT_EQ(done.ranks(2).host(), "d");
  const std::vector<std::string> d = CallsAfterAbort("d");
  ASSERT_GE(d.size(), 3u);
  EXPECT_EQ(d[0], "start 2/3 join g1 prepare");
  EXPECT_EQ(d[1], "start 2/3 join g2");
  EXPECT_THAT(Calls("b"), ::testing::Contains("regroup 0/3 g2"));
}

// A worker that builds the job ahead of its join and is let go before it
// joins (the attempt ends) is told to let go of the job too.
TEST_F(CoordinatorTest, ElasticLetsGoOfAWorkerThatBuiltTheJobAheadWhenTheAttemptEnds) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("a").get(), {Worker("b").get(), Worker("c").get()}, 80);
  Fake("b")->HoldCall(WorkerMethod::kRunSteps, 6);  // the last chunk, at 2 ranks (80+20), waits
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  std::unique_ptr<FakeWorker::HeldCall> held = HeldRun("b");
  ASSERT_NE(held, nullptr);
  AddWorker(c.get(), "d", 0, [&](Script* d) { d->joins_at_step_of = Worker("b"); });
  // A watchdog round during the chunk gives it the job to build.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Calls("d").empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(Calls("d"), std::vector<std::string>{"start 2/3 join g1 prepare"});
  held->Respond();  // the job's last chunk: it ends before d joins
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.regroups(), 1);
  ASSERT_EQ(done.ranks_size(), 2);
  while (Calls("d").size() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(Calls("d"), (std::vector<std::string>{"start 2/3 join g1 prepare", "abort"}));
}

// A joiner lost while it joins (its link cut: UNAVAILABLE) is not taken
// again as is: 1 s after the cut, a probe asks it whether it reaches every
// rank; while it does not, it is probed again after a backoff that
// doubles (2 s); once it does, it joins at the next boundary.
TEST_F(CoordinatorTest, ElasticTakesACutOffWorkerBackOnceItReachesEveryRank) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("a").get(), {Worker("b").get(), Worker("c").get()}, 40);
  SubmitJobRequest spec = ElasticSpec(0);
  spec.mutable_spec()->set_total_steps(240);
  // b's chunks at 2 ranks, from its 4th RunSteps (40+20) on, wait for the
  // test: each answer is a boundary.
  for (int n = 4; n <= 12; ++n) Fake("b")->HoldCall(WorkerMethod::kRunSteps, n);
  ASSERT_THAT(c->SubmitJob(spec).status(), IsOk());
  c->Start();
  std::unique_ptr<FakeWorker::HeldCall> held = HeldRun("b");  // 40+20
  ASSERT_NE(held, nullptr);
  const std::string d_id = AddWorker(c.get(), "d", 0, [&](Script* d) {
    d->fail_join_once = absl::UnavailableError("Socket closed");
    d->joins_at_step_of = Worker("b");
  });
  // d is given the job to build ahead of its join (at a watchdog round or
  // at boundary 60); the build fails.
  held->Respond();      // boundary 60
  held = HeldRun("b");  // 60+20
  ASSERT_NE(held, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Calls("d").empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(50));  // its answer is read at the next boundary
  held->Respond();                         // boundary 80: the failure is read: cut off, told to let go
  held = HeldRun("b");                     // 80+20
  ASSERT_NE(held, nullptr);
  while (Calls("d").size() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(Calls("d"), (std::vector<std::string>{"start 2/3 join g1 prepare", "abort"}));
  EXPECT_EQ(c->GetJob("test-job-1")->ranks_size(), 2);
  clock_.AdvanceTime(absl::Seconds(1));
  held->Respond();      // boundary 100: the first probe
  held = HeldRun("b");  // 100+20
  ASSERT_NE(held, nullptr);
  held->Respond();      // boundary 120: it cannot reach the ranks; next probe 2 s on
  held = HeldRun("b");  // 120+20
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(Fake("d")->calls(WorkerMethod::kProbe), 1);
  Worker("d")->reaches_peers = true;
  clock_.AdvanceTime(absl::Seconds(1));
  held->Respond();      // boundary 140: before the backoff: no probe
  held = HeldRun("b");  // 140+20
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(Fake("d")->calls(WorkerMethod::kProbe), 1);
  // Let go of the job, d heartbeats idle.
  HeartbeatRequest beat;
  beat.set_worker_id(d_id);
  ASSERT_THAT(c->Heartbeat(beat).status(), IsOk());
  clock_.AdvanceTime(absl::Seconds(1));
  held->Respond();      // boundary 160: the second probe
  held = HeldRun("b");  // 160+20
  ASSERT_NE(held, nullptr);
  held->Respond();      // boundary 180: it reaches every rank: it builds the job ahead
  held = HeldRun("b");  // 180+20
  ASSERT_NE(held, nullptr);
  while (Calls("d").size() < 5 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(50));  // its answer is read at the next boundary
  held->Respond();                         // boundary 200: it joins
  held = HeldRun("b");                     // 200+20, at 3 ranks
  ASSERT_NE(held, nullptr);
  held->Respond();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  ASSERT_EQ(done.ranks_size(), 3);
  EXPECT_EQ(done.ranks(2).host(), "d");
  const std::vector<std::string> d = Calls("d");
  ASSERT_GE(d.size(), 6u);
  EXPECT_EQ(d[2], "probe b,c");
  EXPECT_EQ(d[3], "probe b,c");
  EXPECT_EQ(d[4], "start 2/3 join g1 prepare");  // at boundary 180
  EXPECT_EQ(d[5], "start 2/3 join g2");          // at boundary 200
  EXPECT_EQ(Fake("d")->calls(WorkerMethod::kProbe), 2);
}

TEST_F(CoordinatorTest, GoodputAccountsTheWaitForAGangAndIsExported) {
  MetricsRegistry registry;
  options_.metrics = &registry;
  auto c = Make();
  c->Start();
  const std::string id = c->SubmitJob(Spec(1, 60))->job_id();
  clock_.AdvanceTime(absl::Seconds(30));  // no worker yet: queued
  JobInfo pending = *c->GetJob(id);
  EXPECT_DOUBLE_EQ(pending.goodput().queued_seconds(), 30);
  EXPECT_DOUBLE_EQ(pending.goodput().wall_seconds(), 30);
  EXPECT_DOUBLE_EQ(pending.goodput().ratio(), 0);
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("trainyard_job_goodput_ratio{job=\"test-job-1\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("trainyard_job_time_seconds{job=\"test-job-1\",kind=\"queued\"} 30\n"));
  AddWorker(c.get(), "a");
  JobInfo done = WaitForState(c.get(), id, SUCCEEDED);
  // The job's steps took no time on the injected clock: all of its wall
  // time was the wait.
  EXPECT_DOUBLE_EQ(done.goodput().queued_seconds(), 30);
  EXPECT_DOUBLE_EQ(done.goodput().wall_seconds(), 30);
  EXPECT_DOUBLE_EQ(done.goodput().other_seconds(), 0);
  EXPECT_EQ(done.goodput().trained_to_step(), 60);
  // Rank 0 was told the goodput so far with each chunk (for TensorBoard).
  std::vector<Goodput> told = Goodputs("a");
  ASSERT_EQ(told.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(told[i].trained_to_step(), 20 * i) << i;
    EXPECT_DOUBLE_EQ(told[i].queued_seconds(), 30) << i;
    EXPECT_DOUBLE_EQ(told[i].wall_seconds(), 30) << i;
  }
  // Ended jobs leave the per-job series.
  EXPECT_THAT(registry.Render(), Not(HasSubstr("job=\"test-job-1\"")));
}

// A rank lost during an evaluation or an on-demand checkpoint: the others
// regroup and repeat that call, without a restart.
void LoseRankIn(std::map<int64_t, absl::Status> Script::*calls, Script* lost, std::vector<Script*> peers,
                int64_t step) {
  (lost->*calls)[step] = absl::UnavailableError("Socket closed");
  for (Script* w : peers) (w->*calls)[step] = absl::AbortedError("collective failed (a peer left or stalled)");
}

TEST_F(CoordinatorTest, ElasticRepeatsAnEvaluationOnTheSurvivorsAfterALoss) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankIn(&Script::fail_eval_once, Worker("b").get(), {Worker("a").get(), Worker("c").get()}, 40);
  SubmitJobRequest spec = ElasticSpec(0);
  spec.mutable_spec()->set_eval_period(40);
  ASSERT_THAT(c->SubmitJob(spec).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(CallsAfterAbort("c"),
            (std::vector<std::string>{"start 2/3", "run 0+20", "run 20+20", "eval 40", "regroup 1/2 g1", "eval 40",
                                      "run 40+20", "run 60+20", "eval 80", "run 80+20 ckpt", "eval 100", "abort"}));
  EXPECT_EQ(CallsAfterAbort("b").back(), "abort");
  EXPECT_EQ(Goodputs("a").size(), 5u);  // rank 0 throughout: told with every chunk
  EXPECT_TRUE(Goodputs("c").empty());
  EXPECT_EQ(done.metrics().at("training_eval/digits_to_words/loss"), 10.0);
}

TEST_F(CoordinatorTest, ElasticRepeatsAnOnDemandCheckpointOnTheSurvivorsAfterALoss) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankIn(&Script::fail_save_once, Worker("a").get(), {Worker("b").get(), Worker("c").get()}, 40);
  Fake("b")->HoldCall(WorkerMethod::kRunSteps, 2);  // the chunk to 40 waits until the request is in
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  std::unique_ptr<FakeWorker::HeldCall> held = HeldRun("b");
  ASSERT_NE(held, nullptr);
  CheckpointJobRequest request;
  request.set_job_id("test-job-1");
  absl::StatusOr<CheckpointJobResponse> saved;
  std::thread asker([&] { saved = c->CheckpointJob(request); });
  const absl::Time asked = absl::Now() + absl::Seconds(10);
  while (clock_.num_waiters() == 0 && absl::Now() < asked) absl::SleepFor(absl::Milliseconds(1));
  held->Respond();
  asker.join();
  // Rank 0 (worker a) was lost: the save is written by the new rank 0.
  ASSERT_THAT(saved.status(), IsOk());
  EXPECT_EQ(saved->path(), "ckpt_40");
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(CallsAfterAbort("b"),
            (std::vector<std::string>{"start 1/3", "run 0+20", "run 20+20", "save 40 wait", "regroup 0/2 g1",
                                      "save 40 wait", "run 40+20", "run 60+20", "run 80+20 ckpt", "abort"}));
}

// A rank lost while the survivors of a loss regroup: the others regroup
// again without it (no restart).
TEST_F(CoordinatorTest, ElasticRegroupsAgainWithoutARankLostWhileRegrouping) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("b").get(), {Worker("a").get(), Worker("c").get()}, 40);
  Worker("c")->fail_regroup_once = absl::UnavailableError("Socket closed");
  Worker("a")->fail_regroup_once = absl::AbortedError("forming the group of generation 1 was aborted");
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  ASSERT_EQ(done.ranks_size(), 1);
  EXPECT_EQ(done.ranks(0).host(), "a");
  EXPECT_EQ(CallsAfterAbort("a"),
            (std::vector<std::string>{"start 0/3", "run 0+20", "run 20+20", "run 40+20", "regroup 0/2 g1",
                                      "regroup 0/1 g2", "run 40+20", "run 60+20", "run 80+20 ckpt", "abort"}));
  EXPECT_EQ(CallsAfterAbort("c").back(), "abort");  // told to let go
}

// The time of a regroup that failed on a lost rank is recovery, as the
// regroup after it is: none of the job's wall time is left unaccounted.
TEST_F(CoordinatorTest, ElasticCountsAFailedRegroupAsRecovery) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("b").get(), {Worker("a").get(), Worker("c").get()}, 40);
  Worker("c")->fail_regroup_once = absl::UnavailableError("Socket closed");
  Worker("a")->fail_regroup_once = absl::AbortedError("forming the group of generation 1 was aborted");
  Fake("a")->HoldCall(WorkerMethod::kRegroup, 1);
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  std::unique_ptr<FakeWorker::HeldCall> held = Fake("a")->WaitForHeld(WorkerMethod::kRegroup, absl::Seconds(10));
  ASSERT_NE(held, nullptr);
  clock_.AdvanceTime(absl::Seconds(5));  // the meeting waits 5 s for the lost rank
  held->Respond();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_GE(done.goodput().recovery_seconds(), 5.0);
  EXPECT_LT(done.goodput().other_seconds(), 0.5) << done.goodput().DebugString();
}

// A rank lost while the ranks start: the others' starts fail with it
// (their rendezvous is closed), and they start again as a group of 2 from
// the same checkpoint, without a restart.
TEST_F(CoordinatorTest, ElasticStartsAgainOnTheSurvivorsOfALossDuringTheStart) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  Worker("b")->fail_start_once = absl::UnavailableError("Socket closed");
  for (const char* n : {"a", "c"}) {
    Worker(n)->fail_start_once = absl::AbortedError("the rendezvous test-job-1/0/g0 was closed");
  }
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(done.step(), 100);
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(done.ranks(1).host(), "c");
  EXPECT_EQ(CallsAfterAbort("c"), (std::vector<std::string>{"start 2/3", "start 1/2 g1", "run 0+20", "run 20+20",
                                                            "run 40+20", "run 60+20", "run 80+20 ckpt", "abort"}));
  EXPECT_EQ(Worker("c")->restored, (std::vector<std::string>{"", ""}));  // the same (no) checkpoint twice
  EXPECT_EQ(CallsAfterAbort("b"), (std::vector<std::string>{"start 1/3", "abort"}));
}

// The lost rank's start failed after the others had started: they regroup.
TEST_F(CoordinatorTest, ElasticRegroupsRanksThatStartedWhenAPeerWasLostAtTheStart) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  Worker("b")->fail_start_once = absl::UnavailableError("Socket closed");
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(CallsAfterAbort("c"), (std::vector<std::string>{"start 2/3", "regroup 1/2 g1", "run 0+20", "run 20+20",
                                                            "run 40+20", "run 60+20", "run 80+20 ckpt", "abort"}));
}

// Some survivors started and some did not: only a restart brings them to
// one place.
TEST_F(CoordinatorTest, ElasticRestartsWhenSomeSurvivorsOfALossAtTheStartHadStarted) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  Worker("b")->fail_start_once = absl::UnavailableError("Socket closed");
  Worker("c")->fail_start_once = absl::AbortedError("collective failed (a peer left or stalled)");
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  JobInfo restarting = WaitForState(c.get(), "test-job-1", RESTARTING);
  EXPECT_EQ(restarting.restarts(), 1);
  EXPECT_EQ(restarting.regroups(), 0);
  EXPECT_THAT(restarting.reason(), HasSubstr("rank 1 (worker w2-b on host b, b): StartJob failed: Socket closed"));
}

// A rank lost while the last chunk's checkpoint is written (the others had
// trained every step): the survivors write it and run the final evaluation.
TEST_F(CoordinatorTest, ElasticWritesTheChunksCheckpointOnTheSurvivorsAfterALossDuringIt) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("a").get(), {Worker("b").get(), Worker("c").get()}, 80);
  for (const char* n : {"b", "c"}) Worker(n)->fail_after_steps = true;
  SubmitJobRequest spec = ElasticSpec(0);
  spec.mutable_spec()->set_eval_period(1000);  // only at the end
  ASSERT_THAT(c->SubmitJob(spec).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(done.step(), 100);
  EXPECT_EQ(done.latest_checkpoint(), "ckpt_100");  // written by the new rank 0 (worker b)
  EXPECT_EQ(done.goodput().recomputed_steps(), 0);
  EXPECT_EQ(CallsAfterAbort("b"),
            (std::vector<std::string>{"start 1/3", "run 0+20", "run 20+20", "run 40+20", "run 60+20", "run 80+20 ckpt",
                                      "regroup 0/2 g1", "save 100 wait", "eval 100", "abort"}));
}

// ELASTIC: a rank whose heartbeats stopped (a hung host) is dropped, and
// the collective of the others, blocked on it, is aborted at once
// (LeaveGroup), not after the watchdog's stall (the watchdog is off here).
TEST_F(CoordinatorTest, ElasticAbortsTheCollectiveOfRanksBlockedOnALostRankAtOnce) {
  options_.heartbeat_timeout = absl::Seconds(10);
  options_.watchdog.period = absl::ZeroDuration();
  auto c = Make();
  std::vector<std::string> ids;
  for (const char* n : {"a", "b", "c"}) ids.push_back(AddWorker(c.get(), n));
  std::map<std::string, std::unique_ptr<FakeWorker::HeldCall>> held = LoseBInTheSecondChunk(c.get(), ids);
  ASSERT_EQ(held.size(), 3u);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((Fake("a")->calls(WorkerMethod::kLeaveGroup) == 0 || Fake("c")->calls(WorkerMethod::kLeaveGroup) == 0) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(Fake("a")->calls(WorkerMethod::kLeaveGroup), 1);
  EXPECT_EQ(Fake("c")->calls(WorkerMethod::kLeaveGroup), 1);
  EXPECT_EQ(Fake("b")->calls(WorkerMethod::kLeaveGroup), 0);
  // Their collective fails as LeaveGroup makes it; they regroup.
  for (const char* n : {"a", "c"}) held[n]->Fail(absl::AbortedError("collective aborted: the rank left its group"));
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(done.ranks(0).host(), "a");
  EXPECT_EQ(done.ranks(1).host(), "c");
}

// ... and a rank whose call does not end within kAbortGrace of that abort
// (a transfer from the lost rank cannot be interrupted) is taken as lost:
// the others do not wait for its collective timeout.
TEST_F(CoordinatorTest, ElasticGivesUpOnARankThatDoesNotEndItsCallAfterTheAbort) {
  options_.heartbeat_timeout = absl::Seconds(10);
  options_.watchdog.period = absl::ZeroDuration();
  auto c = Make();
  std::vector<std::string> ids;
  for (const char* n : {"a", "b", "c"}) ids.push_back(AddWorker(c.get(), n));
  Fake("a")->HoldCall(WorkerMethod::kRunSteps, 3);  // the job waits after the regroup
  std::map<std::string, std::unique_ptr<FakeWorker::HeldCall>> held = LoseBInTheSecondChunk(c.get(), ids);
  ASSERT_EQ(held.size(), 3u);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Fake("a")->calls(WorkerMethod::kLeaveGroup) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Time aborted = absl::Now();
  held["a"]->Fail(absl::AbortedError("collective aborted: the rank left its group"));
  // c's call never ends by itself.
  while (Fake("a")->calls(WorkerMethod::kRegroup) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(Fake("a")->calls(WorkerMethod::kRegroup), 1);
  EXPECT_GE(absl::Now() - aborted, absl::Seconds(0.9));       // kAbortGrace, on real time
  std::unique_ptr<FakeWorker::HeldCall> next = HeldRun("a");  // after the regroup
  ASSERT_NE(next, nullptr);
  EXPECT_THAT(c->GetJob("test-job-1")->reason(),
              HasSubstr("rank 2 (worker w3-c on host c, c): rank 2 (worker w3-c on host c, c) did not end its call "
                        "within 1s of its collective's abort"));
  EXPECT_EQ(Fake("c")->calls(WorkerMethod::kRegroup), 0);
  next->Respond();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
}

// A worker asked to stop (SIGTERM: a drained node) in an ELASTIC job: every
// rank stops after the same step, the emergency checkpoint is written, and
// the others go on from that step without it; no restart.
TEST_F(CoordinatorTest, ElasticGoesOnWithoutAWorkerAskedToStop) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  for (const char* n : {"a", "b", "c"}) Worker(n)->preempt_step = 20;
  Worker("b")->asked_to_stop = true;
  ASSERT_THAT(c->SubmitJob(ElasticSpec(0)).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(done.step(), 100);
  ASSERT_EQ(done.ranks_size(), 2);
  EXPECT_EQ(done.ranks(0).host(), "a");
  EXPECT_EQ(done.ranks(1).host(), "c");
  EXPECT_EQ(CallsAfterAbort("c"),
            (std::vector<std::string>{"start 2/3", "run 0+20", "run 20+20", "regroup 1/2 g1", "run 23+17", "run 40+20",
                                      "run 60+20", "run 80+20 ckpt", "abort"}));
  // The stopping worker is let go, and not taken back as a joiner.
  EXPECT_EQ(CallsAfterAbort("b"), (std::vector<std::string>{"start 1/3", "run 0+20", "run 20+20", "abort"}));
}

// The same during an evaluation: the others evaluate the step again.
TEST_F(CoordinatorTest, ElasticEvaluatesAgainWithoutAWorkerAskedToStop) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  for (const char* n : {"a", "b", "c"}) Worker(n)->preempt_eval_step = 40;
  Worker("c")->asked_to_stop = true;
  SubmitJobRequest spec = ElasticSpec(0);
  spec.mutable_spec()->set_eval_period(40);
  ASSERT_THAT(c->SubmitJob(spec).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", SUCCEEDED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_EQ(done.regroups(), 1);
  EXPECT_EQ(CallsAfterAbort("b"),
            (std::vector<std::string>{"start 1/3", "run 0+20", "run 20+20", "eval 40", "regroup 1/2 g1", "eval 40",
                                      "run 40+20", "run 60+20", "eval 80", "run 80+20 ckpt", "eval 100", "abort"}));
  EXPECT_EQ(done.metrics().at("training_eval/digits_to_words/loss"), 10.0);
}

// Below min_workers the job stops PREEMPTED and restarts, as RESTART does.
TEST_F(CoordinatorTest, ElasticBelowMinWorkersAfterAPreemptionRestarts) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  for (const char* n : {"a", "b", "c"}) Worker(n)->preempt_step = 20;
  Worker("b")->asked_to_stop = true;
  ASSERT_THAT(c->SubmitJob(ElasticSpec(3)).status(), IsOk());
  c->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (c->GetJob("test-job-1")->restarts() == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  JobInfo restarting = *c->GetJob("test-job-1");
  EXPECT_EQ(restarting.restarts(), 1);
  EXPECT_EQ(restarting.regroups(), 0);
  EXPECT_THAT(restarting.reason(),
              HasSubstr("rank 1 (worker w2-b on host b, b) was asked to stop; emergency checkpoint at step 23: "
                        "ckpt_23; restart 1 of 3 from ckpt_23"));
}

TEST_F(CoordinatorTest, ElasticRefusesRanksWhoseStatesDifferAfterARegroup) {
  auto c = Make();
  for (const char* n : {"a", "b", "c"}) AddWorker(c.get(), n);
  LoseRankAt(Worker("b").get(), {Worker("a").get(), Worker("c").get()}, 40);
  Worker("c")->digest = 8;
  SubmitJobRequest spec = ElasticSpec(0);
  spec.mutable_spec()->set_max_restarts(0);
  ASSERT_THAT(c->SubmitJob(spec).status(), IsOk());
  c->Start();
  JobInfo done = WaitForState(c.get(), "test-job-1", FAILED);
  EXPECT_THAT(done.reason(), HasSubstr("after regrouping, rank 1 (worker w3-c on host c, c) holds step 40 with state "
                                       "digest 8, rank 0 (worker w1-a on host a, a) step 40 with 7"));
}

}  // namespace
}  // namespace trainyard
