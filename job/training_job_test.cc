// TrainingJob with its ranks as threads of this process (FakeCollective):
// the protocols that keep ranks together — a preemption on one rank stops
// every rank at the same step with one emergency checkpoint, an abort is no
// preemption, the restored step is agreed (and a rank that cannot read its
// checkpoint fails every rank at once), and diverged parameters are caught.
#include "job/training_job.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_vocabulary.h"
#include "collective/fake_collective.h"
#include "common/testing/status_matchers.h"
#include "common/torch/device.h"
#include "data/bundled.h"
#include "gtest/gtest.h"
#include "job/data_ledger.h"
#include "model/weights.h"
#include "nlohmann/json.hpp"
#include "spec/jobspec_validator.h"
#include "spec/presets.h"
#include "trainer/train_checkpoint.h"

namespace trainyard {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class TrainingJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }

  JobSpec Spec(const std::string& out, int workers) {
    JobSpec spec;
    spec.set_name("job");
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_model()->set_dropout_rate(0.0f);
    spec.set_task("digits_to_words");
    spec.mutable_feature_lengths()->set_inputs(16);
    spec.mutable_feature_lengths()->set_targets(32);
    spec.set_batch_size(4);
    spec.set_num_workers(workers);
    spec.set_total_steps(100);
    spec.set_seed(5);
    spec.set_output_dir(root_ + "/" + out);
    spec.mutable_checkpoint()->set_async(false);
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    return spec;
  }

  // A global batch of 12 rows over `world` ranks of `microbatches` each,
  // dropout 0.1, data_parallel.reproducible as given (not yet validated).
  JobSpec TwelveRowSpec(const std::string& out, int world, int microbatches, bool reproducible) {
    JobSpec spec = Spec(out, 1);
    spec.set_num_workers(world);
    spec.mutable_model()->set_dropout_rate(0.1f);
    spec.set_batch_size(12);
    spec.set_num_microbatches(microbatches);
    spec.mutable_data_parallel()->set_reproducible(reproducible);
    return spec;
  }

  // fault_tolerance ELASTIC for up to 3 ranks, a global batch of 6 rows
  // (not yet validated: callers add to it).
  JobSpec ElasticSpec(const std::string& out) {
    JobSpec spec = Spec(out, 2);
    spec.set_num_workers(3);
    spec.set_batch_size(6);
    spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
    return spec;
  }

  // The options of the ELASTIC tests' ranks (a fixed peak: no probe).
  static TrainingJobOptions ElasticOptions() {
    TrainingJobOptions options;
    options.id = "job";
    options.peak_flops = 1e12;
    return options;
  }

  // ELASTIC's groups in turn: 3 ranks (collectives 0-2), the 2 left when
  // rank 2 is lost (3-4), and 3 again with a joiner (5-7).
  static std::vector<std::unique_ptr<FakeCollective>> ThreeThenTwoThenThree() {
    std::vector<std::unique_ptr<FakeCollective>> out;
    for (int size : {3, 2, 3}) {
      auto group = std::make_shared<FakeGroup>(size, absl::Seconds(30));
      for (int r = 0; r < size; ++r) out.push_back(std::make_unique<FakeCollective>(group, r));
    }
    return out;
  }

  // One rank's job and the flags its owner raises.
  struct Rank {
    std::atomic<bool> stop{false};
    std::atomic<bool> preempted{false};
    std::unique_ptr<FakeCollective> collective;
    std::unique_ptr<TrainingJob> job;
  };

  // Runs body(rank) on `world` threads, each with its own Rank built from
  // spec_for(rank) (nullptr job when Create failed: its status in created).
  void OnRanks(int world, const std::function<JobSpec(int)>& spec_for, const std::function<void(int, Rank&)>& body,
               bool warm_up = true) {
    auto group = std::make_shared<FakeGroup>(world, absl::Seconds(30));
    std::vector<Rank> ranks(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        Rank& rank = ranks[r];
        rank.collective = std::make_unique<FakeCollective>(group, r);
        TrainingJobOptions options;
        options.id = "job";
        options.stop = &rank.stop;
        options.preempted = &rank.preempted;
        options.warm_up = warm_up;
        absl::StatusOr<std::unique_ptr<TrainingJob>> job =
            TrainingJob::Create(spec_for(r), rank.collective.get(), options);
        ASSERT_THAT(job.status(), IsOk());
        rank.job = std::move(*job);
        body(r, rank);
        rank.job.reset();
      });
    }
    for (auto& t : threads) t.join();
  }

  std::string root_;
};

// restore { mode: ALL } on two ranks: every good checkpoint once, in step
// order (100 before 1000), outputs named by the step and metrics at it, a
// half-written directory passed over, and the record a restarted attempt of
// the same job goes on after.
TEST_F(TrainingJobTest, RestoreAllInfersEveryGoodCheckpointOnceInStepOrderAndResumesAfterItsRecord) {
  const std::string swept = root_ + "/trained";
  std::filesystem::create_directories(swept);
  absl::StatusOr<ModelConfig> config = ResolveModelConfig(Spec("unused", 1).model());
  ASSERT_THAT(config.status(), IsOk());
  absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(*config, {});
  ASSERT_THAT(model.status(), IsOk());
  auto save = [&](int64_t step) {
    return WriteModelCheckpoint(*(*model)->network(), absl::StrCat(swept, "/checkpoint_", step), step, "test", "");
  };
  for (int64_t step : {1000, 100, 20}) ASSERT_THAT(save(step), IsOk());
  std::filesystem::create_directories(swept + "/checkpoint_50");         // no manifest: never complete
  std::filesystem::create_directories(swept + "/checkpoint_70.tmp-99");  // a save in progress
  JobSpec spec = Spec("unused", 2);
  spec.set_kind(EVALUATION);
  spec.set_total_steps(0);
  spec.set_output_dir(root_ + "/evaluated");
  spec.mutable_restore()->set_mode(RestoreConfig::ALL);
  spec.mutable_restore()->set_path(swept);
  spec.mutable_inference()->set_num_batches(1);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  auto sweep = [&](const std::string& id, int64_t after_step) {
    std::vector<std::vector<int64_t>> steps(2);
    std::vector<std::string> outputs, passed_over;
    auto group = std::make_shared<FakeGroup>(2, absl::Seconds(30));
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        FakeCollective collective(group, r);
        TrainingJobOptions options;
        options.id = id;
        absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &collective, options);
        ASSERT_THAT(job.status(), IsOk());
        absl::StatusOr<RestoreOutcome> restored = (*job)->Restore("");
        ASSERT_THAT(restored.status(), IsOk());
        EXPECT_EQ(restored->checkpoint, "");  // each in turn, by InferNext
        for (int64_t after = after_step;;) {
          absl::StatusOr<InferOutcome> inferred = (*job)->InferNext(after);
          ASSERT_THAT(inferred.status(), IsOk());
          if (r == 0) passed_over.insert(passed_over.end(), inferred->passed_over.begin(), inferred->passed_over.end());
          if (inferred->checkpoint_step < 0) break;
          steps[r].push_back(after = inferred->checkpoint_step);
          EXPECT_EQ((*job)->restored_step(), after);
          if (r == 0) outputs.push_back(inferred->output);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(steps[0], steps[1]);
    return std::make_tuple(steps[0], outputs, passed_over);
  };
  auto [steps, outputs, passed_over] = sweep("sweep-1", -1);
  EXPECT_EQ(steps, (std::vector<int64_t>{20, 100, 1000}));
  const std::string out = spec.output_dir();
  EXPECT_EQ(outputs, (std::vector<std::string>{out + "/inference/digits_to_words-validation-20.jsonl",
                                               out + "/inference/digits_to_words-validation-100.jsonl",
                                               out + "/inference/digits_to_words-validation-1000.jsonl"}));
  ASSERT_EQ(passed_over.size(), 1u);
  EXPECT_THAT(passed_over[0], HasSubstr(swept + "/checkpoint_50 passed over: "));
  for (int64_t step : steps) {
    std::ifstream in(absl::StrCat(out, "/inference_eval/digits_to_words-validation-", step, ".json"));
    ASSERT_TRUE(in) << step;
    EXPECT_EQ(nlohmann::json::parse(in)["checkpoint_step"], step);
  }
  EXPECT_FALSE(std::filesystem::exists(out + "/inference/digits_to_words-validation.jsonl"));
  EXPECT_EQ(ReadEvaluatedSteps(out, "sweep-1", swept), (std::vector<int64_t>{20, 100, 1000}));
  EXPECT_TRUE(ReadEvaluatedSteps(out, "another-job", swept).empty());
  EXPECT_TRUE(ReadEvaluatedSteps(out, "sweep-1", swept + "/elsewhere").empty());

  // A restarted attempt of the same job: nothing again, then the new one.
  ASSERT_THAT(save(2000), IsOk());
  std::tie(steps, outputs, passed_over) = sweep("sweep-1", -1);
  EXPECT_EQ(steps, (std::vector<int64_t>{2000}));
  EXPECT_EQ(ReadEvaluatedSteps(out, "sweep-1", swept), (std::vector<int64_t>{20, 100, 1000, 2000}));
  // Another job in the same output_dir evaluates everything (from scratch).
  std::tie(steps, outputs, passed_over) = sweep("sweep-2", -1);
  EXPECT_EQ(steps, (std::vector<int64_t>{20, 100, 1000, 2000}));
  EXPECT_EQ(ReadEvaluatedSteps(out, "sweep-2", swept), (std::vector<int64_t>{20, 100, 1000, 2000}));
}

