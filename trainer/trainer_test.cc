#include "trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <dirent.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "collective/fake_collective.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/encoder_decoder_model.h"
#include "spec/presets.h"
#include "trainer/testing/tiny_trainer.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

// The sort task: the targets are the input tokens (3..40) in ascending
// order, then EOS. Content-based attention solves it (T5's cross-attention
// has no positions, so a plain copy is much slower to learn).
class SortTask : public BatchIterator {
 public:
  SortTask(int batch, int length, uint64_t seed, int num_batches = -1)
      : batch_(batch), length_(length), left_(num_batches) {
    gen_ = at::make_generator<at::CPUGeneratorImpl>(seed);
  }
  absl::StatusOr<T5Batch> Next() override {
    if (left_ == 0) return absl::OutOfRangeError("end");
    if (left_ > 0) --left_;
    T5Batch b;
    torch::Tensor tokens = torch::randint(3, 41, {batch_, length_}, gen_, torch::kLong);
    tokens.select(1, length_ - 1).fill_(1);  // EOS
    b.encoder_input_tokens = tokens;
    b.decoder_target_tokens = tokens.clone();
    b.decoder_target_tokens.narrow(1, 0, length_ - 1).copy_(std::get<0>(tokens.narrow(1, 0, length_ - 1).sort(1)));
    b.decoder_input_tokens = torch::zeros_like(tokens);
    b.decoder_input_tokens.narrow(1, 1, length_ - 1).copy_(b.decoder_target_tokens.narrow(1, 0, length_ - 1));
    b.decoder_loss_weights = torch::ones({batch_, length_});
    return b;
  }

 private:
  int batch_, length_, left_;
  at::Generator gen_;
};

using Setup = TinyTrainer;

std::unique_ptr<Setup> MakeSetup(int microbatches, uint64_t seed, float dropout = 0.0f,
                                 const std::string& summary_dir = "", const std::atomic<bool>* preempt = nullptr) {
  TinyTrainerOptions options;
  options.init_seed = 1;
  options.dropout = dropout;
  options.trainer.num_microbatches = microbatches;
  options.trainer.seed = seed;
  options.trainer.summary_dir = summary_dir;
  options.trainer.preemption_requested = preempt;
  return MakeTinyTrainer(options);
}

