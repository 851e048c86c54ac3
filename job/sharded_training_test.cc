// data_parallel.sharding OPTIMIZER (ZeRO stage 1) against NONE: over 20
// steps with microbatches, for 2 and 3 ranks (uneven shards), Adafactor
// (with global-norm clipping) and AdamW, the overlapped and the plain
// all-reduce, the parameters and the whole optimizer state are the same
// bit for bit, over the fake collective and over Gloo with 2 ranks (with 3,
// Gloo's reduce-scatter sums in another order: within 1e-5); each rank holds only
// its shard of the state; a checkpoint of a sharded job, each rank's
// shard written by that rank, restores with another world size and
// sharding, and a sharded job resumes bit for bit.
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collective/fake_collective.h"
#include "collective/gloo_collective.h"
#include "collective/hybrid_collective.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "job/training_job.h"
#include "spec/jobspec_validator.h"
#include "trainer/parameter_gatherer.h"
#include "trainer/sharded_optimizer.h"
#include "trainer/trainer.h"

namespace trainyard {
namespace {

using State = std::map<std::string, torch::Tensor>;

// Unset hyper-parameters as validation fills them.
void ValidateAndNormalizeOptimizerForTest(OptimizerConfig* config) {
  if (config->has_adamw()) FillAdamWDefaults(config->mutable_adamw());
  if (config->has_adafactor()) FillAdafactorDefaults(config->mutable_adafactor());
}

struct Result {
  State params;                               // rank 0's, after the steps
  State optimizer;                            // the whole state (GatherState)
  std::vector<int64_t> local_state_elements;  // by rank: what each holds
  std::string checkpoint;
  std::map<std::string, double> summary;  // rank 0's, of the last chunk
  // PARAMETERS, by rank, after the steps: the elements of other ranks'
  // parameters that held memory, those parameters' total, and the most
  // held at once during the steps after the first.
  std::vector<int64_t> gathered_after, others, peak_gathered;
  // With Config::evaluate: rank 0's eval and inference metrics, and the
  // others' parameter elements each rank held after evaluating.
  std::map<std::string, double> eval, infer;
  std::vector<int64_t> gathered_after_eval;
};

struct Config {
  explicit Config(int world = 2, DataParallelConfig::Sharding sharding = DataParallelConfig::NONE,
                  std::string optimizer = "adafactor { } max_grad_norm: 1.0", bool overlap = true)
      : world(world), sharding(sharding), optimizer(std::move(optimizer)), overlap(overlap) {}
  int world;
  DataParallelConfig::Sharding sharding;
  std::string optimizer;
  bool overlap;
  bool gloo = false;
  int microbatches = 2;
  int steps = 20;
  std::string restore;  // a checkpoint to start from
  bool save = false;
  bool weight_metrics = false;
  bool overlap_allgather = true;  // with sharding
  bool evaluate = false;          // after the steps: eval and inference metrics
  bool warm_up = true;            // TrainingJobOptions::warm_up
  int group_size = 0;             // data_parallel.shard_group_size (HSDP, fake collectives)
};

class ShardedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        std::string(std::getenv("TEST_TMPDIR")) + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }

  JobSpec Spec(const Config& s, const std::string& out) {
    JobSpec spec;
    spec.set_name("zero");
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_model()->set_dropout_rate(0.1f);
    spec.set_task("digits_to_words");
    spec.mutable_feature_lengths()->set_inputs(16);
    spec.mutable_feature_lengths()->set_targets(32);
    spec.set_batch_size(12);
    spec.set_num_microbatches(s.microbatches);
    spec.set_num_workers(s.world);
    spec.set_total_steps(40);
    spec.set_seed(3);
    spec.set_output_dir(out);
    spec.mutable_checkpoint()->set_async(false);
    spec.mutable_data_parallel()->set_sharding(s.sharding);
    spec.mutable_data_parallel()->set_shard_group_size(s.group_size);
    spec.mutable_data_parallel()->set_overlap_allreduce(s.overlap);
    if (s.sharding != DataParallelConfig::NONE)
      spec.mutable_data_parallel()->set_overlap_allgather(s.overlap_allgather);
    // 1 MiB: the sharded all-gathers take several rounds (tiny has 2 MiB of
    // parameters), and both modes reduce the same buckets.
    spec.mutable_data_parallel()->set_bucket_mb(1);
    spec.mutable_summary()->set_weight_metrics(s.weight_metrics);
    if (s.evaluate) {
      spec.mutable_eval()->add_tasks("digits_to_words");
      spec.mutable_eval()->set_num_batches(2);
      spec.mutable_eval()->set_infer_metrics(true);
    }
    if (s.optimizer.rfind("adamw", 0) == 0) {
      spec.mutable_optimizer()->mutable_adamw();
    } else {
      spec.mutable_optimizer()->mutable_adafactor();
      spec.mutable_optimizer()->set_max_grad_norm(1.0f);
    }
    spec.mutable_learning_rate()->set_factors("constant");
    spec.mutable_learning_rate()->set_base_learning_rate(0.01f);
    if (!s.restore.empty()) {
      spec.mutable_restore()->set_mode(RestoreConfig::SPECIFIC);
      spec.mutable_restore()->set_path(s.restore);
    }
    EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
    return spec;
  }

