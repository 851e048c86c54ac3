// WorkerCore in-process: checkpoints written by RunSteps restore exactly;
// the spec's restore options (damaged newest skipped, renames, strict); a
// checkpoint restored onto a different number of workers; bad requests.
#include "worker/worker_core.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include "collective/store.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "interactive/interactive_model.h"
#include "spec/jobspec_validator.h"
#include "trainer/train_checkpoint.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

class WorkerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        std::string(std::getenv("TEST_TMPDIR")) + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }

  JobSpec Spec(const std::string& out, int workers = 1) {
    JobSpec spec;
    spec.set_name("core");
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_model()->set_dropout_rate(0.1f);
    spec.set_task("digits_to_words");
    spec.mutable_feature_lengths()->set_inputs(16);
    spec.mutable_feature_lengths()->set_targets(32);
    spec.set_batch_size(4);
    spec.set_num_workers(workers);
    spec.set_total_steps(20);
    spec.set_seed(5);
    spec.set_output_dir(root_ + "/" + out);
    spec.mutable_checkpoint()->set_async(false);
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    return spec;
  }

  // Runs `steps` from the job's start, checkpointing at the end of each
  // chunk of `chunk` steps.
  static absl::Status Run(WorkerCore& core, const std::string& id, int64_t first, int64_t steps, int64_t chunk) {
    for (int64_t s = first; s < first + steps; s += chunk) {
      RunStepsRequest run;
      run.set_job_id(id);
      run.set_first_step(s);
      run.set_num_steps(chunk);
      run.set_save_checkpoint(true);
      absl::StatusOr<RunStepsResponse> r = core.RunSteps(run);
      if (!r.ok()) return r.status();
    }
    return absl::OkStatus();
  }

  static absl::StatusOr<int64_t> Start(WorkerCore& core, const std::string& id, const JobSpec& spec,
                                       const std::string& named = "", int rank = 0, int world = 1) {
    StartJobRequest start;
    start.set_job_id(id);
    *start.mutable_spec() = spec;
    start.set_rank(rank);
    start.set_world_size(world);
    start.set_restore_checkpoint(named);
    absl::StatusOr<StartJobResponse> r = core.StartJob(start);
    if (!r.ok()) return r.status();
    return r->start_step();
  }

  // Options of workers that meet through one in-memory rendezvous store
  // (each group's scope a prefix of it), as in-process ranks of a job.
  static WorkerCoreOptions SharedStoreOptions() {
    auto store = std::make_shared<InMemoryStore>();
    WorkerCoreOptions options;
    options.store_factory = [store](const std::string& scope) -> std::shared_ptr<Store> {
      return std::make_shared<PrefixStore>(scope + "/", store.get());
    };
    return options;
  }

  static void End(WorkerCore& core, const std::string& id) {
    AbortJobRequest abort;
    abort.set_job_id(id);
    ASSERT_THAT(core.AbortJob(abort), IsOk());
    while (!core.job_id().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  std::string root_;
};

TEST_F(WorkerCoreTest, ResumingFromACheckpointIsExact) {
  WorkerCore core(WorkerCoreOptions{});
  ASSERT_THAT(Start(core, "a", Spec("a")).status(), IsOk());
  ASSERT_THAT(Run(core, "a", 0, 20, 10), IsOk());
  End(core, "a");
  // The same job again, from its step-10 checkpoint.
  JobSpec b = Spec("b");
  std::filesystem::create_directories(root_ + "/b");
  std::filesystem::copy(root_ + "/a/checkpoint_10", root_ + "/b/checkpoint_10",
                        std::filesystem::copy_options::recursive);
  absl::StatusOr<int64_t> start = Start(core, "b", b);  // LATEST finds checkpoint_10
  ASSERT_THAT(start.status(), IsOk());
  EXPECT_EQ(*start, 10);
  ASSERT_THAT(Run(core, "b", 10, 10, 10), IsOk());
  End(core, "b");
  auto whole = ReadTrainCheckpoint(root_ + "/a/checkpoint_20");
  auto resumed = ReadTrainCheckpoint(root_ + "/b/checkpoint_20");
  ASSERT_THAT(whole.status(), IsOk());
  ASSERT_THAT(resumed.status(), IsOk());
  for (const auto& [name, t] : whole->params) EXPECT_TRUE(torch::equal(t, resumed->params.at(name))) << name;
  for (const auto& [name, t] : whole->optimizer) EXPECT_TRUE(torch::equal(t, resumed->optimizer.at(name))) << name;
  EXPECT_EQ(whole->data_states, resumed->data_states);
  // RunSteps must continue where the job is.
  ASSERT_THAT(Start(core, "c", Spec("a"), root_ + "/a/checkpoint_10").status(), IsOk());
  RunStepsRequest wrong;
  wrong.set_job_id("c");
  wrong.set_first_step(0);
  wrong.set_num_steps(1);
  EXPECT_THAT(core.RunSteps(wrong).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("this rank is at step 10")));
  EXPECT_THAT(Start(core, "d", Spec("d")).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("busy with job 'c'")));
  End(core, "c");
}