// Sampling is keyed by the example, not by the rank that decodes it: an
// INFERENCE job that samples writes the same texts on 1, 2 and 4 ranks. The
// scores agree to rounding only: a rank's batch of 4, 2 or 1 rows takes
// other BLAS kernels (docs/architecture.md, "Decoding").
TEST_F(TrainingJobTest, SampledPredictionsAreTheSameOnAnyNumberOfRanks) {
  const std::string ckpt = root_ + "/model/checkpoint_1";
  std::filesystem::create_directories(root_ + "/model");
  auto spec_for = [&](int world) {
    JobSpec spec = Spec(absl::StrCat("sampled-", world), world);
    spec.mutable_model()->set_vocab_size(128);  // the task vocabulary's: every sampled id is a piece
    spec.set_kind(INFERENCE);
    spec.set_total_steps(0);
    spec.mutable_restore()->set_mode(RestoreConfig::SPECIFIC);
    spec.mutable_restore()->set_path(ckpt);
    InferenceConfig* inference = spec.mutable_inference();
    inference->set_method(InferenceConfig::SAMPLE);
    inference->set_temperature(1.5f);  // flat: every key samples its own text
    inference->set_max_decode_length(8);
    inference->set_num_batches(3);  // global batches: the split's first 12 examples on any world size
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    return spec;
  };
  absl::StatusOr<ModelConfig> config = ResolveModelConfig(spec_for(1).model());
  ASSERT_THAT(config.status(), IsOk());
  ModelOptions model_options;
  model_options.init_seed = 9;
  absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(*config, model_options);
  ASSERT_THAT(model.status(), IsOk());
  ASSERT_THAT(WriteModelCheckpoint(*(*model)->network(), ckpt, 1, "test", ""), IsOk());
  std::map<int, std::vector<nlohmann::json>> lines;  // by world size
  for (int world : {1, 2, 4}) {
    const JobSpec spec = spec_for(world);
    std::string output;
    OnRanks(
        world, [&](int) { return spec; },
        [&](int r, Rank& rank) {
          ASSERT_THAT(rank.job->Restore("").status(), IsOk());
          absl::StatusOr<InferOutcome> inferred = rank.job->Infer();
          ASSERT_THAT(inferred.status(), IsOk());
          if (r == 0) output = inferred->output;
        },
        /*warm_up=*/false);
    std::ifstream in(output);
    for (std::string line; std::getline(in, line);) lines[world].push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines[1].size(), 12u);
  std::set<std::string> texts;
  for (int world : {2, 4}) {
    ASSERT_EQ(lines[world].size(), 12u) << world;
    for (size_t i = 0; i < 12; ++i) {
      const nlohmann::json &a = lines[1][i], &b = lines[world][i];
      EXPECT_EQ(b["index"], a["index"]);
      EXPECT_EQ(b["input"], a["input"]);
      EXPECT_EQ(b["prediction"], a["prediction"]) << "world " << world << ", example " << i;
      EXPECT_NEAR(b["prediction_score"].get<double>(), a["prediction_score"].get<double>(), 1e-4);
      EXPECT_NEAR(b["target_score"].get<double>(), a["target_score"].get<double>(), 1e-4);
      texts.insert(a["prediction"].get<std::string>());
    }
  }
  // Not one text for all: the examples' keys differ.
  EXPECT_GT(texts.size(), 6u);
}