  Result Train(const Config& s, const std::string& name) {
    const JobSpec spec = Spec(s, root_ + "/" + name);
    Result run;
    run.local_state_elements.resize(s.world);
    run.gathered_after.assign(s.world, -1);
    run.others.assign(s.world, -1);
    run.peak_gathered.assign(s.world, -1);
    run.gathered_after_eval.assign(s.world, -1);
    auto group = std::make_shared<FakeGroup>(s.world, absl::Seconds(60));
    std::vector<std::shared_ptr<FakeGroup>> shard_groups, replica_sets;
    for (int g = 0; s.group_size > 0 && g < s.world / s.group_size; ++g) {
      shard_groups.push_back(std::make_shared<FakeGroup>(s.group_size, absl::Seconds(60)));
    }
    for (int i = 0; i < s.group_size; ++i) {
      replica_sets.push_back(std::make_shared<FakeGroup>(s.world / s.group_size, absl::Seconds(60)));
    }
    std::shared_ptr<Store> store = GlooCollective::NewInProcessStore();
    std::vector<std::thread> threads;
    for (int r = 0; r < s.world; ++r) {
      threads.emplace_back([&, r] {
        std::unique_ptr<Collective> collective;
        if (s.gloo) {
          GlooOptions options;
          options.timeout = absl::Seconds(60);
          auto gloo = GlooCollective::Create(r, s.world, store, options);
          ASSERT_THAT(gloo.status(), IsOk());
          collective = std::move(*gloo);
        } else if (s.group_size > 0) {
          const HybridPlace p = *PlaceInHybrid(r, s.world, s.group_size);
          collective = std::make_unique<HybridCollective>(
              std::make_unique<FakeCollective>(group, r),
              std::make_unique<FakeCollective>(shard_groups[p.group], p.group_rank),
              std::make_unique<FakeCollective>(replica_sets[p.replica_set], p.replica_rank));
        } else {
          collective = std::make_unique<FakeCollective>(group, r);
        }
        TrainingJobOptions options;
        options.id = "zero";
        options.peak_flops = 1e12;
        options.warm_up = s.warm_up;
        auto job = TrainingJob::Create(spec, collective.get(), options);
        ASSERT_THAT(job.status(), IsOk());
        ASSERT_THAT((*job)->Restore("").status(), IsOk());
        if (s.steps > 0) {
          // The peak is taken over the steps after the first.
          Trainer* trainer = (*job)->trainer();
          absl::StatusOr<TrainChunk> chunk = (*job)->Train(1);
          ASSERT_THAT(chunk.status(), IsOk());
          if (trainer->gatherer() != nullptr) trainer->gatherer()->TakePeakGatheredElements();
          if (s.steps > 1) {
            chunk = (*job)->Train(s.steps - 1);
            ASSERT_THAT(chunk.status(), IsOk());
          }
          if (r == 0) run.summary = chunk->summary;
          if (trainer->parameters_sharded()) {
            ParameterGatherer* g = trainer->gatherer();
            run.gathered_after[r] = g->gathered_elements();
            run.others[r] = g->others_elements();
            run.peak_gathered[r] = g->TakePeakGatheredElements();
          }
        }
        if (s.evaluate) {
          absl::StatusOr<EvalOutcome> evaluated = (*job)->Evaluate();
          ASSERT_THAT(evaluated.status(), IsOk());
          if (r == 0) {
            run.eval = evaluated->metrics;
            run.infer = evaluated->infer_metrics;
          }
          ParameterGatherer* g = (*job)->trainer()->gatherer();
          run.gathered_after_eval[r] = g != nullptr && g->shard_parameters() ? g->gathered_elements() : -1;
        }
        // PARAMETERS: every rank holds only its own until gathered.
        ASSERT_THAT((*job)->trainer()->GatherParameters(), IsOk());
        int64_t elements = 0;
        for (const auto& [k, t] : (*job)->optimizer()->State()) {
          if (k != "step") elements += t.numel();
        }
        run.local_state_elements[r] = elements;
        absl::StatusOr<State> whole = (*job)->optimizer()->GatherState();
        ASSERT_THAT(whole.status(), IsOk());
        if (s.save) {
          absl::StatusOr<std::string> saved = (*job)->SaveCheckpoint(/*wait=*/true);
          ASSERT_THAT(saved.status(), IsOk());
          if (r == 0) run.checkpoint = *saved;
        }
        if (r == 0) {
          run.optimizer = *whole;
          for (const auto& p : (*job)->model()->named_parameters()) run.params[p.key()] = p.value().detach().clone();
        }
        (*job)->Close();
      });
    }
    for (auto& t : threads) t.join();
    return run;
  }

  static void ExpectSame(const State& a, const State& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const auto& [k, t] : a) {
      auto it = b.find(k);
      ASSERT_NE(it, b.end()) << what << ": " << k;
      EXPECT_TRUE(torch::equal(t, it->second)) << what << ": " << k << " differs";
    }
  }

  std::string root_;
};

TEST_F(ShardedTrainingTest, OptimizerShardingTrainsTheSameParametersBitForBit) {
  for (int world : {2, 3}) {
    for (const char* optimizer : {"adafactor", "adamw"}) {
      for (bool overlap : {true, false}) {
        const std::string what = absl::StrCat(world, " ranks, ", optimizer, overlap ? ", overlapped" : ", plain");
        Config none{world, DataParallelConfig::NONE, optimizer, overlap};
        Config zero = none;
        zero.sharding = DataParallelConfig::OPTIMIZER;
        const Result a = Train(none, "none");
        const Result b = Train(zero, "zero");
        ExpectSame(a.params, b.params, what + ": parameters");
        ExpectSame(a.optimizer, b.optimizer, what + ": optimizer state");
        // Every rank holds only its shard: together, the whole state once.
        int64_t sum = 0;
        for (int r = 0; r < world; ++r) {
          EXPECT_LT(b.local_state_elements[r], a.local_state_elements[r]) << what << ", rank " << r;
          sum += b.local_state_elements[r];
        }
        EXPECT_EQ(sum, a.local_state_elements[0]) << what;
      }
    }
  }
}