TEST_F(WorkerCoreTest, AdoptReportsThePlaceStepAndLastChunkOfTheRunningAttempt) {
  WorkerCore core(WorkerCoreOptions{});
  ASSERT_THAT(Start(core, "a", Spec("a")).status(), IsOk());
  AdoptRequest adopt;
  adopt.set_job_id("a");
  absl::StatusOr<AdoptResponse> before = core.Adopt(adopt);
  ASSERT_THAT(before.status(), IsOk());
  EXPECT_EQ(before->step(), 0);
  EXPECT_FALSE(before->has_last_chunk());
  RunStepsRequest run;
  run.set_job_id("a");
  run.set_first_step(0);
  run.set_num_steps(3);
  absl::StatusOr<RunStepsResponse> ran = core.RunSteps(run);
  ASSERT_THAT(ran.status(), IsOk());
  run.set_first_step(3);
  run.set_num_steps(2);
  ran = core.RunSteps(run);
  ASSERT_THAT(ran.status(), IsOk());
  absl::StatusOr<AdoptResponse> after = core.Adopt(adopt);
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_EQ(after->rank(), 0);
  EXPECT_EQ(after->world_size(), 1);
  EXPECT_EQ(after->generation(), 0);
  EXPECT_EQ(after->step(), 5);
  EXPECT_EQ(after->last_chunk_first_step(), 3);
  EXPECT_EQ(after->last_chunk().last_step(), 5);
  EXPECT_EQ(after->last_chunk().metrics().at("loss"), ran->metrics().at("loss"));
  EXPECT_EQ(core.attempt(), 0);
  adopt.set_attempt(1);
  EXPECT_THAT(core.Adopt(adopt).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Adopt: job a runs attempt 0 here, not 1")));
  adopt.set_job_id("b");
  EXPECT_THAT(core.Adopt(adopt).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("this worker does not hold job 'b'")));
  End(core, "a");
}

TEST_F(WorkerCoreTest, RestoreOptions) {
  WorkerCore core(WorkerCoreOptions{});
  ASSERT_THAT(Start(core, "a", Spec("a")).status(), IsOk());
  ASSERT_THAT(Run(core, "a", 0, 20, 10), IsOk());
  End(core, "a");
  // LATEST skips a damaged newest checkpoint.
  {
    std::fstream f(root_ + "/a/checkpoint_20/params.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x01');
  }
  absl::StatusOr<int64_t> start = Start(core, "b", Spec("a"));
  ASSERT_THAT(start.status(), IsOk());
  EXPECT_EQ(*start, 10);
  End(core, "b");
  // A rename that drops a parameter: refused when strict, allowed when not
  // (and then the optimizer starts fresh at step 0).
  JobSpec renamed = Spec("r");
  renamed.mutable_restore()->set_mode(RestoreConfig::SPECIFIC);
  renamed.mutable_restore()->set_path(root_ + "/a/checkpoint_10");
  auto* drop = renamed.mutable_restore()->add_assignment_map();
  drop->set_pattern("encoder_relpos\\..*");
  drop->set_replacement("");
  EXPECT_THAT(Start(core, "c", renamed).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("encoder_relpos.rel_embedding")));
  renamed.mutable_restore()->set_strict(false);
  start = Start(core, "c", renamed);
  ASSERT_THAT(start.status(), IsOk());
  EXPECT_EQ(*start, 0);
  End(core, "c");
  // FINETUNING needs a checkpoint.
  JobSpec finetune = Spec("empty");
  finetune.set_kind(FINETUNING);
  EXPECT_THAT(Start(core, "e", finetune).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("FINETUNING job starts from a checkpoint")));
}