std::vector<torch::Tensor> Grads(Setup* s, const T5Batch& batch) {
  auto metrics = s->trainer->AccumulateGradsMicrobatched(batch, 0, batch.decoder_loss_weights.sum().item<double>());
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  std::vector<torch::Tensor> grads;
  for (const auto& p : s->model->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

TEST(TrainerTest, MicrobatchedGradientsEqualFullBatchGradients) {
  SortTask task(8, 6, /*seed=*/3);
  const T5Batch batch = *task.Next();
  auto one = MakeSetup(1, 0);
  const std::vector<torch::Tensor> full = Grads(one.get(), batch);
  for (int k : {2, 4}) {
    auto s = MakeSetup(k, 0);
    const std::vector<torch::Tensor> micro = Grads(s.get(), batch);
    ASSERT_EQ(micro.size(), full.size());
    for (size_t i = 0; i < full.size(); ++i) {
      EXPECT_TRUE(torch::allclose(micro[i], full[i], /*rtol=*/1e-4, /*atol=*/1e-6))
          << "k=" << k << " parameter " << i << " max diff " << (micro[i] - full[i]).abs().max().item<float>();
    }
  }
}

TEST(TrainerTest, MicrobatchMetricsMergeToTheFullBatchLoss) {
  SortTask task(8, 6, 3);
  const T5Batch batch = *task.Next();
  auto a = MakeSetup(1, 0), b = MakeSetup(4, 0);
  const double tokens = batch.decoder_loss_weights.sum().item<double>();
  auto full = a->trainer->AccumulateGradsMicrobatched(batch, 0, tokens);
  auto micro = b->trainer->AccumulateGradsMicrobatched(batch, 0, tokens);
  ASSERT_TRUE(full.ok() && micro.ok());
  EXPECT_NEAR(micro->at("loss").Value(), full->at("loss").Value(), 1e-5);
  EXPECT_NEAR(micro->at("accuracy").Value(), full->at("accuracy").Value(), 1e-12);
}

TEST(TrainerTest, BatchMustSplitIntoMicrobatches) {
  SortTask task(6, 5, 3);
  auto s = MakeSetup(4, 0);
  EXPECT_THAT(s->trainer->AccumulateGradsMicrobatched(*task.Next(), 0, 30).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a batch of 6 examples does not split into 4 microbatches")));
}

TEST(TrainerTest, SameSeedBitwiseSameParametersWithDropout) {
  auto run = [](uint64_t seed) {
    auto s = MakeSetup(2, seed, /*dropout=*/0.1f);
    SortTask task(8, 6, 5);
    EXPECT_TRUE(s->trainer->Train(&task, 4).ok());
    return s->model->network()->token_embedder->weight.clone();
  };
  const torch::Tensor a = run(7), b = run(7), c = run(8);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c));
}

TEST(TrainerTest, TrainingTinyOnTheSortTaskLearnsIt) {
  const std::string dir = ::testing::TempDir() + "/trainer_sort";
  auto s = MakeSetup(1, 0, 0.0f, dir);
  SortTask task(16, 8, 11);
  auto first = s->trainer->Train(&task, 10);
  ASSERT_TRUE(first.ok()) << first.status();
  auto last = s->trainer->Train(&task, 290);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(s->trainer->step(), 300);
  EXPECT_NEAR(last->at("learning_rate"), 0.05, 1e-8);
  EXPECT_DOUBLE_EQ(last->at("timing/seqs"), 290 * 16);
  // Uniform guessing over 38 tokens is a loss of log(38) = 3.6.
  EXPECT_GT(first->at("loss"), 3.0);
  // Learned: held-out loss below 0.4 and accuracy above 85 % by step 300
  // (OpenBLAS's Prescott kernels: 0.29 / 0.91), or, since the trajectory
  // depends on the CPU's BLAS kernels (its Cooperlake kernels: 0.45 at step
  // 300), within 300 more steps, checked every 50.
  absl::StatusOr<MetricsByTask> eval;
  while (true) {
    SortTask held_out(32, 8, 999, /*num_batches=*/2);
    eval = s->trainer->Eval({{"sort", &held_out}});
    ASSERT_TRUE(eval.ok()) << eval.status();
    std::printf("sort task at step %ld: held-out loss %.3f accuracy %.3f\n", static_cast<long>(s->trainer->step()),
                eval->at("sort").at("loss"), eval->at("sort").at("accuracy"));
    const bool learned = eval->at("sort").at("loss") < 0.4 && eval->at("sort").at("accuracy") > 0.85;
    if (learned || s->trainer->step() >= 600) break;
    ASSERT_TRUE(s->trainer->Train(&task, 50).ok());
  }
  EXPECT_LT(eval->at("sort").at("loss"), 0.4);
  EXPECT_GT(eval->at("sort").at("accuracy"), 0.85);
  EXPECT_TRUE(s->trainer->Close().ok());
  // T5X's summary layout: train/ and training_eval/<name>/.
  for (const char* sub : {"/train", "/training_eval/sort"}) {
    DIR* d = opendir((dir + sub).c_str());
    ASSERT_NE(d, nullptr) << sub;
    int events = 0;
    while (struct dirent* e = readdir(d)) events += std::string(e->d_name).rfind("events.out.tfevents.", 0) == 0;
    closedir(d);
    EXPECT_EQ(events, 1) << sub;
  }
}

TEST(TrainerTest, PreemptionStopsAtTheNextStepBoundary) {
  std::atomic<bool> preempt{false};
  auto s = MakeSetup(1, 0, 0.0f, "", &preempt);
  SortTask task(4, 5, 1);
  ASSERT_TRUE(s->trainer->Train(&task, 3).ok());
  preempt = true;
  absl::StatusOr<std::map<std::string, double>> out = s->trainer->Train(&task, 5);
  EXPECT_TRUE(IsPreemptionError(out.status())) << out.status();
  EXPECT_THAT(out.status(), StatusIs(absl::StatusCode::kAborted, HasSubstr("after step 3")));
  EXPECT_EQ(s->trainer->step(), 3);
  EXPECT_FALSE(IsPreemptionError(absl::AbortedError("other")));
}

// A stop requested while a step runs (here: as its batch is taken)
// abandons the step between microbatches: parameters stay those after the
// last completed step, and its gradients are dropped.
class StopWhenTaken : public BatchIterator {
 public:
  StopWhenTaken(BatchIterator* base, int64_t stop_at_call, std::atomic<bool>* flag)
      : base_(base), stop_at_call_(stop_at_call), flag_(flag) {}
  absl::StatusOr<T5Batch> Next() override {
    if (++calls_ == stop_at_call_) *flag_ = true;
    return base_->Next();
  }

 private:
  BatchIterator* base_;
  int64_t stop_at_call_, calls_ = 0;
  std::atomic<bool>* flag_;
};

TEST(TrainerTest, PreemptionBetweenMicrobatchesAbandonsTheStep) {
  std::atomic<bool> preempt{false};
  auto s = MakeSetup(/*microbatches=*/4, 0, 0.0f, "", &preempt);
  auto reference = MakeSetup(4, 0);
  SortTask a(8, 5, 1), b(8, 5, 1);
  StopWhenTaken stopping(&a, /*stop_at_call=*/3, &preempt);
  absl::StatusOr<std::map<std::string, double>> out = s->trainer->Train(&stopping, 5);
  EXPECT_THAT(out.status(), StatusIs(absl::StatusCode::kAborted, HasSubstr("after step 2")));
  EXPECT_EQ(s->trainer->step(), 2);
  EXPECT_EQ(s->trainer->abandoned_steps(), 1);
  ASSERT_TRUE(reference->trainer->Train(&b, 2).ok());
  const auto params = s->model->parameters();
  const auto expected = reference->model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i], expected[i])) << i;
    EXPECT_FALSE(params[i].grad().defined()) << i;
  }
}