// GRADIENTS keeps only each rank's shard of the gradients, reducing every
// microbatch's as it is made: with one microbatch the sums are NONE's (bit
// for bit, fake collective); with two they are taken over ranks before
// microbatches, and after 20 steps the parameters agree with NONE's to
// 1e-4 (AdamW at 0.01 moves furthest: 1.3e-5 measured). Either way it is OPTIMIZER's state split, and its parameters.
TEST_F(ShardedTrainingTest, GradientShardingTrainsTheSameParameters) {
  for (int world : {2, 3}) {
    for (const char* optimizer : {"adafactor", "adamw"}) {
      for (bool overlap : {true, false}) {
        for (int microbatches : {1, 2}) {
          const std::string what = absl::StrCat(world, " ranks, ", optimizer, overlap ? ", overlapped, " : ", plain, ",
                                                microbatches, " microbatches");
          Config none{world, DataParallelConfig::NONE, optimizer, overlap};
          none.microbatches = microbatches;
          Config zero2 = none;
          zero2.sharding = DataParallelConfig::GRADIENTS;
          const Result a = Train(none, "none");
          const Result b = Train(zero2, "zero2");
          if (microbatches == 1) {
            ExpectSame(a.params, b.params, what + ": parameters");
            ExpectSame(a.optimizer, b.optimizer, what + ": optimizer state");
          } else {
            double worst = 0;
            for (const auto& [k, t] : a.params) {
              worst = std::max(worst, (t - b.params.at(k)).abs().max().item<double>());
            }
            EXPECT_LT(worst, 1e-4) << what << ": the largest parameter difference";
            EXPECT_GT(worst, 0) << what << ": the sums go in another order";
          }
          int64_t sum = 0;
          for (int r = 0; r < world; ++r) sum += b.local_state_elements[r];
          EXPECT_EQ(sum, a.local_state_elements[0]) << what;
        }
      }
    }
  }
}

// The parameters' all-gather overlapped with the next forward pass, unit by
// unit, writes the values the whole all-gather after the update writes: the
// same parameters and state bit for bit, on the fake collective (3 ranks)
// and on Gloo (2 ranks, where the gathers run on the collective's thread
// while the step's all-reduces and forward pass go on).
TEST_F(ShardedTrainingTest, OverlappedAllgatherTrainsWhatTheWholeAllgatherDoes) {
  for (auto mode : {DataParallelConfig::OPTIMIZER, DataParallelConfig::GRADIENTS}) {
    for (bool gloo : {false, true}) {
      Config whole{gloo ? 2 : 3, mode, "adamw"};
      whole.gloo = gloo;
      whole.steps = 8;
      whole.overlap_allgather = false;
      Config overlapped = whole;
      overlapped.overlap_allgather = true;
      const std::string what = absl::StrCat(DataParallelConfig::Sharding_Name(mode), gloo ? ", gloo" : ", fake");
      const Result a = Train(whole, "whole");
      const Result b = Train(overlapped, "overlapped");
      ExpectSame(a.params, b.params, what + ": parameters");
      ExpectSame(a.optimizer, b.optimizer, what + ": optimizer state");
      EXPECT_EQ(a.summary.count("timing/allgather_seconds_per_step"), 1u) << what;
      EXPECT_EQ(b.summary.count("timing/allgather_seconds_per_step"), 1u) << what;
    }
  }
}

// Weight metrics: a sharded rank holds only its own gradients' sums, so
// the gradient norms come from the squares the ranks sum for clipping; they
// are NONE's (the same sums, the fake collective).
TEST_F(ShardedTrainingTest, ShardedWeightMetricsAreNones) {
  for (auto mode : {DataParallelConfig::OPTIMIZER, DataParallelConfig::GRADIENTS}) {
    for (const char* optimizer : {"adafactor", "adamw"}) {  // with and without clipping
      Config none{2, DataParallelConfig::NONE, optimizer};
      none.steps = 3;
      none.microbatches = 1;
      none.weight_metrics = true;
      Config sharded = none;
      sharded.sharding = mode;
      const Result a = Train(none, "none");
      const Result b = Train(sharded, "sharded");
      const std::string what = DataParallelConfig::Sharding_Name(mode) + ", " + optimizer;
      int compared = 0;
      for (const auto& [k, v] : a.summary) {
        if (k.rfind("weight_", 0) != 0) continue;
        ASSERT_EQ(b.summary.count(k), 1u) << what << ": " << k;
        EXPECT_DOUBLE_EQ(b.summary.at(k), v) << what << ": " << k;
        ++compared;
      }
      EXPECT_GT(compared, 100) << what;
      EXPECT_GT(a.summary.at("weight_gradient_norm"), 0) << what;
    }
  }
}