TEST_F(WorkerCoreTest, ARestartNamingADamagedCheckpointRestoresTheOneBeforeAndSavesItsStepAgain) {
  WorkerCore core(WorkerCoreOptions{});
  JobSpec spec = Spec("a");
  spec.set_total_steps(30);
  ASSERT_THAT(Start(core, "a", spec).status(), IsOk());
  ASSERT_THAT(Run(core, "a", 0, 30, 10), IsOk());
  End(core, "a");
  const std::string damaged = root_ + "/a/checkpoint_30";
  {
    std::fstream f(damaged + "/optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x01');
  }
  // The coordinator names the job's newest checkpoint, as a restart does.
  StartJobRequest start;
  start.set_job_id("b");
  *start.mutable_spec() = spec;
  start.set_world_size(1);
  start.set_restore_checkpoint(damaged);
  absl::StatusOr<StartJobResponse> started = core.StartJob(start);
  ASSERT_THAT(started.status(), IsOk());
  EXPECT_EQ(started->start_step(), 20);
  EXPECT_EQ(started->restored_checkpoint(), root_ + "/a/checkpoint_20");
  ASSERT_EQ(started->passed_over_size(), 1);
  EXPECT_THAT(started->passed_over(0),
              HasSubstr(damaged + " passed over: " + damaged + "/optimizer.safetensors: SHA-256 mismatch"));
  EXPECT_THAT(started->passed_over(0), HasSubstr("(moved aside to " + damaged + ".damaged-"));
  // Moved aside: the job saves step 30 again, and the set-aside copy stays.
  EXPECT_FALSE(std::filesystem::exists(damaged));
  ASSERT_THAT(Run(core, "b", 20, 10, 10), IsOk());
  End(core, "b");
  EXPECT_THAT(ReadTrainCheckpoint(damaged).status(), IsOk());
  int aside = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root_ + "/a")) {
    aside += entry.path().filename().string().rfind("checkpoint_30.damaged-", 0) == 0;
  }
  EXPECT_EQ(aside, 1);
  // Nothing of the job's own reads back: the spec's choice (LATEST in
  // output_dir) finds only damaged ones and says so.
  for (const char* step : {"10", "20", "30"}) {
    std::fstream f(root_ + "/a/checkpoint_" + step + "/params.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x02');
  }
  start.set_job_id("c");
  start.set_restore_checkpoint(damaged);
  EXPECT_THAT(core.StartJob(start).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("is damaged or incomplete")));
}

TEST_F(WorkerCoreTest, SaveCheckpointBetweenChunksWritesTheCurrentStep) {
  WorkerCore core(WorkerCoreOptions{});
  ASSERT_THAT(Start(core, "a", Spec("a")).status(), IsOk());
  RunStepsRequest run;
  run.set_job_id("a");
  run.set_first_step(0);
  run.set_num_steps(3);
  ASSERT_THAT(core.RunSteps(run).status(), IsOk());
  SaveCheckpointRequest save;
  save.set_job_id("a");
  save.set_step(2);
  EXPECT_THAT(core.SaveCheckpoint(save).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("this rank is at step 3")));
  save.set_step(3);
  save.set_wait(true);
  absl::StatusOr<SaveCheckpointResponse> saved = core.SaveCheckpoint(save);
  ASSERT_THAT(saved.status(), IsOk());
  EXPECT_EQ(saved->path(), root_ + "/a/checkpoint_3");
  absl::StatusOr<TrainCheckpoint> read = ReadTrainCheckpoint(saved->path());
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(read->step, 3);
  EXPECT_EQ(read->data_states.size(), 1u);
  // The same step again: the checkpoint it has, not a second write.
  EXPECT_EQ(core.SaveCheckpoint(save)->path(), root_ + "/a/checkpoint_3");
  save.set_job_id("nope");
  EXPECT_THAT(core.SaveCheckpoint(save).status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
  End(core, "a");
}