// Fixed batches, then the end.
class FixedBatches : public BatchIterator {
 public:
  explicit FixedBatches(std::vector<T5Batch> batches) : batches_(std::move(batches)) {}
  absl::StatusOr<T5Batch> Next() override {
    if (next_ >= batches_.size()) return absl::OutOfRangeError("end");
    return batches_[next_++];
  }

 private:
  std::vector<T5Batch> batches_;
  size_t next_ = 0;
};

// The rows of `a`, then those of `b` (unpacked batches).
T5Batch Concat(const T5Batch& a, const T5Batch& b) {
  T5Batch out;
  out.encoder_input_tokens = torch::cat({a.encoder_input_tokens, b.encoder_input_tokens});
  out.decoder_input_tokens = torch::cat({a.decoder_input_tokens, b.decoder_input_tokens});
  out.decoder_target_tokens = torch::cat({a.decoder_target_tokens, b.decoder_target_tokens});
  out.decoder_loss_weights = torch::cat({a.decoder_loss_weights, b.decoder_loss_weights});
  return out;
}

// Two ranks evaluate shards of different lengths (3 and 2 batches): both
// finish with the metrics of the 3 global batches (the ranks' first, their
// second, rank 0's third), those of one process evaluating them; a stop on
// one rank ends the evaluation on both, before any metrics are combined.
TEST(TrainerTest, EvalAgreesOnUnevenShardsAndOnStopping) {
  auto group = std::make_shared<FakeGroup>(2, absl::Seconds(20));
  FakeCollective c0(group, 0), c1(group, 1);
  std::atomic<bool> stop0{false}, stop1{false};
  auto make = [](Collective* c, std::atomic<bool>* stop) {
    TinyTrainerOptions options;
    options.init_seed = 1;
    options.collective = c;
    options.trainer.preemption_requested = stop;
    return MakeTinyTrainer(options);
  };
  auto r0 = make(&c0, &stop0), r1 = make(&c1, &stop1), single = make(nullptr, nullptr);
  auto eval_both = [&](int n0, int n1) {
    SortTask a(4, 5, 7, n0), b(4, 5, 8, n1);
    absl::StatusOr<MetricsByTask> m0, m1;
    std::thread t([&] { m1 = r1->trainer->Eval({{"sort", &b}}); });
    m0 = r0->trainer->Eval({{"sort", &a}});
    t.join();
    return std::make_pair(m0, m1);
  };
  auto [m0, m1] = eval_both(3, 2);
  ASSERT_THAT(m0.status(), IsOk());
  ASSERT_THAT(m1.status(), IsOk());
  EXPECT_EQ(*m0, *m1);
  // The same 3 global batches on one rank.
  SortTask a(4, 5, 7, 3), b(4, 5, 8, 2);
  std::vector<T5Batch> global;
  for (int i = 0; i < 3; ++i) global.push_back(i < 2 ? Concat(*a.Next(), *b.Next()) : *a.Next());
  FixedBatches whole(global);
  absl::StatusOr<MetricsByTask> one = single->trainer->Eval({{"sort", &whole}});
  ASSERT_THAT(one.status(), IsOk());
  ASSERT_EQ((*m0)["sort"].size(), (*one)["sort"].size());
  for (const auto& [k, v] : (*one)["sort"]) EXPECT_NEAR((*m0)["sort"].at(k), v, 1e-6 * std::abs(v)) << k;
  EXPECT_GT((*m0)["sort"].at("loss_per_nonpadding_target_token"), 0.1);  // not a trivial zero
  stop1 = true;
  auto [s0, s1] = eval_both(3, 2);
  EXPECT_TRUE(IsPreemptionError(s0.status())) << s0.status();
  EXPECT_TRUE(IsPreemptionError(s1.status())) << s1.status();
}