// data_parallel.reproducible: one run on 1, 2, 3 and 4 ranks (a global
// batch of 12 rows in microbatches of 1 row: 12, 6, 4 and 3 per rank),
// dropout and packing on, ends with the same bytes of parameters and
// optimizer state and the same train and eval metrics (all but timing/); a
// checkpoint written at step 2 on 2 ranks and resumed on 3 ends as the run
// on 1 does. Without reproducible, 2 ranks end elsewhere than 1.
TEST_F(TrainingJobTest, AReproducibleJobTrainsTheSameBitsOnAnyNumberOfRanks) {
  auto spec_for = [&](const std::string& out, int world, bool reproducible) {
    JobSpec spec = TwelveRowSpec(out, world, 12 / world, reproducible);
    spec.mutable_data()->set_pack(true);
    spec.set_total_steps(4);
    spec.mutable_eval()->add_tasks("digits_to_words");
    spec.mutable_eval()->set_num_batches(2);
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    return spec;
  };
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << path;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  struct Result {
    std::string state;                      // parameters and optimizer state
    std::map<std::string, double> metrics;  // the last chunk's, but timing/
    bool operator==(const Result& other) const { return state == other.state && metrics == other.metrics; }
  };
  auto run = [&](const std::string& out, int world, bool reproducible, const std::string& resume) {
    const JobSpec spec = spec_for(out, world, reproducible);
    Result result;
    OnRanks(
        world, [&](int) { return spec; },
        [&](int r, Rank& rank) {
          ASSERT_THAT(rank.job->Restore(resume).status(), IsOk());
          if (resume.empty()) {
            ASSERT_THAT(rank.job->Train(2).status(), IsOk());
            ASSERT_THAT(rank.job->SaveCheckpoint(true).status(), IsOk());
          }
          absl::StatusOr<TrainChunk> chunk = rank.job->Train(2);
          ASSERT_THAT(chunk.status(), IsOk());
          ASSERT_THAT(rank.job->SaveCheckpoint(true).status(), IsOk());
          absl::StatusOr<EvalOutcome> eval = rank.job->Evaluate();
          ASSERT_THAT(eval.status(), IsOk());
          if (r != 0) return;
          for (const auto& [k, v] : chunk->summary) {
            if (!absl::StartsWith(k, "timing/")) result.metrics[k] = v;
          }
          for (const auto& [k, v] : eval->metrics) {
            if (!absl::StrContains(k, "timing/")) result.metrics["eval:" + k] = v;
          }
        },
        /*warm_up=*/false);
    result.state = bytes(root_ + "/" + out + "/checkpoint_4/params.safetensors") +
                   bytes(root_ + "/" + out + "/checkpoint_4/optimizer.safetensors");
    return result;
  };
  const Result one = run("w1", 1, true, "");
  ASSERT_GT(one.state.size(), 100000u);
  ASSERT_GT(one.metrics.size(), 10u);
  EXPECT_GT(one.metrics.at("loss"), 0);
  ASSERT_EQ(one.metrics.count("eval:digits_to_words/loss"), 1u);
  EXPECT_GT(one.metrics.at("eval:digits_to_words/loss"), 0);
  for (int world : {2, 3, 4}) {
    const Result other = run(absl::StrCat("w", world), world, true, "");
    EXPECT_TRUE(other.state == one.state) << world << " ranks";
    for (const auto& [k, v] : one.metrics) EXPECT_EQ(other.metrics.at(k), v) << world << " ranks: " << k;
  }
  // The scales of the step after the checkpoint are in it.
  absl::StatusOr<TrainCheckpoint> saved = ReadTrainCheckpoint(root_ + "/w2/checkpoint_2");
  ASSERT_THAT(saved.status(), IsOk());
  EXPECT_FALSE(saved->exact_sum_exponents.empty());
  EXPECT_EQ(saved->data_states.size(), 1u);  // the global position
  EXPECT_TRUE(run("resumed", 3, true, root_ + "/w2/checkpoint_2") == one);
  EXPECT_FALSE(run("float", 2, false, "").state == run("float1", 1, false, "").state);
}

// data_parallel.reproducible with every sharding mode: with OPTIMIZER every
// rank sums the whole gradients exactly and updates its shard; with
// GRADIENTS and PARAMETERS the ranks reduce-scatter the integers of each
// microbatch (packed rows, dropout on) and keep their shard's sums. 2, 3
// and 4 ranks end with the parameters and (merged) optimizer state of one
// unsharded rank, and so does a sharded checkpoint resumed on another
// number of ranks.
TEST_F(TrainingJobTest, AReproducibleShardedJobTrainsTheSameBits) {
  // Trains to step `end` (from `resume`, a checkpoint, or the start).
  auto run = [&](const std::string& out, int world, DataParallelConfig::Sharding sharding,
                 const std::string& resume = "", int end = 3) {
    JobSpec spec = TwelveRowSpec(out, world, 12 / world, /*reproducible=*/true);
    spec.mutable_data()->set_pack(true);
    spec.mutable_data_parallel()->set_sharding(sharding);
    spec.set_total_steps(end);
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    OnRanks(
        world, [&](int) { return spec; },
        [&](int, Rank& rank) {
          absl::StatusOr<RestoreOutcome> start = rank.job->Restore(resume);
          ASSERT_THAT(start.status(), IsOk());
          EXPECT_EQ(start->step, resume.empty() ? 0 : 3);
          ASSERT_THAT(rank.job->Train(end - start->step).status(), IsOk());
          ASSERT_THAT(rank.job->SaveCheckpoint(true).status(), IsOk());
        },
        /*warm_up=*/false);
    absl::StatusOr<TrainCheckpoint> saved = ReadTrainCheckpoint(absl::StrCat(root_, "/", out, "/checkpoint_", end));
    EXPECT_THAT(saved.status(), IsOk());
    return saved.ok() ? std::move(*saved) : TrainCheckpoint();
  };
  const TrainCheckpoint one = run("opt1", 1, DataParallelConfig::NONE);
  ASSERT_GT(one.params.size(), 10u);
  ASSERT_GT(one.optimizer.size(), 10u);
  const std::vector<std::pair<DataParallelConfig::Sharding, int>> runs = {
      {DataParallelConfig::OPTIMIZER, 2}, {DataParallelConfig::OPTIMIZER, 3},  {DataParallelConfig::GRADIENTS, 2},
      {DataParallelConfig::GRADIENTS, 4}, {DataParallelConfig::PARAMETERS, 2}, {DataParallelConfig::PARAMETERS, 3},
      {DataParallelConfig::PARAMETERS, 4}};
  for (const auto& [sharding, world] : runs) {
    const std::string what = absl::StrCat(DataParallelConfig::Sharding_Name(sharding), " on ", world, " ranks: ");
    const TrainCheckpoint sharded =
        run(absl::StrCat(DataParallelConfig::Sharding_Name(sharding), world), world, sharding);
    EXPECT_EQ(sharded.optimizer_shards, world) << what;
    ASSERT_EQ(sharded.params.size(), one.params.size()) << what;
    for (const auto& [name, t] : one.params) EXPECT_TRUE(torch::equal(sharded.params.at(name), t)) << what << name;
    ASSERT_EQ(sharded.optimizer.size(), one.optimizer.size()) << what;
    for (const auto& [name, t] : one.optimizer) {
      EXPECT_TRUE(torch::equal(sharded.optimizer.at(name), t)) << what << name;
    }
  }
  // The PARAMETERS checkpoint of 2 ranks (its shards' files) resumed on 3
  // with GRADIENTS: two more steps end as 1 rank's 5 do.
  const TrainCheckpoint five = run("five1", 1, DataParallelConfig::NONE, "", 5);
  const TrainCheckpoint resumed =
      run("resumed3", 3, DataParallelConfig::GRADIENTS, root_ + "/PARAMETERS2/checkpoint_3", 5);
  ASSERT_EQ(resumed.params.size(), five.params.size());
  for (const auto& [name, t] : five.params) EXPECT_TRUE(torch::equal(resumed.params.at(name), t)) << name;
  for (const auto& [name, t] : five.optimizer) EXPECT_TRUE(torch::equal(resumed.optimizer.at(name), t)) << name;
  EXPECT_FALSE(torch::equal(five.params.begin()->second, one.params.begin()->second));
}