// PARAMETERS frees the others' parameters between their uses and gathers
// the owners' bits again before each: the arithmetic is GRADIENTS', so the
// parameters and the whole optimizer state are GRADIENTS' bit for bit (and
// with one microbatch NONE's), for 2 and 3 ranks (uneven shards), Adafactor
// and AdamW, one and two microbatches. After the steps each rank holds
// none of the others' parameters, and during a step never all of them.
TEST_F(ShardedTrainingTest, ParameterShardingTrainsGradientShardingsParametersBitForBit) {
  for (int world : {2, 3}) {
    for (const char* optimizer : {"adafactor", "adamw"}) {
      for (int microbatches : {1, 2}) {
        const std::string what = absl::StrCat(world, " ranks, ", optimizer, ", ", microbatches, " microbatches");
        Config zero2{world, DataParallelConfig::GRADIENTS, optimizer};
        zero2.microbatches = microbatches;
        Config zero3 = zero2;
        zero3.sharding = DataParallelConfig::PARAMETERS;
        const Result a = Train(zero2, "zero2");
        const Result b = Train(zero3, "zero3");
        ExpectSame(a.params, b.params, what + ": parameters");
        ExpectSame(a.optimizer, b.optimizer, what + ": optimizer state");
        if (microbatches == 1 && world == 3) {
          Config none = zero2;
          none.sharding = DataParallelConfig::NONE;
          const Result c = Train(none, "none");
          ExpectSame(c.params, b.params, what + ": parameters against NONE");
        }
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(b.gathered_after[r], 0) << what << ", rank " << r;
          EXPECT_GT(b.others[r], 0) << what << ", rank " << r;
          EXPECT_GT(b.peak_gathered[r], 0) << what << ", rank " << r;
          EXPECT_LT(b.peak_gathered[r], b.others[r]) << what << ", rank " << r;
          std::cout << what << ", rank " << r << ": at most " << b.peak_gathered[r] << " of the others' " << b.others[r]
                    << " parameter elements held at once\n";
        }
        EXPECT_EQ(a.gathered_after[0], -1) << "GRADIENTS has no parameters to release";
        EXPECT_GT(b.summary.at("timing/allgather_seconds_per_step"), 0) << what;
      }
    }
  }
}

// The warm-up before the first step (and the first evaluation) leaves
// every sharding mode's training bit for bit as it was: with PARAMETERS
// its pass gathers every unit as a step's does, on every rank at the same
// point, and with GRADIENTS and PARAMETERS it drops its gradients as they
// come; two microbatches, dropout, 3 ranks (uneven shards).
TEST_F(ShardedTrainingTest, TheWarmUpLeavesEveryShardingsTrainingBitForBit) {
  for (auto sharding : {DataParallelConfig::NONE, DataParallelConfig::OPTIMIZER, DataParallelConfig::GRADIENTS,
                        DataParallelConfig::PARAMETERS}) {
    const std::string what = DataParallelConfig::Sharding_Name(sharding);
    Config warm{3, sharding, "adamw"};
    warm.steps = 3;
    warm.evaluate = true;
    Config cold = warm;
    cold.warm_up = false;
    const Result a = Train(warm, "warm");
    const Result b = Train(cold, "cold");
    ExpectSame(a.params, b.params, what + ": parameters");
    ExpectSame(a.optimizer, b.optimizer, what + ": optimizer state");
    EXPECT_EQ(a.eval.at("digits_to_words/loss"), b.eval.at("digits_to_words/loss")) << what;
    EXPECT_GT(a.eval.at("digits_to_words/timing/compilation_seconds"), 0) << what;
    EXPECT_EQ(b.eval.count("digits_to_words/timing/compilation_seconds"), 0u) << what;
  }
}

// Over Gloo (2 ranks) the gathers run on the collective's threads while the
// passes go on and gradients are reduce-scattered: GRADIENTS' bits.
TEST_F(ShardedTrainingTest, ParameterShardingOverGlooIsGradientSharding) {
  Config zero2{2, DataParallelConfig::GRADIENTS, "adamw"};
  zero2.gloo = true;
  zero2.steps = 10;
  Config zero3 = zero2;
  zero3.sharding = DataParallelConfig::PARAMETERS;
  const Result a = Train(zero2, "zero2");
  const Result b = Train(zero3, "zero3");
  ExpectSame(a.params, b.params, "gloo: parameters");
  ExpectSame(a.optimizer, b.optimizer, "gloo: optimizer state");
  EXPECT_EQ(b.gathered_after[0], 0);
  EXPECT_EQ(b.gathered_after[1], 0);
}