// Three steps of a global batch of 8 rows in 4 microbatches of 2 on
// `world` ranks (rank r's global microbatches [4 r / world, 4 (r + 1) /
// world), as ELASTIC's groups take them: on 3 ranks 1, 1 and 2, the first
// two ranks' second microbatch empty): every rank's parameters after them
// (rank 0's, once checked equal). `zero_stage` 1: a sharded optimizer; 2:
// and sharded gradients. `overlap`: TrainerOptions::overlap_allreduce.
std::vector<torch::Tensor> TrainOnRanks(int world, bool exact, float dropout, int zero_stage = 0, bool overlap = true) {
  SortTask task(8, 6, 5, 3);
  std::vector<T5Batch> global;
  for (int i = 0; i < 3; ++i) global.push_back(*task.Next());
  auto group = std::make_shared<FakeGroup>(world, absl::Seconds(60));
  std::vector<std::vector<torch::Tensor>> params(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      FakeCollective collective(group, r);
      TinyTrainerOptions options;
      options.init_seed = 1;
      options.dropout = dropout;
      options.collective = &collective;
      options.shard_optimizer = zero_stage >= 1;
      const int first = 4 * r / world, end = 4 * (r + 1) / world;
      options.trainer.num_microbatches = (4 + world - 1) / world;
      options.trainer.microbatch_rows = 2;
      options.trainer.seed = 7;
      options.trainer.exact_reduction = exact;
      options.trainer.shard_gradients = zero_stage >= 2;
      options.trainer.overlap_allreduce = overlap;
      options.trainer.first_global_microbatch = first;
      options.trainer.global_microbatches = 4;
      auto t = MakeTinyTrainer(options);
      std::vector<T5Batch> mine;
      for (const T5Batch& b : global) mine.push_back(b.Slice(2 * first, 2 * (end - first)));
      FixedBatches batches(mine);
      EXPECT_THAT(t->trainer->Train(&batches, 3).status(), IsOk()) << "rank " << r;
      for (const auto& p : t->model->parameters()) params[r].push_back(p.detach().clone());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 1; r < world; ++r) {
    for (size_t i = 0; i < params[0].size(); ++i) EXPECT_TRUE(torch::equal(params[r][i], params[0][i])) << r;
  }
  return params[0];
}

// The exact reduction makes the training independent of how many ranks
// share the global batch: the same parameters, bit for bit, on 1, 2, 3 and
// 4 ranks, with dropout (drawn per global microbatch). On 3 ranks two have
// a microbatch fewer: their last pass, empty, all-reduces the sums. The
// same with the reduction after backward instead of during it.
TEST(TrainerTest, TheExactReductionTrainsTheSameBitsOnAnyNumberOfRanks) {
  const std::vector<torch::Tensor> one = TrainOnRanks(1, /*exact=*/true, /*dropout=*/0.1f);
  for (int world : {2, 3, 4}) {
    for (bool overlap : {true, false}) {
      const std::vector<torch::Tensor> other =
          TrainOnRanks(world, /*exact=*/true, /*dropout=*/0.1f, /*zero_stage=*/0, overlap);
      ASSERT_EQ(other.size(), one.size());
      for (size_t i = 0; i < one.size(); ++i) {
        EXPECT_TRUE(torch::equal(other[i], one[i])) << world << " ranks, overlap " << overlap << ", " << i;
      }
    }
  }
  // The float sum (its order the ranks'): a nearby result, not the same
  // bits on 2 ranks as on 1.
  const std::vector<torch::Tensor> float1 = TrainOnRanks(1, /*exact=*/false, /*dropout=*/0.0f);
  const std::vector<torch::Tensor> float2 = TrainOnRanks(2, /*exact=*/false, /*dropout=*/0.0f);
  const std::vector<torch::Tensor> exact0 = TrainOnRanks(1, /*exact=*/true, /*dropout=*/0.0f);
  bool all_equal = true;
  for (size_t i = 0; i < one.size(); ++i) {
    all_equal = all_equal && torch::equal(float1[i], float2[i]);
    EXPECT_TRUE(torch::allclose(exact0[i], float1[i], 1e-4, 1e-6)) << i;
  }
  EXPECT_FALSE(all_equal);
}