TEST_F(TrainingJobTest, APreemptionOnOneRankStopsEveryRankAtTheSameStepWithOneEmergencyCheckpoint) {
  const JobSpec spec = Spec("preempted", 2);
  OnRanks(
      2, [&](int) { return spec; },
      [&](int r, Rank& rank) {
        ASSERT_THAT(rank.job->Restore("").status(), IsOk());
        ASSERT_THAT(rank.job->Train(3).status(), IsOk());
        if (r == 1) {  // rank 1's worker got SIGTERM
          rank.preempted = true;
          rank.stop = true;
        }
        absl::StatusOr<TrainChunk> chunk = rank.job->Train(5);
        ASSERT_THAT(chunk.status(), IsOk());
        EXPECT_TRUE(chunk->preempted) << r;
        EXPECT_EQ(chunk->asked_to_stop, r == 1);
        EXPECT_EQ(rank.job->step(), 3) << r;  // both stopped at the first boundary
        EXPECT_EQ(chunk->emergency_checkpoint, r == 0 ? spec.output_dir() + "/checkpoint_3" : "");
      });
  absl::StatusOr<TrainCheckpoint> saved = ReadTrainCheckpoint(spec.output_dir() + "/checkpoint_3");
  ASSERT_THAT(saved.status(), IsOk());
  EXPECT_EQ(saved->step, 3);
  EXPECT_EQ(saved->data_states.size(), 2u);  // every rank's data position
  EXPECT_EQ(ListCheckpoints(spec.output_dir()).size(), 1u);
  absl::StatusOr<std::vector<LedgerEntry>> ledger = ReadLedger(LedgerPath(spec.output_dir()));
  ASSERT_THAT(ledger.status(), IsOk());
  ASSERT_EQ(ledger->size(), 3u);  // the preempted chunk trained none
  EXPECT_EQ(ledger->back().step, 3);
}

TEST_F(TrainingJobTest, AStopWithoutAPreemptionIsAnAbortOnEveryRank) {
  const JobSpec spec = Spec("aborted", 2);
  OnRanks(
      2, [&](int) { return spec; },
      [&](int r, Rank& rank) {
        ASSERT_THAT(rank.job->Restore("").status(), IsOk());
        if (r == 0) rank.stop = true;
        EXPECT_THAT(rank.job->Train(4).status(),
                    StatusIs(absl::StatusCode::kAborted, HasSubstr("job job was aborted at step 0")));
      });
  EXPECT_TRUE(ListCheckpoints(root_ + "/aborted").empty());
}

TEST_F(TrainingJobTest, RanksThatFindDifferentCheckpointsAgreeToFail) {
  // Rank 0's output_dir has checkpoint_2; rank 1's (a disk of its own) none.
  OnRanks(
      1, [&](int) { return Spec("a", 1); },
      [&](int, Rank& rank) {
        ASSERT_THAT(rank.job->Restore("").status(), IsOk());
        ASSERT_THAT(rank.job->Train(2).status(), IsOk());
        ASSERT_THAT(rank.job->SaveCheckpoint(true).status(), IsOk());
      });
  OnRanks(
      2, [&](int r) { return Spec(r == 0 ? "a" : "b", 2); },
      [&](int, Rank& rank) {
        EXPECT_THAT(rank.job->Restore("").status(),
                    StatusIs(absl::StatusCode::kFailedPrecondition,
                             HasSubstr("the ranks hold different values (-1 to 2): the ranks found different "
                                       "checkpoints; output_dir must be on a filesystem every worker shares")));
      });
}

TEST_F(TrainingJobTest, ARankThatCannotReadTheCheckpointFailsEveryRankAtOnce) {
  OnRanks(
      1, [&](int) { return Spec("a", 1); },
      [&](int, Rank& rank) {
        ASSERT_THAT(rank.job->Restore("").status(), IsOk());
        ASSERT_THAT(rank.job->Train(2).status(), IsOk());
        ASSERT_THAT(rank.job->SaveCheckpoint(true).status(), IsOk());
      });
  // Rank 1 is told to restore a SPECIFIC checkpoint that is not there.
  OnRanks(
      2,
      [&](int r) {
        JobSpec spec = Spec("a", 2);
        spec.mutable_restore()->set_mode(RestoreConfig::SPECIFIC);
        spec.mutable_restore()->set_path(root_ + (r == 1 ? "/missing/checkpoint_2" : "/a/checkpoint_2"));
        return spec;
      },
      [&](int r, Rank& rank) {
        const absl::Status s = rank.job->Restore("").status();
        if (r == 1) {
          EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing/checkpoint_2"))) << s;
        } else {
          EXPECT_THAT(s,
                      StatusIs(absl::StatusCode::kAborted, HasSubstr("restoring the checkpoint failed on rank(s) 1")));
        }
      });
}

TEST_F(TrainingJobTest, ARestartAgreesOnTheStepAndResumesExactly) {
  const JobSpec spec = Spec("resume", 2);
  std::vector<std::vector<torch::Tensor>> straight(2), resumed(2);
  OnRanks(
      2, [&](int) { return spec; },
      [&](int r, Rank& rank) {
        ASSERT_THAT(rank.job->Restore("").status(), IsOk());
        ASSERT_THAT(rank.job->Train(2).status(), IsOk());
        ASSERT_THAT(rank.job->SaveCheckpoint(true).status(), IsOk());
        ASSERT_THAT(rank.job->Train(2).status(), IsOk());
        for (const auto& p : rank.job->model()->parameters()) straight[r].push_back(p.detach().clone());
      });
  OnRanks(
      2, [&](int) { return spec; },
      [&](int r, Rank& rank) {
        absl::StatusOr<RestoreOutcome> restored = rank.job->Restore(spec.output_dir() + "/checkpoint_2");
        ASSERT_THAT(restored.status(), IsOk());
        EXPECT_EQ(restored->step, 2);
        EXPECT_TRUE(restored->passed_over.empty());
        ASSERT_THAT(rank.job->Train(2).status(), IsOk());
        for (const auto& p : rank.job->model()->parameters()) resumed[r].push_back(p.detach().clone());
      });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(straight[r].size(), resumed[r].size());
    for (size_t i = 0; i < straight[r].size(); ++i) EXPECT_TRUE(torch::equal(straight[r][i], resumed[r][i])) << i;
  }
  // The data ledger: steps 1..4, then 3 and 4 again on the same examples.
  absl::StatusOr<std::vector<LedgerEntry>> ledger = ReadLedger(LedgerPath(spec.output_dir()));
  ASSERT_THAT(ledger.status(), IsOk());
  ASSERT_EQ(ledger->size(), 6u);
  std::set<uint64_t> digests;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*ledger)[i].step, i + 1);
    EXPECT_GE((*ledger)[i].examples, 4);  // 2 ranks x 2 rows, packed
    digests.insert((*ledger)[i].digest);
  }
  EXPECT_EQ(digests.size(), 4u);
  EXPECT_EQ((*ledger)[4], (*ledger)[2]);
  EXPECT_EQ((*ledger)[5], (*ledger)[3]);
}

TEST_F(TrainingJobTest, DivergedParametersAreCaughtOnEveryRankNamingTheParameter) {
  const JobSpec spec = Spec("diverged", 2);
  OnRanks(
      2, [&](int) { return spec; },
      [&](int r, Rank& rank) {
        ASSERT_THAT(rank.job->Restore("").status(), IsOk());
        ASSERT_THAT(rank.job->Train(1).status(), IsOk());
        if (r == 1) {
          torch::NoGradGuard no_grad;
          rank.job->model()->parameters()[3].add_(1e-3);  // a bit flip, a bad host
        }
        EXPECT_THAT(rank.job->Train(1).status(),
                    StatusIs(absl::StatusCode::kInternal,
                             HasSubstr("parameters diverged across ranks at step 2: parameter #3 sums to")));
      });
}