TEST_F(WorkerCoreTest, ADifferentNumberOfWorkersStartsTheNextEpoch) {
  {
    WorkerCore core(WorkerCoreOptions{});
    ASSERT_THAT(Start(core, "one", Spec("w")).status(), IsOk());
    ASSERT_THAT(Run(core, "one", 0, 10, 10), IsOk());
    End(core, "one");
  }
  WorkerCoreOptions options = SharedStoreOptions();
  WorkerCore r0(options), r1(options);
  std::vector<std::thread> ranks;
  std::vector<absl::Status> results(2);
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      WorkerCore& core = rank == 0 ? r0 : r1;
      absl::StatusOr<int64_t> start = Start(core, "two", Spec("w", 2), "", rank, 2);
      results[rank] = start.ok() ? Run(core, "two", *start, 2, 2) : start.status();
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_THAT(results[0], IsOk());
  ASSERT_THAT(results[1], IsOk());
  End(r0, "two");
  End(r1, "two");
  auto ckpt = ReadTrainCheckpoint(root_ + "/w/checkpoint_12");
  ASSERT_THAT(ckpt.status(), IsOk());
  EXPECT_EQ(ckpt->world_size, 2);
  ASSERT_EQ(ckpt->data_states.size(), 2u);
  // One worker had consumed part of epoch 0; two start at epoch 1.
  EXPECT_EQ(ckpt->data_states[0].substr(0, 2), "1 ");
  EXPECT_EQ(ckpt->data_states[1].substr(0, 2), "1 ");
}

// fault_tolerance ELASTIC: a worker builds the job ahead of its join
// (StartJob with `prepare`) while the running rank trains on; it holds the
// job, runs nothing, and when its group forms (the rank's Regroup, its
// StartJob with `join`) it receives the state and trains in step. One built
// ahead and let go (AbortJob, SIGTERM) frees the worker at once.
TEST_F(WorkerCoreTest, AJobBuiltAheadOfItsJoinReceivesTheStateWhenItsGroupForms) {
  WorkerCoreOptions options = SharedStoreOptions();
  WorkerCore r0(options), r1(options);
  JobSpec spec = Spec("ahead", 2);
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  ASSERT_THAT(Start(r0, "e", spec, "", 0, 1).status(), IsOk());  // a group of one (the other was lost)
  ASSERT_THAT(Run(r0, "e", 0, 2, 2), IsOk());
  StartJobRequest join;
  join.set_job_id("e");
  *join.mutable_spec() = spec;
  join.set_rank(1);
  join.set_world_size(2);
  join.set_join(true);
  StartJobRequest ahead = join;
  ahead.set_prepare(true);
  absl::StatusOr<StartJobResponse> built = r1.StartJob(ahead);
  ASSERT_THAT(built.status(), IsOk());
  EXPECT_EQ(built->start_step(), 0);
  EXPECT_EQ(r1.job_id(), "e");
  // It holds the job but no group: it runs nothing, and the rank trains on.
  RunStepsRequest run;
  run.set_job_id("e");
  run.set_first_step(0);
  run.set_num_steps(1);
  EXPECT_THAT(r1.RunSteps(run).status(), StatusIs(absl::StatusCode::kAborted, HasSubstr("waits for Regroup")));
  ASSERT_THAT(Run(r0, "e", 2, 2, 2), IsOk());
  // The group of two forms: the running rank regroups, the joiner joins.
  absl::StatusOr<RegroupResponse> regrouped;
  absl::StatusOr<StartJobResponse> joined;
  std::thread rank0([&] {
    RegroupRequest regroup;
    regroup.set_job_id("e");
    regroup.set_generation(1);
    regroup.set_rank(0);
    regroup.set_world_size(2);
    regrouped = r0.Regroup(regroup);
  });
  join.set_generation(1);
  joined = r1.StartJob(join);
  rank0.join();
  ASSERT_THAT(regrouped.status(), IsOk());
  ASSERT_THAT(joined.status(), IsOk());
  EXPECT_EQ(regrouped->step(), 4);
  EXPECT_EQ(joined->start_step(), 4);
  EXPECT_EQ(joined->joined().source_rank(), 0);
  EXPECT_GT(joined->joined().sent_bytes(), 0);
  EXPECT_EQ(joined->joined().state_digest(), regrouped->state_digest());
  std::vector<absl::Status> trained(2);
  std::thread second([&] { trained[1] = Run(r1, "e", 4, 2, 2); });
  trained[0] = Run(r0, "e", 4, 2, 2);
  second.join();
  EXPECT_THAT(trained[0], IsOk());
  EXPECT_THAT(trained[1], IsOk());
  End(r0, "e");
  End(r1, "e");
  // Built ahead and let go before it joined: free at once.
  WorkerCore r2(options);
  ahead.set_job_id("other");
  ASSERT_THAT(r2.StartJob(ahead).status(), IsOk());
  End(r2, "other");
  ASSERT_THAT(r2.StartJob(ahead).status(), IsOk());
  r2.Preempt();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!r2.job_id().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(r2.job_id(), "");
  // `prepare` is half of a join.
  ahead.set_join(false);
  EXPECT_THAT(r2.StartJob(ahead).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("set join too")));
}