// Evaluation and decoding after PARAMETERS training gather every parameter
// first and release the others' after: GRADIENTS' metrics, exactly.
TEST_F(ShardedTrainingTest, ParameterShardedEvaluationIsGradientShardings) {
  Config zero2{2, DataParallelConfig::GRADIENTS, "adamw"};
  zero2.steps = 3;
  zero2.evaluate = true;
  Config zero3 = zero2;
  zero3.sharding = DataParallelConfig::PARAMETERS;
  Result a = Train(zero2, "zero2");
  Result b = Train(zero3, "zero3");
  ASSERT_FALSE(a.eval.empty());
  ASSERT_FALSE(a.infer.empty());
  // The metrics, not the warm-up's time.
  for (Result* r : {&a, &b}) {
    ASSERT_EQ(r->eval.erase("digits_to_words/timing/compilation_seconds"), 1u);
  }
  EXPECT_EQ(a.eval, b.eval);
  EXPECT_EQ(a.infer, b.infer);
  EXPECT_EQ(b.gathered_after_eval, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(a.gathered_after_eval, (std::vector<int64_t>{-1, -1}));
}

// A checkpoint of a PARAMETERS job (each rank writes its own parameters and
// optimizer slots) restores into NONE and into PARAMETERS with 3 ranks, and
// a PARAMETERS job resumed from it trains what one straight run does.
TEST_F(ShardedTrainingTest, ParameterShardedCheckpointsRestoreAnywhereAndResumeBitForBit) {
  Config half{2, DataParallelConfig::PARAMETERS};
  half.steps = 10;
  half.save = true;
  const Result first = Train(half, "first");
  ASSERT_FALSE(first.checkpoint.empty());
  // Each rank wrote its own parameters and slots (version 4).
  for (const char* file :
       {"optimizer-00000-of-00002", "optimizer-00001-of-00002", "params-00000-of-00002", "params-00001-of-00002"}) {
    EXPECT_TRUE(std::filesystem::exists(first.checkpoint + "/" + file + ".safetensors")) << file;
  }
  EXPECT_FALSE(std::filesystem::exists(first.checkpoint + "/params.safetensors"));
  Config other{3, DataParallelConfig::NONE};
  other.steps = 0;
  other.restore = first.checkpoint;
  const Result restored = Train(other, "other");
  ExpectSame(first.optimizer, restored.optimizer, "restored by 3 ranks, NONE");
  ExpectSame(first.params, restored.params, "restored by 3 ranks, NONE: parameters");
  // 3 PARAMETERS ranks each read only their own parameters, from files
  // divided for 2.
  Config three = other;
  three.sharding = DataParallelConfig::PARAMETERS;
  const Result resharded = Train(three, "three");
  ExpectSame(first.optimizer, resharded.optimizer, "restored by 3 ranks, PARAMETERS");
  ExpectSame(first.params, resharded.params, "restored by 3 ranks, PARAMETERS: parameters");
  Config resume = half;
  resume.save = false;
  resume.restore = first.checkpoint;
  const Result resumed = Train(resume, "resumed");
  Config straight{2, DataParallelConfig::PARAMETERS};
  const Result whole = Train(straight, "straight");
  ExpectSame(whole.params, resumed.params, "resumed parameters");
  ExpectSame(whole.optimizer, resumed.optimizer, "resumed optimizer state");
}

// Over Gloo the reduce-scatter's ring sums the ranks' gradients in another
// order than Gloo's all-reduce: with two ranks a sum has two terms and the
// order cannot matter (bit for bit); with three the last bits of a sum may
// differ, and 20 steps later the parameters agree to 1e-5.
TEST_F(ShardedTrainingTest, OptimizerShardingOverGlooIsNone) {
  for (int world : {2, 3}) {
    Config none{world, DataParallelConfig::NONE};
    none.gloo = true;
    Config zero = none;
    zero.sharding = DataParallelConfig::OPTIMIZER;
    const Result a = Train(none, absl::StrCat("none", world));
    const Result b = Train(zero, absl::StrCat("zero", world));
    if (world == 2) {
      ExpectSame(a.params, b.params, "gloo, 2 ranks: parameters");
      ExpectSame(a.optimizer, b.optimizer, "gloo, 2 ranks: optimizer state");
    } else {
      double worst = 0;
      for (const auto& [k, t] : a.params) worst = std::max(worst, (t - b.params.at(k)).abs().max().item<double>());
      EXPECT_LT(worst, 1e-5) << "gloo, 3 ranks: the largest parameter difference";
      std::cout << "gloo, 3 ranks: largest parameter difference " << worst << "\n";
    }
  }
}

TEST_F(ShardedTrainingTest, ShardedCheckpointsRestoreAnywhereAndResumeBitForBit) {
  Config half{2, DataParallelConfig::OPTIMIZER};
  half.steps = 10;
  half.save = true;
  const Result first = Train(half, "first");
  ASSERT_FALSE(first.checkpoint.empty());
  // Each rank wrote its own slots (version 3).
  EXPECT_TRUE(std::filesystem::exists(first.checkpoint + "/optimizer-00000-of-00002.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(first.checkpoint + "/optimizer-00001-of-00002.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(first.checkpoint + "/optimizer.safetensors"));
  // Restored by 3 ranks without sharding and with the gradients sharded
  // too: the whole state, as saved.
  for (auto mode : {DataParallelConfig::NONE, DataParallelConfig::GRADIENTS}) {
    Config other{3, mode};
    other.steps = 0;
    other.restore = first.checkpoint;
    const Result restored = Train(other, "other");
    const std::string what = "restored by 3 ranks, " + DataParallelConfig::Sharding_Name(mode);
    ExpectSame(first.optimizer, restored.optimizer, what);
    ExpectSame(first.params, restored.params, what + ": parameters");
  }
  // Resumed by 2 sharded ranks: 10 + 10 steps are 20 steps.
  Config resume = half;
  resume.save = false;
  resume.restore = first.checkpoint;
  const Result resumed = Train(resume, "resumed");
  Config straight{2, DataParallelConfig::OPTIMIZER};
  const Result whole = Train(straight, "straight");
  ExpectSame(whole.params, resumed.params, "resumed parameters");
  ExpectSame(whole.optimizer, resumed.optimizer, "resumed optimizer state");
}

// HSDP (shard_group_size 2 of 4 ranks): every sharding mode trains what
// sharding over all 4 ranks trains (the gradients summed in another order:
// within 1e-4), each rank holding half of the sharded state rather than a
// quarter, the same halves in both groups; the first group writes the
// checkpoint (2 shards), which 2 unsharded ranks restore as it was.
TEST_F(ShardedTrainingTest, HybridShardingTrainsWhatShardingOverEveryRankTrains) {
  for (auto mode : {DataParallelConfig::OPTIMIZER, DataParallelConfig::GRADIENTS, DataParallelConfig::PARAMETERS}) {
    const std::string what = DataParallelConfig::Sharding_Name(mode);
    Config every{4, mode};
    every.microbatches = 1;  // 3 rows per rank
    every.steps = 10;
    Config hybrid = every;
    hybrid.group_size = 2;
    hybrid.save = true;
    const Result a = Train(every, "every-" + what);
    const Result b = Train(hybrid, "hybrid-" + what);
    double worst = 0;
    for (const auto& [k, t] : a.params) worst = std::max(worst, (t - b.params.at(k)).abs().max().item<double>());
    for (const auto& [k, t] : a.optimizer) {
      if (t.is_floating_point()) worst = std::max(worst, (t - b.optimizer.at(k)).abs().max().item<double>());
    }
    EXPECT_LT(worst, 1e-4) << what;
    std::cout << what << ": HSDP against sharding over every rank, largest difference " << worst << "\n";
    const int64_t whole =
        a.local_state_elements[0] + a.local_state_elements[1] + a.local_state_elements[2] + a.local_state_elements[3];
    EXPECT_EQ(b.local_state_elements[0] + b.local_state_elements[1], whole) << what;
    EXPECT_EQ(b.local_state_elements[2], b.local_state_elements[0]) << what;
    EXPECT_EQ(b.local_state_elements[3], b.local_state_elements[1]) << what;
    if (mode == DataParallelConfig::PARAMETERS) {
      // Other ranks own about half the parameters in a group of 2, three
      // quarters among 4.
      EXPECT_GT(b.others[0], 0) << what;
      EXPECT_LT(b.others[0], a.others[0]) << what;
    }
    ASSERT_FALSE(b.checkpoint.empty()) << what;
    EXPECT_TRUE(std::filesystem::exists(b.checkpoint + "/optimizer-00001-of-00002.safetensors")) << what;
    EXPECT_FALSE(std::filesystem::exists(b.checkpoint + "/optimizer-00002-of-00004.safetensors")) << what;
    Config other{2, DataParallelConfig::NONE};
    other.steps = 0;
    other.restore = b.checkpoint;
    const Result restored = Train(other, "restored-" + what);
    ExpectSame(b.optimizer, restored.optimizer, what + ": restored");
    ExpectSame(b.params, restored.params, what + ": restored parameters");
  }
}

// HSDP with fault_tolerance ELASTIC (shard groups of 2 of 4 ranks): group 1
// is lost after 3 steps and group 0 goes on alone with its shards for 2;
// then a fresh group of 2 joins, each of its ranks receiving its shard from
// the rank holding it in group 0. Every rank then holds its replica's state
// bit for bit, the same examples were trained at every step as without the
// loss, and the state is that of an uninterrupted run (the sums in another
// order: within 1e-4; with data_parallel.reproducible, and dropout on, the
// same bits).
TEST_F(ShardedTrainingTest, HybridShardedElasticGroupsLeaveAndJoinWholeKeepingTheirShards) {
  const std::vector<std::pair<DataParallelConfig::Sharding, bool>> runs = {{DataParallelConfig::OPTIMIZER, false},
                                                                           {DataParallelConfig::PARAMETERS, false},
                                                                           {DataParallelConfig::PARAMETERS, true}};
  for (const auto& run : runs) {
    const DataParallelConfig::Sharding mode = run.first;
    const bool reproducible = run.second;
    const std::string what = absl::StrCat(DataParallelConfig::Sharding_Name(mode), reproducible ? " reproducible" : "");
    Config config{4, mode};
    config.group_size = 2;
    config.microbatches = 1;
    auto elastic_spec = [&](const std::string& name) {
      JobSpec spec = Spec(config, root_ + "/" + name);
      spec.mutable_fault_tolerance()->set_mode(FaultToleranceConfig::ELASTIC);
      // Dropout's masks follow the rows' ranks and microbatches, which the
      // loss changes (reproducible: the global microbatches, which it does
      // not).
      spec.mutable_model()->set_dropout_rate(reproducible ? 0.1f : 0.0f);
      spec.mutable_data_parallel()->set_reproducible(reproducible);
      EXPECT_THAT(ValidateAndNormalize(&spec), IsOk());
      return spec;
    };
    const std::string dir = absl::StrCat(DataParallelConfig::Sharding_Name(mode), reproducible);
    const JobSpec spec = elastic_spec("elastic-" + dir), straight = elastic_spec("straight-" + dir);
    TrainingJobOptions options;
    options.id = "hsdp-elastic";
    options.peak_flops = 1e12;
    // Two generations of 4 hybrid ranks (before the loss, after the join)
    // and one of the 2 survivors; and the uninterrupted run's.
    std::vector<std::vector<std::unique_ptr<Collective>>> gen(4);
    auto make_hybrid = [](std::vector<std::unique_ptr<Collective>>* out) {
      auto whole = std::make_shared<FakeGroup>(4, absl::Seconds(60));
      std::vector<std::shared_ptr<FakeGroup>> groups = {std::make_shared<FakeGroup>(2, absl::Seconds(60)),
                                                        std::make_shared<FakeGroup>(2, absl::Seconds(60))};
      std::vector<std::shared_ptr<FakeGroup>> sets = {std::make_shared<FakeGroup>(2, absl::Seconds(60)),
                                                      std::make_shared<FakeGroup>(2, absl::Seconds(60))};
      for (int r = 0; r < 4; ++r) {
        const HybridPlace p = *PlaceInHybrid(r, 4, 2);
        out->push_back(std::make_unique<HybridCollective>(
            std::make_unique<FakeCollective>(whole, r), std::make_unique<FakeCollective>(groups[p.group], p.group_rank),
            std::make_unique<FakeCollective>(sets[p.replica_set], p.replica_rank)));
      }
    };
    make_hybrid(&gen[0]);
    auto two = std::make_shared<FakeGroup>(2, absl::Seconds(60));
    for (int r = 0; r < 2; ++r) gen[1].push_back(std::make_unique<FakeCollective>(two, r));
    make_hybrid(&gen[2]);
    make_hybrid(&gen[3]);
    std::vector<uint64_t> digests(4), straight_digests(4);
    std::vector<State> params(4), straight_params(4);
    auto finish = [&](TrainingJob* job, int r, std::vector<uint64_t>* d, std::vector<State>* p) {
      (*d)[r] = job->StateDigest();
      ASSERT_THAT(job->trainer()->GatherParameters(), IsOk());
      for (const auto& named : job->model()->named_parameters()) {
        (*p)[r][named.key()] = named.value().detach().clone();
      }
      job->Close();
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, gen[0][r].get(), options);
        ASSERT_THAT(job.status(), IsOk());
        ASSERT_THAT((*job)->Restore("").status(), IsOk());
        ASSERT_THAT((*job)->Train(3).status(), IsOk());
        if (r >= 2) return;  // group 1 is lost
        absl::StatusOr<RegroupOutcome> alone = (*job)->Regroup(gen[1][r].get(), /*fresh=*/false);
        ASSERT_THAT(alone.status(), IsOk());
        EXPECT_EQ(alone->step, 3);
        EXPECT_EQ(alone->source_rank, -1);               // both at step 3
        ASSERT_THAT((*job)->Train(2).status(), IsOk());  // 6 rows each
        absl::StatusOr<RegroupOutcome> joined = (*job)->Regroup(gen[2][r].get(), /*fresh=*/false);
        ASSERT_THAT(joined.status(), IsOk());
        EXPECT_EQ(joined->step, 5);
        EXPECT_GT(joined->sent_bytes, 0) << "rank " << r << " sends its shard";
        ASSERT_THAT((*job)->Train(2).status(), IsOk());
        finish(job->get(), r, &digests, &params);
      });
      threads.emplace_back([&, r] {
        absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(straight, gen[3][r].get(), options);
        ASSERT_THAT(job.status(), IsOk());
        ASSERT_THAT((*job)->Restore("").status(), IsOk());
        ASSERT_THAT((*job)->Train(7).status(), IsOk());
        finish(job->get(), r, &straight_digests, &straight_params);
      });
    }
    for (int r = 2; r < 4; ++r) {
      threads.emplace_back([&, r] {
        absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, gen[2][r].get(), options);
        ASSERT_THAT(job.status(), IsOk());
        absl::StatusOr<RegroupOutcome> joined = (*job)->Regroup(gen[2][r].get(), /*fresh=*/true);
        ASSERT_THAT(joined.status(), IsOk());
        EXPECT_EQ(joined->step, 5);
        EXPECT_EQ(joined->source_rank, 0);
        EXPECT_EQ(joined->state_digest, (*job)->StateDigest());
        ASSERT_THAT((*job)->Train(2).status(), IsOk());
        EXPECT_EQ((*job)->step(), 7);
        finish(job->get(), r, &digests, &params);
      });
    }
    for (auto& t : threads) t.join();
    // Each rank holds its shard's state as the same rank of the other group.
    EXPECT_EQ(digests[2], digests[0]) << what;
    EXPECT_EQ(digests[3], digests[1]) << what;
    EXPECT_NE(digests[0], digests[1]) << what << ": the two shards";
    ExpectSame(params[0], params[3], what + ": the gathered parameters");
    absl::StatusOr<std::vector<LedgerEntry>> trained = ReadLedger(LedgerPath(spec.output_dir()));
    absl::StatusOr<std::vector<LedgerEntry>> uninterrupted = ReadLedger(LedgerPath(straight.output_dir()));
    ASSERT_THAT(trained.status(), IsOk());
    ASSERT_THAT(uninterrupted.status(), IsOk());
    ASSERT_EQ(uninterrupted->size(), 7u);
    EXPECT_EQ(*trained, *uninterrupted) << what;
    double worst = 0;
    for (const auto& [k, t] : straight_params[0]) {
      worst = std::max(worst, (t - params[0].at(k)).abs().max().item<double>());
    }
    EXPECT_LT(worst, 1e-4) << what;
    if (reproducible) EXPECT_EQ(worst, 0) << what;
    std::cout << what << ": HSDP ELASTIC against the uninterrupted run, largest difference " << worst << "\n";
  }
}