TEST_F(TrainingJobTest, WeightMetricsJoinTheSummaryWhenTheSpecAsks) {
  LocalCollective local;
  for (bool on : {false, true}) {
    JobSpec spec = Spec(on ? "on" : "off", 1);
    spec.mutable_summary()->set_weight_metrics(on);
    absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &local, {});
    ASSERT_THAT(job.status(), IsOk());
    ASSERT_THAT((*job)->Restore("").status(), IsOk());
    absl::StatusOr<TrainChunk> chunk = (*job)->Train(2);
    ASSERT_THAT(chunk.status(), IsOk());
    const auto& summary = chunk->summary;
    EXPECT_EQ(summary.count("weight_gradient_norm"), on ? 1u : 0u);
    int per_parameter = 0;
    for (const auto& [k, v] : summary) per_parameter += k.rfind("weight_rms/", 0) == 0;
    // tiny's 52 parameters: the embedding and output layer; per encoder
    // layer 4 attention projections, 3 feed-forward matrices, 2 norms (x 2);
    // per decoder layer 8, 3 and 3 (x 2); a relative bias and a final norm
    // per stack.
    EXPECT_EQ(per_parameter, on ? 52 : 0);
    if (on) {
      EXPECT_GT(summary.at("weight_gradient_norm"), 0.0);
    }
  }
}

TEST_F(TrainingJobTest, TheSummaryCountsModelFlopsAndTheirUtilisation) {
  LocalCollective local;
  JobSpec spec = Spec("mfu", 1);
  TrainingJobOptions options;
  options.peak_flops = 1e12;
  absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &local, options);
  ASSERT_THAT(job.status(), IsOk());
  ASSERT_THAT((*job)->Restore("").status(), IsOk());
  absl::StatusOr<TrainChunk> chunk = (*job)->Train(2);
  ASSERT_THAT(chunk.status(), IsOk());
  const auto& summary = chunk->summary;
  // 3 x the forward of one 16/32-token example x 4 rows x 2 steps.
  const double forward = ForwardFlopsPerExample(*PresetConfig("tiny"), 16, 32);
  EXPECT_DOUBLE_EQ(summary.at("timing/model_flops"), 3 * forward * 4 * 2);
  EXPECT_DOUBLE_EQ(summary.at("timing/mfu"), summary.at("timing/model_flops_per_second_per_core") / 1e12);
  EXPECT_EQ(summary.count("timing/mfu_vs_measured_peak"), 0u);  // a given peak: no probe
}

TEST_F(TrainingJobTest, WithoutAGivenPeakMfuIsAgainstTheKnownPeakAndTheProbe) {
  LocalCollective local;
  absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(Spec("mfu", 1), &local, {});
  ASSERT_THAT(job.status(), IsOk());
  ASSERT_THAT((*job)->Restore("").status(), IsOk());
  absl::StatusOr<TrainChunk> chunk = (*job)->Train(2);
  ASSERT_THAT(chunk.status(), IsOk());
  const auto& summary = chunk->summary;
  const double achieved = summary.at("timing/model_flops_per_second_per_core");
  const torch::Device cpu(torch::kCPU);
  const double probe = MeasurePeakFlops(cpu, torch::kFloat32);  // measured once per process
  absl::StatusOr<PeakFlops> known = DevicePeakFlops(cpu, torch::kFloat32);
  EXPECT_DOUBLE_EQ(summary.at("timing/mfu"), achieved / (known.ok() ? known->flops : probe));
  EXPECT_DOUBLE_EQ(summary.at("timing/mfu_vs_measured_peak"), achieved / probe);
}

// Keys of `a` that `b` lacks.
std::set<std::string> KeysNotIn(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  std::set<std::string> out;
  for (const auto& [k, v] : a) {
    if (!b.count(k)) out.insert(k);
  }
  return out;
}

// T5X's timing/compilation_seconds: the warm-up before the attempt's first
// step is in the first train summary only, on every rank; the eval step's
// in each eval task's first summary only.
TEST_F(TrainingJobTest, TheFirstSummariesCarryTheWarmUpsCompilationSeconds) {
  JobSpec spec = Spec("compiled", 2);
  spec.mutable_eval()->add_tasks("digits_to_words");
  spec.mutable_eval()->set_num_batches(1);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  std::vector<std::map<std::string, double>> first(2), second(2);
  std::map<std::string, double> first_eval, second_eval;
  OnRanks(
      2, [&](int) { return spec; },
      [&](int r, Rank& rank) {
        ASSERT_THAT(rank.job->Restore("").status(), IsOk());
        absl::StatusOr<TrainChunk> chunk = rank.job->Train(2);
        ASSERT_THAT(chunk.status(), IsOk());
        first[r] = chunk->summary;
        chunk = rank.job->Train(2);
        ASSERT_THAT(chunk.status(), IsOk());
        second[r] = chunk->summary;
        absl::StatusOr<EvalOutcome> eval = rank.job->Evaluate();
        ASSERT_THAT(eval.status(), IsOk());
        if (r == 0) first_eval = eval->metrics;
        eval = rank.job->Evaluate();
        ASSERT_THAT(eval.status(), IsOk());
        if (r == 0) second_eval = eval->metrics;
      });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(first[r].count("timing/compilation_seconds"), 1u) << r;
    EXPECT_GT(first[r].at("timing/compilation_seconds"), 0.0) << r;
    EXPECT_EQ(KeysNotIn(first[r], second[r]), std::set<std::string>{"timing/compilation_seconds"}) << r;
    EXPECT_TRUE(KeysNotIn(second[r], first[r]).empty()) << r;
  }
  ASSERT_EQ(first_eval.count("digits_to_words/timing/compilation_seconds"), 1u);
  EXPECT_GT(first_eval.at("digits_to_words/timing/compilation_seconds"), 0.0);
  EXPECT_EQ(KeysNotIn(first_eval, second_eval), std::set<std::string>{"digits_to_words/timing/compilation_seconds"});
  EXPECT_TRUE(KeysNotIn(second_eval, first_eval).empty());
}