// Probes `core`'s job `job_id` (of 2 ranks) every 20 ms, for up to 10 s,
// until it is blocked forming its group for at least `stalled_seconds`.
absl::StatusOr<ProbeResponse> ProbeUntilForming(WorkerCore& core, const std::string& job_id, double stalled_seconds) {
  ProbeRequest probe;
  probe.set_job_id(job_id);
  probe.add_peers("");
  probe.add_peers("");
  probe.set_connect_timeout_seconds(0.5);
  absl::StatusOr<ProbeResponse> forming;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    absl::SleepFor(absl::Milliseconds(20));
    forming = core.Probe(probe);  // kFailedPrecondition until the job is claimed
  } while (!(forming.ok() && forming->collective_waiting() && forming->stalled_seconds() >= stalled_seconds) &&
           absl::Now() < deadline);
  return forming;
}

// A rank whose peer never comes waits while its group forms: the probe
// says it is blocked since the start, and LeaveGroup of that generation
// ends its StartJob at once (kAborted, not at the collective timeout); the
// worker is free again.
TEST_F(WorkerCoreTest, AGroupThatCannotFormIsProbedAndAbortedOnRequest) {
  WorkerCoreOptions options = SharedStoreOptions();
  options.collective_timeout = absl::Seconds(5);  // the formation's thread ends by then
  WorkerCore r0(options);
  JobSpec spec = Spec("forming", 2);
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  absl::StatusOr<int64_t> started;
  absl::Duration took;
  std::thread start([&] {
    const absl::Time t0 = absl::Now();
    started = Start(r0, "f", spec, "", 0, 2);  // rank 1 never starts
    took = absl::Now() - t0;
  });
  absl::StatusOr<ProbeResponse> forming = ProbeUntilForming(r0, "f", 0.3);
  ASSERT_THAT(forming.status(), IsOk());
  EXPECT_TRUE(forming->collective_waiting());
  EXPECT_EQ(forming->generation(), 0);
  LeaveGroupRequest leave;
  leave.set_job_id("f");
  leave.set_generation(1);
  EXPECT_FALSE(r0.LeaveGroup(leave)->left());  // not the generation forming
  leave.set_generation(0);
  leave.set_reason("rank 1 did not answer the watchdog's probe");
  EXPECT_TRUE(r0.LeaveGroup(leave)->left());
  start.join();
  EXPECT_THAT(started.status(), StatusIs(absl::StatusCode::kAborted,
                                         HasSubstr("forming the group of generation 0 was aborted: rank 1 did "
                                                   "not answer the watchdog's probe")));
  EXPECT_LT(took, absl::Seconds(5));  // the collective timeout
  ASSERT_THAT(Start(r0, "next", Spec("next")).status(), IsOk());
  End(r0, "next");
}