// PARAMETERS sharding: whichever of a step's collective operations fails on
// one rank (a forward or backward pass's gather, a reduce-scatter, an
// all-reduce), every rank's Train returns a collective failure (kAborted,
// which ELASTIC regroups after), never an error of the rank's own.
TEST_F(ShardedTrainingTest, AFailedOperationAnywhereInAParameterShardedStepIsACollectiveFailure) {
  Config config{2, DataParallelConfig::PARAMETERS};
  config.microbatches = 1;
  config.warm_up = false;
  const JobSpec spec = Spec(config, root_ + "/failed");
  TrainingJobOptions options;
  options.id = "failed";
  options.peak_flops = 1e12;
  options.warm_up = false;
  int failed_in_backward = 0;
  for (int op = 0; op < 40; op += 2) {
    auto group = std::make_shared<FakeGroup>(2, absl::Milliseconds(300));
    std::vector<absl::Status> trained(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        FakeCollective collective(group, r);
        absl::StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(spec, &collective, options);
        ASSERT_THAT(job.status(), IsOk());
        ASSERT_THAT((*job)->Restore("").status(), IsOk());
        // The `op`-th operation of rank 1's steps fails.
        if (r == 1)
          group->FailOperation(1, static_cast<int>(collective.operations()) + op,
                               absl::UnavailableError("peer 0 is gone"));
        trained[r] = (*job)->Train(2).status();
        (*job)->Close();
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(trained[r].code(), absl::StatusCode::kAborted)
          << "operation " << op << ", rank " << r << ": " << trained[r];
    }
    if (absl::StrContains(trained[1].message(), "gather") && !absl::StrContains(trained[1].message(), "all-reduce")) {
      ++failed_in_backward;
    }
  }
  EXPECT_GT(failed_in_backward, 0);
}