// With dropout and two microbatches on two ranks, a job with the warm-ups
// (train and eval) ends bit for bit where one without them does: the
// parameters, and the digest of parameters, optimizer state, step and data
// position.
TEST_F(TrainingJobTest, TheWarmUpLeavesTheTrainingBitForBitAsItWas) {
  JobSpec spec = Spec("warm", 2);
  spec.mutable_model()->set_dropout_rate(0.1f);
  spec.set_num_microbatches(2);
  spec.mutable_eval()->add_tasks("digits_to_words");
  spec.mutable_eval()->set_num_batches(1);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  std::map<bool, std::vector<std::vector<torch::Tensor>>> params;
  std::map<bool, std::vector<uint64_t>> digests;
  std::map<bool, std::map<std::string, double>> summaries;
  for (bool warm_up : {true, false}) {
    params[warm_up].resize(2);
    digests[warm_up].resize(2);
    OnRanks(
        2, [&](int) { return spec; },
        [&](int r, Rank& rank) {
          ASSERT_THAT(rank.job->Restore("").status(), IsOk());
          absl::StatusOr<TrainChunk> chunk = rank.job->Train(2);
          ASSERT_THAT(chunk.status(), IsOk());
          if (r == 0) summaries[warm_up] = chunk->summary;
          ASSERT_THAT(rank.job->Evaluate().status(), IsOk());
          ASSERT_THAT(rank.job->Train(2).status(), IsOk());
          for (const auto& p : rank.job->model()->parameters()) params[warm_up][r].push_back(p.detach().clone());
          digests[warm_up][r] = rank.job->StateDigest();
        },
        warm_up);
  }
  EXPECT_EQ(summaries[true].count("timing/compilation_seconds"), 1u);  // it did warm up
  EXPECT_EQ(summaries[false].count("timing/compilation_seconds"), 0u);
  EXPECT_EQ(summaries[true].at("loss"), summaries[false].at("loss"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(digests[true][r], digests[false][r]) << r;
    ASSERT_EQ(params[true][r].size(), params[false][r].size());
    for (size_t i = 0; i < params[true][r].size(); ++i) {
      EXPECT_TRUE(torch::equal(params[true][r][i], params[false][r][i])) << "rank " << r << " parameter " << i;
    }
  }
}

TEST_F(TrainingJobTest, BadSpecsAreRefusedByField) {
  LocalCollective local;
  JobSpec spec = Spec("bad", 1);
  spec.set_task("no_such_task");
  EXPECT_THAT(TrainingJob::Create(spec, &local, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("task: ")));
  spec = Spec("bad", 1);
  spec.set_num_microbatches(3);
  EXPECT_THAT(TrainingJob::Create(spec, &local, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_microbatches: 3 does not divide the per-worker batch of 4 rows")));
  // A vocabulary with more ids than the model has embeddings.
  spec = Spec("bad", 1);
  std::ofstream(root_ + "/qa.tsv") << "1\tone\n2\ttwo\n";
  TaskDefinition* big = spec.add_task_definitions();
  big->set_name("big_vocabulary");
  (*big->mutable_splits())["train"] = root_ + "/qa.tsv";
  big->set_extra_ids(1000);
  spec.set_task("big_vocabulary");
  EXPECT_THAT(TrainingJob::Create(spec, &local, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("task big_vocabulary: its vocabulary has "),
                             HasSubstr(" and 1000 extra ids), more than the model's vocab_size 512"))));
  auto group = std::make_shared<FakeGroup>(3, absl::Seconds(1));
  FakeCollective three(group, 0);
  EXPECT_THAT(
      TrainingJob::Create(Spec("bad", 1), &three, {}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size: 4 is not a multiple of num_workers 3")));
}

// fault_tolerance ELASTIC: ranks 0 and 1 of 3 go on in a group of 2 (rank 2
// lost) with their state, then a fresh rank joins a group of 3 and receives
// the state by broadcast, bit for bit; the global batch does not depend on
// the number of ranks, so the run stays within rounding of one rank's.
TEST_F(TrainingJobTest, ElasticRanksRegroupAndAFreshRankReceivesTheStateBitForBit) {
  JobSpec spec = ElasticSpec("elastic");
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  const TrainingJobOptions options = ElasticOptions();
  std::vector<std::unique_ptr<FakeCollective>> collectives = ThreeThenTwoThenThree();
  std::vector<uint64_t> digests(3);
  std::vector<std::vector<torch::Tensor>> params(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, collectives[r].get(), options);
      ASSERT_THAT(job.status(), IsOk());
      ASSERT_THAT((*job)->Restore("").status(), IsOk());
      ASSERT_THAT((*job)->Train(3).status(), IsOk());
      if (r == 2) return;  // lost
      absl::StatusOr<RegroupOutcome> two = (*job)->Regroup(collectives[3 + r].get(), /*fresh=*/false);
      ASSERT_THAT(two.status(), IsOk());
      EXPECT_EQ(two->step, 3);
      EXPECT_EQ(two->source_rank, -1);  // both held step 3
      EXPECT_EQ((*job)->world_size(), 2);
      ASSERT_THAT((*job)->Train(2).status(), IsOk());  // 3 rows each
      absl::StatusOr<RegroupOutcome> three = (*job)->Regroup(collectives[5 + r].get(), /*fresh=*/false);
      ASSERT_THAT(three.status(), IsOk());
      EXPECT_EQ(three->step, 5);
      EXPECT_EQ(three->source_rank, 0);
      ASSERT_THAT((*job)->Train(2).status(), IsOk());
      digests[r] = (*job)->StateDigest();
      for (const auto& p : (*job)->model()->parameters()) params[r].push_back(p.detach().clone());
    });
  }
  threads.emplace_back([&] {
    absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, collectives[7].get(), options);
    ASSERT_THAT(job.status(), IsOk());
    absl::StatusOr<RegroupOutcome> joined = (*job)->Regroup(collectives[7].get(), /*fresh=*/true);
    ASSERT_THAT(joined.status(), IsOk());
    EXPECT_EQ(joined->step, 5);
    EXPECT_EQ(joined->source_rank, 0);
    EXPECT_GT(joined->sent_bytes, 0);
    EXPECT_EQ(joined->state_digest, (*job)->StateDigest());
    ASSERT_THAT((*job)->Train(2).status(), IsOk());
    EXPECT_EQ((*job)->step(), 7);
    digests[2] = (*job)->StateDigest();
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_EQ(digests[0], digests[2]);

  // One rank reading the same global batches: the same run up to the order
  // of the gradients' sums.
  JobSpec one = spec;
  one.set_num_workers(1);
  one.set_output_dir(root_ + "/one");
  LocalCollective local;
  absl::StatusOr<std::unique_ptr<TrainingJob>> alone = TrainingJob::Create(one, &local, options);
  ASSERT_THAT(alone.status(), IsOk());
  ASSERT_THAT((*alone)->Restore("").status(), IsOk());
  ASSERT_THAT((*alone)->Train(7).status(), IsOk());
  // ... on the same examples, step by step: the data ledgers are equal
  // (written by the rank 0 of each group in turn).
  absl::StatusOr<std::vector<LedgerEntry>> elastic = ReadLedger(LedgerPath(spec.output_dir()));
  absl::StatusOr<std::vector<LedgerEntry>> straight = ReadLedger(LedgerPath(one.output_dir()));
  ASSERT_THAT(elastic.status(), IsOk());
  ASSERT_THAT(straight.status(), IsOk());
  ASSERT_EQ(straight->size(), 7u);
  EXPECT_EQ(*elastic, *straight);
  size_t i = 0;
  double worst = 0;
  for (const auto& p : (*alone)->model()->parameters()) {
    worst = std::max(worst, (p.detach() - params[0][i++]).abs().max().item<double>());
  }
  EXPECT_LT(worst, 1e-5);
}

// A regroup that fails while the state moves (the joiner lost midway):
// the ranks at the furthest step (the source, and one holding the same
// step) keep their state whole and regroup again; only the rank the state
// was moving into may hold part of it (TrainingJob::StatePartlyReceived).
TEST_F(TrainingJobTest, AFailedRegroupLeavesTheStateOfRanksAtTheFurthestStepWhole) {
  JobSpec spec = ElasticSpec("elastic");
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  const TrainingJobOptions options = ElasticOptions();
  auto two = std::make_shared<FakeGroup>(2, absl::Seconds(30));
  auto three = std::make_shared<FakeGroup>(3, absl::Seconds(1));
  auto again = std::make_shared<FakeGroup>(2, absl::Seconds(30));
  // The joiner's first broadcast (after the all-gather of the steps) fails.
  three->FailOperation(2, 1, absl::AbortedError("the joiner was lost"));
  FakeCollective first[2] = {FakeCollective(two, 0), FakeCollective(two, 1)};
  FakeCollective joining[3] = {FakeCollective(three, 0), FakeCollective(three, 1), FakeCollective(three, 2)};
  FakeCollective last[2] = {FakeCollective(again, 0), FakeCollective(again, 1)};
  std::vector<uint64_t> digests(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &first[r], options);
      ASSERT_THAT(job.status(), IsOk());
      ASSERT_THAT((*job)->Restore("").status(), IsOk());
      ASSERT_THAT((*job)->Train(2).status(), IsOk());
      EXPECT_THAT((*job)->Regroup(&joining[r], /*fresh=*/false).status(),
                  StatusIs(absl::StatusCode::kAborted, HasSubstr("a peer left or stalled")));
      EXPECT_FALSE((*job)->StatePartlyReceived());
      absl::StatusOr<RegroupOutcome> regrouped = (*job)->Regroup(&last[r], /*fresh=*/false);
      ASSERT_THAT(regrouped.status(), IsOk());
      EXPECT_EQ(regrouped->step, 2);
      EXPECT_EQ(regrouped->source_rank, -1);  // both still held step 2
      ASSERT_THAT((*job)->Train(1).status(), IsOk());
      digests[r] = (*job)->StateDigest();
    });
  }
  threads.emplace_back([&] {
    absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &joining[2], options);
    ASSERT_THAT(job.status(), IsOk());
    EXPECT_THAT((*job)->Regroup(&joining[2], /*fresh=*/true).status(),
                StatusIs(absl::StatusCode::kAborted, HasSubstr("the joiner was lost")));
    EXPECT_TRUE((*job)->StatePartlyReceived());
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(digests[0], digests[1]);
}