// A start whose peer never comes (it died while the attempt started), torn
// down by AbortJob: its StartJob ends at once rather than at the collective
// timeout, and the worker is free for the next attempt.
TEST_F(WorkerCoreTest, AbortJobEndsAStartWhoseGroupCannotForm) {
  WorkerCoreOptions options = SharedStoreOptions();
  options.collective_timeout = absl::Seconds(5);  // the formation's thread ends by then
  WorkerCore r0(options);
  absl::StatusOr<int64_t> started;
  absl::Duration took;
  std::thread start([&] {
    const absl::Time t0 = absl::Now();
    started = Start(r0, "f", Spec("forming", 2), "", 0, 2);  // rank 1 never starts
    took = absl::Now() - t0;
  });
  ASSERT_THAT(ProbeUntilForming(r0, "f", 0).status(), IsOk());
  AbortJobRequest abort;
  abort.set_job_id("f");
  abort.set_reason("rank 1 failed to start");
  ASSERT_THAT(r0.AbortJob(abort), IsOk());
  start.join();
  EXPECT_THAT(started.status(), StatusIs(absl::StatusCode::kAborted,
                                         HasSubstr("was aborted: the job is torn down: rank 1 failed to start")));
  EXPECT_LT(took, absl::Seconds(5));  // the collective timeout
  const absl::Time free_by = absl::Now() + absl::Seconds(4);
  while (!r0.job_id().empty() && absl::Now() < free_by) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(r0.job_id(), "");
  ASSERT_THAT(Start(r0, "next", Spec("next")).status(), IsOk());
  End(r0, "next");
}