// The optimizer alone, with all-gathers in many small rounds: the same
// parameters and state as one unsharded optimizer given the same gradients.
TEST(ShardedOptimizerTest, SmallRoundsGiveTheUnshardedUpdate) {
  for (int world : {2, 3}) {
    for (const char* which : {"adafactor", "adamw"}) {
      OptimizerConfig config;
      if (std::string(which) == "adamw") {
        config.mutable_adamw();
      } else {
        config.mutable_adafactor();
        config.set_max_grad_norm(0.5f);
      }
      ValidateAndNormalizeOptimizerForTest(&config);
      auto make_params = [] {
        torch::manual_seed(1);
        NamedTensors p;
        for (auto shape : std::vector<std::vector<int64_t>>{{300, 200}, {7}, {128, 128}, {5, 3}, {1000}}) {
          p.emplace_back(absl::StrCat("p", p.size()), torch::randn(shape));
        }
        return p;
      };
      // Drawn once, before the rank threads (the global generator is not
      // theirs to share).
      const NamedTensors initial = make_params();
      auto copy_of = [](const NamedTensors& from) {
        NamedTensors out;
        for (const auto& [n, t] : from) out.emplace_back(n, t.clone());
        return out;
      };
      NamedTensors reference = copy_of(initial);
      auto plain = CreateOptimizer(config, reference);
      ASSERT_THAT(plain.status(), IsOk());
      std::vector<std::vector<torch::Tensor>> grads;
      torch::manual_seed(2);
      for (int step = 0; step < 4; ++step) {
        std::vector<torch::Tensor> g;
        for (const auto& [n, t] : reference) g.push_back(torch::randn(t.sizes()));
        grads.push_back(g);
      }
      for (const auto& g : grads) {
        std::vector<torch::Tensor> copy;
        for (const auto& t : g) copy.push_back(t.clone());
        (*plain)->Apply(copy, 0.01);
      }
      auto group = std::make_shared<FakeGroup>(world, absl::Seconds(30));
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
          FakeCollective collective(group, r);
          NamedTensors params = copy_of(initial);
          auto sharded = ShardedOptimizer::Create(config, params, &collective, /*round_elements=*/1000);
          ASSERT_THAT(sharded.status(), IsOk());
          for (const auto& g : grads) {
            std::vector<torch::Tensor> copy;
            for (const auto& t : g) copy.push_back(t.clone());
            (*sharded)->Apply(copy, 0.01);
            ASSERT_THAT((*sharded)->Synchronize(), IsOk());
          }
          for (size_t i = 0; i < params.size(); ++i) {
            EXPECT_TRUE(torch::equal(params[i].second, reference[i].second)) << which << " rank " << r << " " << i;
          }
          absl::StatusOr<State> state = (*sharded)->GatherState();
          ASSERT_THAT(state.status(), IsOk());
          if (r == 0) {
            const State want = (*plain)->State();
            ASSERT_EQ(state->size(), want.size());
            for (const auto& [k, t] : want) EXPECT_TRUE(torch::equal(state->at(k), t)) << which << " " << k;
          }
        });
      }
      for (auto& t : threads) t.join();
    }
  }
}