// With a sharded optimizer the ranks reduce-scatter the step's integer
// sums; with sharded gradients too, each microbatch's integers, keeping
// their shard's sums: the same bits as one rank's unsharded sum, on 2
// ranks and on 3 (where two ranks have a microbatch fewer: with sharded
// gradients they reduce zeros for it).
TEST(TrainerTest, TheExactReductionOfShardedStateTrainsTheSameBits) {
  const std::vector<torch::Tensor> one = TrainOnRanks(1, /*exact=*/true, /*dropout=*/0.1f);
  for (int stage : {1, 2}) {
    for (int world : {2, 3}) {
      const std::vector<torch::Tensor> sharded = TrainOnRanks(world, /*exact=*/true, /*dropout=*/0.1f, stage);
      ASSERT_EQ(sharded.size(), one.size());
      for (size_t i = 0; i < one.size(); ++i) {
        EXPECT_TRUE(torch::equal(sharded[i], one[i])) << "stage " << stage << ", " << world << " ranks, " << i;
      }
    }
  }
}

// The scales a checkpoint keeps: read back by name, and refused, naming
// the parameter, when one is missing, unknown or out of range.
TEST(TrainerTest, ExactSumExponentsAreReadAndRestoredByName) {
  TinyTrainerOptions options;
  options.trainer.exact_reduction = true;
  auto t = MakeTinyTrainer(options);
  std::map<std::string, int> exponents = t->trainer->ExactSumExponents();
  ASSERT_EQ(exponents.size(), t->model->named_parameters().size());
  const std::string first = exponents.begin()->first;
  EXPECT_EQ(exponents[first], kExactSumMinExponent);  // none found yet
  for (auto& [name, e] : exponents) e = -7;
  ASSERT_THAT(t->trainer->RestoreExactSumExponents(exponents), IsOk());
  EXPECT_EQ(t->trainer->ExactSumExponents(), exponents);
  std::map<std::string, int> bad = exponents;
  bad.erase(first);
  EXPECT_THAT(t->trainer->RestoreExactSumExponents(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exact_sum_exponents: no exponent for " + first)));
  bad = exponents;
  bad["nope"] = 0;
  EXPECT_THAT(t->trainer->RestoreExactSumExponents(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exact_sum_exponents: nope is not a parameter")));
  bad = exponents;
  bad[first] = kExactSumMaxExponent + 1;
  EXPECT_THAT(t->trainer->RestoreExactSumExponents(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("exact_sum_exponents: ", first, ": 161 is outside [-140, 160]"))));
  TinyTrainerOptions plain;
  auto f = MakeTinyTrainer(plain);
  EXPECT_TRUE(f->trainer->ExactSumExponents().empty());
  EXPECT_THAT(f->trainer->RestoreExactSumExponents(exponents), StatusCodeIs(absl::StatusCode::kFailedPrecondition));
}

// Batches that take `delay` each to come (a slow data pipeline or a slow
// host: either way, time outside the collectives).
class SlowBatches : public BatchIterator {
 public:
  SlowBatches(BatchIterator* inner, std::chrono::milliseconds delay) : inner_(inner), delay_(delay) {}
  absl::StatusOr<T5Batch> Next() override {
    std::this_thread::sleep_for(delay_);
    return inner_->Next();
  }

 private:
  BatchIterator* inner_;
  std::chrono::milliseconds delay_;
};

TEST(TrainerTest, ComputeTimeFindsTheSlowRank) {
  // Three ranks in lock-step; rank 1 spends 200 ms more per step before its
  // first collective. Each rank's wall time is about the same; its compute
  // time is not: the others wait for rank 1 in the collectives.
  constexpr int kWorld = 3;
  auto group = std::make_shared<FakeGroup>(kWorld, absl::Seconds(60));
  std::vector<std::unique_ptr<FakeCollective>> collectives;
  std::vector<std::unique_ptr<TinyTrainer>> ranks;
  for (int r = 0; r < kWorld; ++r) {
    collectives.push_back(std::make_unique<FakeCollective>(group, r));
    TinyTrainerOptions options;
    options.init_seed = 1;
    options.collective = collectives.back().get();
    ranks.push_back(MakeTinyTrainer(options));
  }
  std::vector<absl::StatusOr<std::map<std::string, double>>> summaries(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      SortTask task(2, 5, 10 + r);
      SlowBatches slow(&task, std::chrono::milliseconds(r == 1 ? 200 : 0));
      summaries[r] = ranks[r]->trainer->Train(&slow, 3);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> compute;
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_THAT(summaries[r].status(), IsOk()) << r;
    const Trainer::ChunkTiming& timing = ranks[r]->trainer->last_chunk_timing();
    EXPECT_EQ(timing.steps, 3);
    EXPECT_DOUBLE_EQ(timing.compute_seconds + timing.collective_seconds, timing.wall_seconds) << r;
    const std::map<std::string, double>& s = *summaries[r];
    EXPECT_DOUBLE_EQ(s.at("timing/compute_seconds_per_step"), timing.compute_seconds / 3) << r;
    EXPECT_DOUBLE_EQ(s.at("timing/collective_seconds_per_step"), timing.collective_seconds / 3) << r;
    compute.push_back(s.at("timing/compute_seconds_per_step"));
  }
  EXPECT_GE(compute[1], 0.2);
  for (int r : {0, 2}) {
    EXPECT_GT(compute[1], compute[r] + 0.15) << r;
    // Rank r waited for rank 1 in each step's collectives.
    EXPECT_GE(summaries[r]->at("timing/collective_seconds_per_step"), 0.15) << r;
  }
  // The same view over ranks on every rank.
  const double others_low = std::min(compute[0], compute[2]), others_high = std::max(compute[0], compute[2]);
  for (int r = 0; r < kWorld; ++r) {
    const std::map<std::string, double>& s = *summaries[r];
    EXPECT_EQ(s.at("timing/slowest_compute_rank"), 1.0) << r;
    EXPECT_EQ(s.at("timing/compute_seconds_per_step_max"), compute[1]) << r;
    EXPECT_EQ(s.at("timing/compute_seconds_per_step_min"), others_low) << r;
    EXPECT_EQ(s.at("timing/compute_seconds_per_step_median"), others_high) << r;
  }
}

TEST(TrainerTest, EndOfBatchesIsFailedPrecondition) {
  auto s = MakeSetup(1, 0);
  SortTask task(4, 5, 1, /*num_batches=*/2);
  EXPECT_THAT(s->trainer->Train(&task, 3).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ended at step 2")));
}

TEST(TrainerTest, CompileTrainWarmsOncePerShapeAndLeavesNoGradients) {
  auto s = MakeSetup(2, 0);
  SortTask task(4, 6, 1);
  const T5Batch batch = *task.Next();
  const torch::Tensor before = s->model->network()->token_embedder->weight.clone();
  absl::StatusOr<double> first = s->trainer->CompileTrain(batch);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(*first, 0.0);
  EXPECT_EQ(*s->trainer->CompileTrain(batch), 0.0);  // cached
  SortTask longer(4, 9, 1);
  absl::StatusOr<double> second = s->trainer->CompileTrain(*longer.Next());
  EXPECT_GT(*second, 0.0);  // a new shape
  for (const auto& p : s->model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE(torch::equal(before, s->model->network()->token_embedder->weight));
  EXPECT_EQ(s->trainer->step(), 0);
  // The next summary carries the last warm-up's seconds; the one after
  // does not.
  absl::StatusOr<std::map<std::string, double>> summary = s->trainer->Train(&task, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->at("timing/compilation_seconds"), *second);
  summary = s->trainer->Train(&task, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->count("timing/compilation_seconds"), 0u);
}

TEST(TrainerTest, CompileTrainLeavesTheTrainingBitForBitAsItWas) {
  // Dropout on, two microbatches: the warm-up draws no mask of the steps'.
  auto run = [](bool warm_up) {
    auto s = MakeSetup(2, /*seed=*/7, /*dropout=*/0.1f);
    SortTask task(8, 6, 5);
    if (warm_up) EXPECT_GT(*s->trainer->CompileTrain(ShapeOnlyBatch(8, 6, 6, false)), 0.0);
    EXPECT_TRUE(s->trainer->Train(&task, 3).ok());
    std::vector<torch::Tensor> params;
    for (const auto& p : s->model->parameters()) params.push_back(p.detach().clone());
    return params;
  };
  const std::vector<torch::Tensor> with = run(true), without = run(false);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(torch::equal(with[i], without[i])) << i;
}

TEST(TrainerTest, CompileEvalTimesEachTaskIntoItsFirstEvalSummary) {
  auto s = MakeSetup(1, 0);
  absl::StatusOr<std::map<std::string, double>> seconds =
      s->trainer->CompileEval({{"a", ShapeOnlyBatch(4, 6, 6, false)}, {"b", ShapeOnlyBatch(4, 6, 6, false)}});
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  ASSERT_EQ(seconds->size(), 2u);
  EXPECT_GT(seconds->at("a"), seconds->at("b"));  // b's shape is a's: only the lookup
  for (int eval = 0; eval < 2; ++eval) {
    SortTask a(4, 6, 1, 2), b(4, 6, 2, 2);
    absl::StatusOr<MetricsByTask> metrics = s->trainer->Eval({{"a", &a}, {"b", &b}});
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    for (const char* task : {"a", "b"}) {
      if (eval == 0) {
        EXPECT_EQ(metrics->at(task).at("timing/compilation_seconds"), seconds->at(task)) << task;
      } else {
        EXPECT_EQ(metrics->at(task).count("timing/compilation_seconds"), 0u) << task;
      }
    }
  }
}

TEST(ShapeOnlyBatchTest, HasTheShapesAndDtypesOfARealBatch) {
  for (bool packed : {false, true}) {
    const T5Batch b = ShapeOnlyBatch(3, 5, 4, packed);
    EXPECT_THAT(ValidateBatch(b, /*need_targets=*/true), IsOk());
    EXPECT_EQ(b.packed(), packed);
    EXPECT_EQ(b.encoder_input_tokens.sizes(), (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(b.decoder_target_tokens.sizes(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(b.decoder_input_tokens[0][0].item<int64_t>(), 0);  // shifted right
    EXPECT_EQ(b.decoder_loss_weights.sum().item<double>(), 12.0);
  }
}

TEST(TrainerTest, RunActionsHaltsWithTheReasonAndRunsEveryAction) {
  auto s = MakeSetup(1, 0);
  std::vector<std::unique_ptr<BaseAction>> actions;
  actions.push_back(std::make_unique<TerminateOnNanAction>("train"));
  actions.push_back(std::make_unique<EarlyStoppingAction>("train", "loss", EarlyStopping::MIN, 1));
  std::string reason;
  EXPECT_FALSE(s->trainer->RunActions(actions, {{"train", {{"loss", 2.0}}}}, &reason));
  EXPECT_TRUE(s->trainer->RunActions(actions, {{"train", {{"loss", std::nan("")}}}}, &reason));
  EXPECT_THAT(reason, HasSubstr("train/loss is nan"));
}

TEST(TrainerTest, RunActionsNamesEveryActionThatHalted) {
  auto s = MakeSetup(1, 0);
  std::vector<std::unique_ptr<BaseAction>> actions;
  actions.push_back(std::make_unique<EarlyStoppingAction>("eval", "loss", EarlyStopping::MIN, 1));
  actions.push_back(std::make_unique<EarlyStoppingAction>("eval", "accuracy", EarlyStopping::MAX, 2));
  auto metrics = [](double loss, double accuracy) {
    return MetricsByTask{{"eval", {{"loss", loss}, {"accuracy", accuracy}}}};
  };
  std::string reason;
  EXPECT_FALSE(s->trainer->RunActions(actions, metrics(2.0, 0.5), &reason));
  // Both stall: the first halts; the second counts its first stall.
  EXPECT_TRUE(s->trainer->RunActions(actions, metrics(2.5, 0.4), &reason));
  EXPECT_EQ(reason, "early stopping at step 0: eval/loss has not improved on 2 for 1 evaluations");
  // Both stall again: the second halts too, after its second stall.
  EXPECT_TRUE(s->trainer->RunActions(actions, metrics(2.5, 0.4), &reason));
  EXPECT_EQ(reason,
            "early stopping at step 0: eval/loss has not improved on 2 for 2 evaluations; "
            "early stopping at step 0: eval/accuracy has not improved on 0.5 for 2 evaluations");
}

TEST(WeightMetricsTest, ClosedForms) {
  const std::vector<double> grad_squares = {SquaredNorm(torch::tensor({3.0f, 4.0f}))};
  NamedTensors old_params = {{"w", torch::tensor({1.0f, -1.0f})}};
  NamedTensors new_params = {{"w", torch::tensor({2.0f, -2.0f})}};
  auto m = WeightMetricsComputer().ComputeMetrics(grad_squares, old_params, new_params);
  EXPECT_DOUBLE_EQ(m.at("weight_gradient_norm"), 5.0);
  EXPECT_DOUBLE_EQ(m.at("weight_rms/w"), 2.0);
  EXPECT_DOUBLE_EQ(m.at("weight_max/w"), 2.0);
  EXPECT_NEAR(m.at("weight_gradient_rms/w"), std::sqrt(12.5), 1e-12);
  EXPECT_DOUBLE_EQ(m.at("weight_update_rms/w"), 1.0);
  // T5X's: rms((new - old) / old) = rms(1, 1), not rms(update) / rms(new).
  EXPECT_DOUBLE_EQ(m.at("weight_update_divided_by_weight_rms/w"), 1.0);
}

TEST(WeightMetricsTest, UpdateOverWeightIsElementByElementAndLeavesOutZeros) {
  NamedTensors old_params = {{"a", torch::tensor({2.0f, -4.0f, 0.0f})}, {"z", torch::tensor({0.0f, 0.0f})}};
  NamedTensors new_params = {{"a", torch::tensor({3.0f, -2.0f, 5.0f})}, {"z", torch::tensor({1.0f, 0.0f})}};
  auto m = WeightMetricsComputer().ComputeMetrics({0.0, 0.0}, old_params, new_params);
  // a: ratios 1/2 and 2/-4 (the element that was 0 has none): rms 0.5.
  EXPECT_DOUBLE_EQ(m.at("weight_update_divided_by_weight_rms/a"), 0.5);
  EXPECT_DOUBLE_EQ(m.at("weight_update_divided_by_weight_rms/z"), 0.0);
  EXPECT_TRUE(std::isfinite(m.at("weight_update_rms/z")));
}

// learning_rate is the mean over the summary period (clu's Average),
// learning_rate/current the last step's (LastValue), as T5X writes them.
TEST(TrainerTest, SummaryAveragesTheLearningRateOverThePeriod) {
  TinyTrainerOptions options;
  // 0.5 * min(1, step / 8): exact in binary at every step.
  options.schedule.set_factors("constant * linear_warmup");
  options.schedule.set_base_learning_rate(0.5f);
  options.schedule.set_warmup_steps(8);
  auto s = MakeTinyTrainer(options);
  SortTask task(4, 5, 1);
  absl::StatusOr<std::map<std::string, double>> first = s->trainer->Train(&task, 4);
  ASSERT_TRUE(first.ok()) << first.status();
  // Steps 0..3: 0, 1/16, 2/16, 3/16.
  EXPECT_EQ(first->at("learning_rate"), 6.0 / 16 / 4);
  EXPECT_EQ(first->at("learning_rate/current"), 3.0 / 16);
  absl::StatusOr<std::map<std::string, double>> second = s->trainer->Train(&task, 8);
  ASSERT_TRUE(second.ok()) << second.status();
  // Steps 4..11: 4/16 .. 7/16, then 0.5 four times.
  EXPECT_EQ(second->at("learning_rate"), (22.0 / 16 + 2.0) / 8);
  EXPECT_EQ(second->at("learning_rate/current"), 0.5);
}

// Every weight metric of a summary is the mean of the period's steps'
// (T5X's AveragePerStep): three one-step summaries of one run against one
// three-step summary of the same run.
TEST(TrainerTest, SummaryAveragesTheWeightMetricsOverThePeriod) {
  TinyTrainerOptions options;
  options.init_seed = 1;
  options.trainer.compute_weight_metrics = true;
  auto stepwise = MakeTinyTrainer(options);
  auto period = MakeTinyTrainer(options);
  SortTask a(4, 5, 2), b(4, 5, 2);
  std::map<std::string, double> sums, last;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::map<std::string, double>> one = stepwise->trainer->Train(&a, 1);
    ASSERT_TRUE(one.ok()) << one.status();
    for (const auto& [name, value] : *one) {
      if (!absl::StartsWith(name, "weight_")) continue;
      sums[name] += value;
      last[name] = value;
    }
  }
  absl::StatusOr<std::map<std::string, double>> three = period->trainer->Train(&b, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_GT(sums.size(), 5u);
  for (const auto& [name, sum] : sums) {
    ASSERT_TRUE(three->count(name)) << name;
    EXPECT_NEAR(three->at(name), sum / 3, 1e-9 * std::max(1.0, std::abs(sum))) << name;
  }
  // The steps differ, so the last step's value is not the mean.
  EXPECT_GT(std::abs(last.at("weight_gradient_norm") - sums.at("weight_gradient_norm") / 3), 1e-6);
}

}  // namespace
}  // namespace trainyard
