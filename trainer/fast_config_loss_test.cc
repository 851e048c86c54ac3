// The fastest training configuration against the plain float32 reference,
// over 200 steps of the bundled task on `tiny`:
//   reference: one process, the whole global batch, the tensor-op optimizer
//              updates, no collective;
//   fastest:   two ranks over Gloo (each on its half of every global batch),
//              the gradient all-reduce overlapped with backward in buckets,
//              the one-pass (fused) Adafactor updates.
// Both start from the same parameters and see the same examples, so the
// loss curves differ only by float rounding (summation order in the
// all-reduce and the per-rank forward, the fused updates' order of
// operations), which training may amplify but must not turn into a
// different curve.
#include <cmath>
#include <cstdio>
#include <thread>

#include "collective/gloo_collective.h"
#include "common/testing/status_matchers.h"
#include "data/iterator.h"
#include "gtest/gtest.h"
#include "trainer/task_batches.h"
#include "trainer/testing/tiny_trainer.h"

namespace trainyard {
namespace {

constexpr int kSteps = 200;
constexpr int kGlobalRows = 16;

// Rows [begin, begin + rows) of every batch of `inner`.
class RowShard : public BatchIterator {
 public:
  RowShard(std::unique_ptr<BatchIterator> inner, int64_t begin, int64_t rows)
      : inner_(std::move(inner)), begin_(begin), rows_(rows) {}
  absl::StatusOr<T5Batch> Next() override {
    absl::StatusOr<T5Batch> b = inner_->Next();
    if (!b.ok()) return b.status();
    return b->Slice(begin_, rows_);
  }

 private:
  std::unique_ptr<BatchIterator> inner_;
  int64_t begin_, rows_;
};

std::unique_ptr<BatchIterator> GlobalBatches(const Task& task) {
  IteratorOptions options;
  options.rows = kGlobalRows;
  options.inputs_length = 16;
  options.targets_length = 32;
  options.seed = 11;
  return std::make_unique<TaskBatchIterator>(std::move(TaskIterator::Create(task, options)).value());
}

// The loss of every step (all-reduced over ranks: the global batch's).
std::vector<double> Losses(Collective* collective, BatchIterator* batches, bool fastest) {
  TinyTrainerOptions options;
  options.init_seed = 5;
  options.collective = collective;
  options.trainer.overlap_allreduce = fastest;
  std::unique_ptr<TinyTrainer> tiny = MakeTinyTrainer(options);
  tiny->optimizer->set_fused_updates(fastest);
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    absl::StatusOr<std::map<std::string, double>> summary = tiny->trainer->Train(batches, 1);
    EXPECT_TRUE(summary.ok()) << summary.status();
    if (!summary.ok()) break;
    losses.push_back(summary->at("loss"));
  }
  return losses;
}

TEST(FastConfigLossTest, MatchesTheFloat32ReferenceOver200Steps) {
  TaskRegistry registry;
  ASSERT_THAT(RegisterDigitsToWords("data/vocab/digits_to_words.model", &registry), IsOk());
  const Task* task = *registry.Get("digits_to_words");

  LocalCollective local;
  std::unique_ptr<BatchIterator> whole = GlobalBatches(*task);
  const std::vector<double> reference = Losses(&local, whole.get(), /*fastest=*/false);

  std::shared_ptr<Store> store = GlooCollective::NewInProcessStore();
  std::vector<std::vector<double>> fastest(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto gloo = GlooCollective::Create(rank, 2, store, "127.0.0.1", absl::Seconds(60));
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      RowShard half(GlobalBatches(*task), rank * kGlobalRows / 2, kGlobalRows / 2);
      fastest[rank] = Losses(gloo->get(), &half, /*fastest=*/true);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(reference.size(), kSteps);
  ASSERT_EQ(fastest[0].size(), kSteps);
  ASSERT_EQ(fastest[0], fastest[1]);  // every rank reports the same global loss

  double max_rel = 0, max_rel_first50 = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double rel = std::abs(fastest[0][s] - reference[s]) / reference[s];
    max_rel = std::max(max_rel, rel);
    if (s < 50) max_rel_first50 = std::max(max_rel_first50, rel);
  }
  auto mean = [](const std::vector<double>& v, int from, int to) {
    double sum = 0;
    for (int s = from; s < to; ++s) sum += v[s];
    return sum / (to - from);
  };
  const double ref_tail = mean(reference, kSteps - 20, kSteps), fast_tail = mean(fastest[0], kSteps - 20, kSteps);
  // Mean loss over windows of 20 steps, compared on the plateau before the
  // drop from ~1.0 to ~0.3 (while the reference's window mean is above
  // 0.9): the drop's timing depends on rounding, so it is compared as the
  // step where each curve's 20-step moving mean first falls below 0.6.
  double max_window_rel = 0;
  for (int from = 0; from < kSteps; from += 20) {
    const double r = mean(reference, from, from + 20), f = mean(fastest[0], from, from + 20);
    std::printf("steps %3d-%3d: %.4f vs %.4f\n", from + 1, from + 20, r, f);
    if (r > 0.9) max_window_rel = std::max(max_window_rel, std::abs(f - r) / r);
  }
  auto drop_step = [&](const std::vector<double>& v) {
    for (int end = 20; end <= kSteps; ++end) {
      if (mean(v, end - 20, end) < 0.6) return end;
    }
    return kSteps + 1;
  };
  const int ref_drop = drop_step(reference), fast_drop = drop_step(fastest[0]);
  std::printf(
      "loss step 1: %.6f vs %.6f; last 20 steps: %.4f vs %.4f; max relative difference: %.2e "
      "(steps 1-50), %.2e (all); over 20-step windows before the drop: %.2e; moving mean below 0.6 "
      "from step %d vs %d\n",
      reference[0], fastest[0][0], ref_tail, fast_tail, max_rel_first50, max_rel, max_window_rel, ref_drop, fast_drop);
  // The first step sees identical parameters: only summation order differs.
  EXPECT_NEAR(fastest[0][0], reference[0], 1e-5 * reference[0]);
  // The stated tolerances, measured values in brackets for OpenBLAS's
  // Prescott / Haswell / SkylakeX and Cooperlake kernels: every loss of
  // steps 1-50 within 1e-3 relative (4.8e-5 / 8.2e-5 / 4.6e-5); past that
  // the curves drift apart step by step as rounding compounds (single-batch
  // losses differ by up to 71 % late in training), so the plateau is
  // compared as 20-step window means, each within 10 % (2.0e-2 / 1.0e-2 /
  // 6.8e-3), and the drop as the step it happens, within 40 steps (175 vs
  // 172 / 178 vs 175 / 173 vs 176).
  EXPECT_LT(max_rel_first50, 1e-3);
  EXPECT_LT(max_window_rel, 0.10);
  EXPECT_LE(std::abs(fast_drop - ref_drop), 40);
  // Both learn the task: the last 20 steps' mean loss (0.26 to 0.33).
  EXPECT_LT(ref_tail, 0.4);
  EXPECT_LT(fast_tail, 0.4);
}

}  // namespace
}  // namespace trainyard