// data_parallel.reproducible under ELASTIC: 3 ranks, then 2 (rank 2 lost;
// the 3 global microbatches split 1 + 2), then a fresh rank joins and
// receives the state with the exact sum's scales: parameters, optimizer
// state, data position and scales (the state digest) and the last chunk's
// train metrics are those of one rank training the same 7 steps.
TEST_F(TrainingJobTest, AReproducibleElasticRunIsTheSameBitsAsOneThatLostNoRank) {
  JobSpec spec = ElasticSpec("elastic-exact");  // microbatches of 2 rows
  spec.mutable_model()->set_dropout_rate(0.1f);
  spec.mutable_data()->set_pack(true);
  spec.mutable_data_parallel()->set_reproducible(true);
  ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
  const TrainingJobOptions options = ElasticOptions();
  auto metrics_of = [](const TrainChunk& chunk) {
    std::map<std::string, double> out;
    for (const auto& [k, v] : chunk.summary) {
      if (!absl::StartsWith(k, "timing/")) out[k] = v;
    }
    return out;
  };
  std::vector<std::unique_ptr<FakeCollective>> collectives = ThreeThenTwoThenThree();
  std::vector<uint64_t> digests(3), regrouped(3);
  std::map<std::string, double> last_metrics;
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, collectives[r].get(), options);
      ASSERT_THAT(job.status(), IsOk());
      ASSERT_THAT((*job)->Restore("").status(), IsOk());
      ASSERT_THAT((*job)->Train(3).status(), IsOk());
      if (r == 2) return;  // lost
      ASSERT_THAT((*job)->Regroup(collectives[3 + r].get(), /*fresh=*/false).status(), IsOk());
      ASSERT_THAT((*job)->Train(2).status(), IsOk());  // 1 and 2 microbatches
      // The digest covers the scales: a regroup keeps them (the moved
      // trainer's) and hands them to the joiner.
      const uint64_t before = (*job)->StateDigest();
      absl::StatusOr<RegroupOutcome> three = (*job)->Regroup(collectives[5 + r].get(), /*fresh=*/false);
      ASSERT_THAT(three.status(), IsOk());
      EXPECT_EQ(three->source_rank, 0);
      EXPECT_EQ(three->state_digest, before);
      regrouped[r] = three->state_digest;
      absl::StatusOr<TrainChunk> chunk = (*job)->Train(2);
      ASSERT_THAT(chunk.status(), IsOk());
      if (r == 0) last_metrics = metrics_of(*chunk);
      digests[r] = (*job)->StateDigest();
    });
  }
  threads.emplace_back([&] {
    absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, collectives[7].get(), options);
    ASSERT_THAT(job.status(), IsOk());
    absl::StatusOr<RegroupOutcome> joined = (*job)->Regroup(collectives[7].get(), /*fresh=*/true);
    ASSERT_THAT(joined.status(), IsOk());
    regrouped[2] = joined->state_digest;
    ASSERT_THAT((*job)->Train(2).status(), IsOk());
    digests[2] = (*job)->StateDigest();
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(regrouped[0], regrouped[2]);
  EXPECT_EQ(regrouped[1], regrouped[2]);

  // One rank, 3 microbatches of 2 rows, in the same chunks.
  JobSpec one = spec;
  one.set_num_workers(1);
  one.set_num_microbatches(3);
  one.clear_fault_tolerance();
  one.set_output_dir(root_ + "/one-exact");
  ASSERT_THAT(ValidateAndNormalize(&one), IsOk());
  LocalCollective local;
  absl::StatusOr<std::unique_ptr<TrainingJob>> alone = TrainingJob::Create(one, &local, options);
  ASSERT_THAT(alone.status(), IsOk());
  ASSERT_THAT((*alone)->Restore("").status(), IsOk());
  ASSERT_THAT((*alone)->Train(3).status(), IsOk());
  ASSERT_THAT((*alone)->Train(2).status(), IsOk());
  absl::StatusOr<TrainChunk> last = (*alone)->Train(2);
  ASSERT_THAT(last.status(), IsOk());
  EXPECT_EQ((*alone)->step(), 7);
  const uint64_t straight = (*alone)->StateDigest();
  EXPECT_EQ(digests[0], straight);
  EXPECT_EQ(digests[1], straight);
  EXPECT_EQ(digests[2], straight);
  ASSERT_GT(last_metrics.size(), 10u);
  EXPECT_EQ(last_metrics, metrics_of(*last));
}

// The vocabulary a job's model reads: the restored checkpoint's
// (data/vocabulary_choice.h), written into every checkpoint the job saves.
class JobVocabularyTest : public TrainingJobTest {
 protected:
  // A model-only checkpoint of the tiny model carrying `vocabulary` ("" for
  // none), as `trainyard convert --from-hf --vocab` writes it.
  std::string ModelCheckpoint(const std::string& name, const std::string& vocabulary) {
    absl::StatusOr<ModelConfig> config = ResolveModelConfig(Spec("unused", 1).model());
    EXPECT_THAT(config.status(), IsOk());
    absl::StatusOr<std::unique_ptr<EncoderDecoderModel>> model = EncoderDecoderModel::Create(*config, {});
    EXPECT_THAT(model.status(), IsOk());
    const std::string dir = root_ + "/" + name;
    EXPECT_THAT(WriteModelCheckpoint(*(*model)->network(), dir, 0, "test", vocabulary), IsOk());
    return dir;
  }