TEST(ShardBoundariesTest, WholeParametersContiguousAndBalanced) {
  NamedTensors params;
  for (int n : {10, 10, 10, 10, 40, 20}) params.emplace_back(absl::StrCat("p", params.size()), torch::zeros({n}));
  EXPECT_EQ(ShardBoundaries(params, 1), (std::vector<size_t>{0, 6}));
  EXPECT_EQ(ShardBoundaries(params, 2), (std::vector<size_t>{0, 5, 6}));        // 80 | 20: whole parameters
  EXPECT_EQ(ShardBoundaries(params, 4), (std::vector<size_t>{0, 3, 5, 5, 6}));  // 30 | 50 | 0 | 20
  EXPECT_EQ(ShardBoundaries(params, 8).back(), 6u);
}

TEST(ShardedTrainingSpecTest, ParameterShardingRefusesWhatItCannotDo) {
  JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  spec.set_task("digits_to_words");
  spec.set_name("zero3");
  spec.set_output_dir("/tmp/zero3");
  spec.mutable_feature_lengths()->set_inputs(16);
  spec.mutable_feature_lengths()->set_targets(16);
  spec.mutable_inference()->set_max_decode_length(16);
  spec.set_batch_size(4);
  spec.set_total_steps(1);
  spec.mutable_data_parallel()->set_sharding(DataParallelConfig::PARAMETERS);
  JobSpec plain = spec;
  ASSERT_THAT(ValidateAndNormalize(&plain), IsOk());
  EXPECT_TRUE(plain.data_parallel().overlap_allgather());
  JobSpec metrics = spec;
  metrics.mutable_summary()->set_weight_metrics(true);
  EXPECT_THAT(ValidateAndNormalize(&metrics),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("summary.weight_metrics: not computed with sharding PARAMETERS")));
  JobSpec gather_after = spec;
  gather_after.mutable_data_parallel()->set_overlap_allgather(false);
  EXPECT_THAT(ValidateAndNormalize(&gather_after),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("data_parallel.overlap_allgather: false with sharding PARAMETERS")));
}

}  // namespace
}  // namespace trainyard