TEST_F(WorkerCoreTest, AStalledChunkIsProbedAndLeavesItsGroupOnRequest) {
  WorkerCoreOptions options = SharedStoreOptions();
  WorkerCore r0(options), r1(options);
  JobSpec spec = Spec("stall", 2);
  spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  {
    std::thread other([&] { ASSERT_THAT(Start(r1, "e", spec, "", 1, 2).status(), IsOk()); });
    ASSERT_THAT(Start(r0, "e", spec, "", 0, 2).status(), IsOk());
    other.join();
  }
  ProbeRequest probe;
  probe.set_job_id("e");
  probe.add_peers("");
  probe.add_peers("");
  probe.set_connect_timeout_seconds(0.5);
  absl::StatusOr<ProbeResponse> idle = r0.Probe(probe);
  ASSERT_THAT(idle.status(), IsOk());
  EXPECT_FALSE(idle->collective_waiting());
  EXPECT_EQ(idle->reachable_size(), 2);
  // Rank 1 never runs the chunk: rank 0 blocks in its first collective.
  absl::StatusOr<RunStepsResponse> ran;
  absl::Duration took;
  std::thread chunk([&] {
    RunStepsRequest run;
    run.set_job_id("e");
    run.set_first_step(0);
    run.set_num_steps(2);
    const absl::Time start = absl::Now();
    ran = r0.RunSteps(run);
    took = absl::Now() - start;
  });
  absl::StatusOr<ProbeResponse> stalled;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  do {
    absl::SleepFor(absl::Milliseconds(20));
    stalled = r0.Probe(probe);
    ASSERT_THAT(stalled.status(), IsOk());
  } while (!(stalled->collective_waiting() && stalled->stalled_seconds() >= 0.3) && absl::Now() < deadline);
  EXPECT_TRUE(stalled->collective_waiting());
  EXPECT_EQ(stalled->generation(), 0);
  LeaveGroupRequest leave;
  leave.set_job_id("e");
  leave.set_generation(1);
  leave.set_reason("rank 1 is unreachable");
  absl::StatusOr<LeaveGroupResponse> other_generation = r0.LeaveGroup(leave);
  ASSERT_THAT(other_generation.status(), IsOk());
  EXPECT_FALSE(other_generation->left());
  leave.set_generation(0);
  absl::StatusOr<LeaveGroupResponse> left = r0.LeaveGroup(leave);
  ASSERT_THAT(left.status(), IsOk());
  EXPECT_TRUE(left->left());
  chunk.join();
  EXPECT_THAT(ran.status(), StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 1 is unreachable")));
  EXPECT_LT(took, absl::Seconds(30));  // not the 60 s collective timeout
  // The rank left its group: nothing to wait in, and it says so.
  absl::StatusOr<ProbeResponse> after = r0.Probe(probe);
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_FALSE(after->collective_waiting());
  probe.set_connect_timeout_seconds(0);
  EXPECT_THAT(r0.Probe(probe).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  probe.set_job_id("nope");
  probe.set_connect_timeout_seconds(1);
  EXPECT_THAT(r0.Probe(probe).status(), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
  End(r0, "e");
  End(r1, "e");
}

TEST_F(WorkerCoreTest, AProbeWithoutAJobAnswersReachabilityOnly) {
  // A listening port (reached), one nothing listens on (refused), this
  // worker's own entry (empty).
  auto listen_on = [](int* fd) {
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(*fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(*fd, 4), 0);
    socklen_t len = sizeof(a);
    getsockname(*fd, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
  };
  int open_fd, closed_fd;
  const int open_port = listen_on(&open_fd);
  const int closed_port = listen_on(&closed_fd);
  close(closed_fd);
  WorkerCore idle{WorkerCoreOptions()};
  ProbeRequest probe;
  probe.add_peers(absl::StrCat("127.0.0.1:", open_port));
  probe.add_peers(absl::StrCat("127.0.0.1:", closed_port));
  probe.add_peers("");
  probe.set_connect_timeout_seconds(1);
  absl::StatusOr<ProbeResponse> answer = idle.Probe(probe);
  ASSERT_THAT(answer.status(), IsOk());
  EXPECT_EQ(std::vector<bool>(answer->reachable().begin(), answer->reachable().end()),
            std::vector<bool>({true, false, true}));
  EXPECT_FALSE(answer->collective_waiting());
  EXPECT_EQ(answer->step(), 0);
  probe.set_connect_timeout_seconds(0);
  EXPECT_THAT(idle.Probe(probe).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));
  close(open_fd);
}

TEST_F(WorkerCoreTest, ASessionServesTheInteractiveModelAndExcludesJobs) {
  WorkerCore core(WorkerCoreOptions{});
  const JobSpec spec = Spec("trained");
  ASSERT_THAT(Start(core, "j", spec).status(), IsOk());
  ASSERT_THAT(Run(core, "j", 0, 4, 4), IsOk());
  End(core, "j");
  for (int i = 0; i < 500 && !core.job_id().empty(); ++i) absl::SleepFor(absl::Milliseconds(10));
  const std::string ckpt = root_ + "/trained/checkpoint_4";

  WorkerOpenSessionRequest open;
  open.set_session_id("s1");
  open.mutable_request()->set_checkpoint(ckpt);
  open.mutable_request()->set_batch_size(2);
  open.mutable_request()->mutable_feature_lengths()->set_inputs(16);
  open.mutable_request()->mutable_feature_lengths()->set_targets(32);
  open.mutable_request()->set_output_dir(root_ + "/session");
  absl::StatusOr<OpenSessionResponse> opened = core.OpenSession(open);
  ASSERT_THAT(opened.status(), IsOk());
  EXPECT_EQ(opened->step(), 4);
  EXPECT_EQ(core.job_id(), "s1");  // heartbeats report the session
  EXPECT_THAT(Start(core, "j2", spec).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("busy with session 's1'")));
  open.set_session_id("s2");
  EXPECT_THAT(core.OpenSession(open).status(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'s1'")));

  // The same predictions as an interactive model opened here.
  InteractiveModelOptions local;
  local.batch_size = 2;
  local.task_feature_lengths = open.request().feature_lengths();
  local.restore.set_mode(RestoreConfig::SPECIFIC);
  local.restore.set_path(ckpt);
  auto model = std::move(InteractiveModel::Create(local)).value();
  const Inference want = *model->PredictWithAux({"12", "345", "6789"});
  SessionRequest run;
  run.set_session_id("s1");
  run.set_op(SessionRequest::PREDICT);
  for (const char* input : {"12", "345", "6789"}) run.add_examples()->set_input(input);
  absl::StatusOr<SessionResponse> got = core.RunSession(run);
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(std::vector<std::string>(got->predictions().begin(), got->predictions().end()), want.predictions);
  EXPECT_EQ(std::vector<double>(got->scores().begin(), got->scores().end()), want.aux.at("scores"));

  run.clear_examples();
  for (const char* input : {"12", "34"}) {
    SessionExample* e = run.add_examples();
    e->set_input(input);
    e->set_target(input == std::string("12") ? "twelve" : "thirty-four");
  }
  run.set_op(SessionRequest::TRAIN_STEP);
  got = core.RunSession(run);
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->step(), 5);
  EXPECT_GT(got->metrics().at("loss"), 0.0);
  run.set_op(SessionRequest::SAVE_CHECKPOINT);
  got = core.RunSession(run);
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->checkpoint(), root_ + "/session/checkpoint_5");
  run.set_op(SessionRequest::EVALUATE);
  run.add_metric_fns("no_such_metric");
  EXPECT_THAT(core.RunSession(run).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metric_fns: metric function 'no_such_metric'")));
  run.set_op(SessionRequest::OP_UNSPECIFIED);
  EXPECT_THAT(core.RunSession(run).status(), StatusCodeIs(absl::StatusCode::kInvalidArgument));

  AbortJobRequest close;
  close.set_job_id("s1");
  ASSERT_THAT(core.AbortJob(close), IsOk());
  EXPECT_EQ(core.job_id(), "");
  EXPECT_THAT(core.RunSession(run).status(), StatusCodeIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(Start(core, "j3", spec).status(), IsOk());  // free for jobs again
  End(core, "j3");
}

TEST_F(WorkerCoreTest, ASessionOnACudaWorkerUsesTheJobsCollective) {
  // A CUDA device's group is NCCL, for a session as for a job; a build
  // without NCCL refuses both alike (before any rendezvous).
  auto store = std::make_shared<InMemoryStore>();
  WorkerCoreOptions options;
  options.device = c10::Device(c10::DeviceType::CUDA, 0);
  options.collective_timeout = absl::Seconds(2);
  options.store_factory = [store](const std::string&) { return store; };
  WorkerCore core(options);
  const JobSpec spec = Spec("cuda", /*workers=*/2);
  const absl::Status job = Start(core, "j", spec, "", /*rank=*/0, /*world=*/2).status();
  EXPECT_THAT(job, StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("a CUDA device needs a build with NCCL (--config=cuda)")));
  WorkerOpenSessionRequest open;
  open.set_session_id("s");
  open.set_rank(0);
  open.set_world_size(2);
  open.mutable_request()->set_checkpoint(root_ + "/none");
  EXPECT_EQ(core.OpenSession(open).status(), job);
  EXPECT_EQ(core.job_id(), "");  // neither kept the worker
}

TEST_F(WorkerCoreTest, TeardownThreadsAreJoinedAsTheyEnd) {
  WorkerCore core(WorkerCoreOptions{});
  const JobSpec spec = Spec("jobs");
  for (int i = 0; i < 6; ++i) {
    const std::string id = absl::StrCat("j", i);
    ASSERT_THAT(Start(core, id, spec).status(), IsOk());
    End(core, id);  // AbortJob: the teardown runs on a thread of its own
  }
  // Each teardown's thread is joined once the next one starts: at most the
  // last is held, not one per job the worker ever ran.
  EXPECT_LE(core.background_threads(), 1u);
}

TEST_F(WorkerCoreTest, AConfigThatCannotBeWrittenFailsTheStart) {
  WorkerCore core(WorkerCoreOptions{});
  const JobSpec spec = Spec("unwritable");
  // A directory where the job's config.textproto goes: the durable write's
  // rename fails, and the job does not start without its config.
  std::filesystem::create_directories(spec.output_dir() + "/config.textproto/taken");
  EXPECT_THAT(Start(core, "j", spec).status(),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("output_dir: writing " + spec.output_dir() + "/config.textproto")));
  EXPECT_EQ(core.job_id(), "");
  ASSERT_THAT(Start(core, "j2", Spec("fine")).status(), IsOk());
  EXPECT_TRUE(std::filesystem::is_regular_file(root_ + "/fine/config.textproto"));
  End(core, "j2");
}

}  // namespace
}  // namespace trainyard