  absl::StatusOr<std::unique_ptr<TrainingJob>> Job(JobKind kind, const std::string& checkpoint) {
    JobSpec spec = Spec(JobKind_Name(kind), 1);
    spec.set_kind(kind);
    spec.mutable_restore()->set_mode(RestoreConfig::SPECIFIC);
    spec.mutable_restore()->set_path(checkpoint);
    if (!IsTrainingKind(kind)) spec.mutable_inference()->set_num_batches(1);
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    TrainingJobOptions options;
    options.id = "job";
    return TrainingJob::Create(spec, &local_, options);
  }

  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  const std::string corpus_ = "data/corpus/spm.model";  // 400 pieces, not the bundled task's
  LocalCollective local_;
};

TEST_F(JobVocabularyTest, AFinetuningJobWhoseTaskHasAnotherVocabularyIsRefusedNamingBoth) {
  const std::string ckpt = ModelCheckpoint("other_vocabulary", corpus_);
  absl::StatusOr<std::unique_ptr<TrainingJob>> job = Job(FINETUNING, ckpt);
  ASSERT_THAT(job.status(), IsOk());
  const std::string task_vocabulary = (*job)->vocabulary()->path();
  EXPECT_TRUE(absl::EndsWith(task_vocabulary, "digits_to_words.model")) << task_vocabulary;
  EXPECT_THAT(
      (*job)->Restore("").status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "restore: a FINETUNING job's task digits_to_words: vocabulary: " + task_vocabulary + " is not " + ckpt +
                   "/vocabulary.model, the vocabulary of the checkpoint's model (its token ids are that "
                   "vocabulary's); training from a checkpoint keeps its vocabulary: use that file (or a "
                   "copy) in place of " +
                   task_vocabulary + ", or restore a checkpoint trained with it"));
  EXPECT_EQ((*job)->restored_step(), 0);
}

TEST_F(JobVocabularyTest, InferenceReadsTheTaskInTheCheckpointsVocabulary) {
  const std::string ckpt = ModelCheckpoint("other_vocabulary", corpus_);
  for (JobKind kind : {INFERENCE, EVALUATION}) {
    absl::StatusOr<std::unique_ptr<TrainingJob>> job = Job(kind, ckpt);
    ASSERT_THAT(job.status(), IsOk());
    ASSERT_THAT((*job)->Restore("").status(), IsOk());
    EXPECT_EQ((*job)->vocabulary()->path(), ckpt + "/vocabulary.model");
    EXPECT_EQ((*job)->vocabulary()->size(), 400);
    absl::StatusOr<const Task*> task = (*job)->registry().Get("digits_to_words");
    ASSERT_THAT(task.status(), IsOk());
    EXPECT_EQ((*task)->vocabulary->path(), ckpt + "/vocabulary.model");
    absl::StatusOr<InferOutcome> inferred = (*job)->Infer();
    ASSERT_THAT(inferred.status(), IsOk());
    std::ifstream lines(inferred->output);
    std::string first;
    ASSERT_TRUE(std::getline(lines, first)) << inferred->output;
    // The input text back from the checkpoint vocabulary's ids.
    const std::string input = nlohmann::json::parse(first)["input"];
    EXPECT_FALSE(input.empty());
    EXPECT_EQ(input.find_first_not_of("0123456789"), std::string::npos) << input;
  }
}

// A split of 5 examples in batches of 2: the last batch holds one example
// and one row of the iterator's padding, which is no example.
TEST_F(JobVocabularyTest, AShortLastBatchWritesAndCountsOnlyItsExamples) {
  const std::string ckpt = ModelCheckpoint("model", "");
  std::filesystem::create_directories(root_ + "/qa");
  std::ofstream tsv(root_ + "/qa/valid.tsv");
  for (int i = 0; i < 5; ++i) tsv << "question " << i << "\tanswer " << i << "\n";
  tsv.close();
  for (JobKind kind : {INFERENCE, EVALUATION}) {
    JobSpec spec = Spec(JobKind_Name(kind), 1);
    spec.set_kind(kind);
    TaskDefinition* task = spec.add_task_definitions();
    task->set_name("qa");
    (*task->mutable_splits())["validation"] = root_ + "/qa/valid.tsv";
    spec.set_task("qa");
    spec.set_batch_size(2);
    spec.mutable_restore()->set_mode(RestoreConfig::SPECIFIC);
    spec.mutable_restore()->set_path(ckpt);
    ASSERT_THAT(ValidateAndNormalize(&spec), IsOk());
    TrainingJobOptions options;
    options.id = "job";
    LocalCollective local;
    absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &local, options);
    ASSERT_THAT(job.status(), IsOk());
    ASSERT_THAT((*job)->Restore("").status(), IsOk());
    absl::StatusOr<InferOutcome> inferred = (*job)->Infer();
    ASSERT_THAT(inferred.status(), IsOk());
    EXPECT_EQ(inferred->examples, 5);
    std::ifstream lines(inferred->output);
    std::vector<int64_t> indices;
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      indices.push_back(j["index"].get<int64_t>());
    }
    EXPECT_EQ(indices, (std::vector<int64_t>{0, 1, 2, 3, 4})) << JobKind_Name(kind);
    if (kind == EVALUATION) EXPECT_EQ(inferred->metrics.at("qa/examples"), 5.0);
  }
}

TEST_F(JobVocabularyTest, ACheckpointWithoutAVocabularyUsesTheTasks) {
  absl::StatusOr<std::unique_ptr<TrainingJob>> job = Job(FINETUNING, ModelCheckpoint("no_vocabulary", ""));
  ASSERT_THAT(job.status(), IsOk());
  const std::string task_vocabulary = (*job)->vocabulary()->path();
  ASSERT_THAT((*job)->Restore("").status(), IsOk());
  EXPECT_EQ((*job)->vocabulary()->path(), task_vocabulary);
}

TEST_F(JobVocabularyTest, FinetuningWithTheSameVocabularyCarriesItIntoItsCheckpoints) {
  absl::StatusOr<std::string> task_vocabulary = FindBundledFile("vocab/digits_to_words.model");
  ASSERT_THAT(task_vocabulary.status(), IsOk());
  // A copy of the task's vocabulary counts as the same.
  const std::string copy = root_ + "/copy.model";
  std::ofstream(copy, std::ios::binary) << Bytes(*task_vocabulary);
  const std::string ckpt = ModelCheckpoint("same_vocabulary", copy);
  absl::StatusOr<std::unique_ptr<TrainingJob>> job = Job(FINETUNING, ckpt);
  ASSERT_THAT(job.status(), IsOk());
  ASSERT_THAT((*job)->Restore("").status(), IsOk());
  ASSERT_THAT((*job)->Train(2).status(), IsOk());
  absl::StatusOr<std::string> saved = (*job)->SaveCheckpoint(/*wait=*/true);
  ASSERT_THAT(saved.status(), IsOk());
  // The restored checkpoint may go (retention); the saved one has its own copy.
  std::filesystem::remove_all(ckpt);
  ASSERT_THAT((*job)->Train(1).status(), IsOk());
  absl::StatusOr<std::string> again = (*job)->SaveCheckpoint(/*wait=*/true);
  ASSERT_THAT(again.status(), IsOk());
  for (const std::string& dir : {*saved, *again}) {
    absl::StatusOr<CheckpointVocabulary> carried = ReadCheckpointVocabulary(dir);
    ASSERT_THAT(carried.status(), IsOk());
    EXPECT_EQ(carried->path, dir + "/vocabulary.model");
    EXPECT_EQ(Bytes(carried->path), Bytes(*task_vocabulary)) << dir;
  }
}

}  // namespace
}  // namespace trainyard
