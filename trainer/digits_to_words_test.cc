// The bundled task end to end in one process: the data pipeline (packed,
// shuffled) feeds the Trainer, and the tiny model learns to spell numbers:
// greedy decoding on held-out validation numbers reaches a concrete
// exact-match accuracy.
#include <cstdio>

#include "common/testing/status_matchers.h"
#include "data/iterator.h"
#include "gtest/gtest.h"
#include "model/encoder_decoder_model.h"
#include "spec/presets.h"
#include "trainer/task_batches.h"
#include "trainer/testing/tiny_trainer.h"

namespace trainyard {
namespace {

TEST(DigitsToWordsTrainingTest, TinyLearnsToSpellNumbers) {
  TaskRegistry registry;
  ASSERT_THAT(RegisterDigitsToWords("data/vocab/digits_to_words.model", &registry), IsOk());
  const Task* task = *registry.Get("digits_to_words");

  std::unique_ptr<TinyTrainer> tiny = MakeTinyTrainer();
  EncoderDecoderModel* model = tiny->model.get();
  Trainer& trainer = *tiny->trainer;

  IteratorOptions train;
  train.rows = 16;
  train.inputs_length = 16;
  train.targets_length = 32;
  train.seed = 3;
  TaskBatchIterator batches(std::move(TaskIterator::Create(*task, train)).value());
  auto first = trainer.Train(&batches, 20);
  ASSERT_TRUE(first.ok()) << first.status();
  auto rest = trainer.Train(&batches, 580);
  ASSERT_TRUE(rest.ok()) << rest.status();

  // Exact match on 64 held-out numbers, greedy decoding.
  IteratorOptions eval = train;
  eval.split = "validation";
  eval.rows = 64;
  eval.pack = false;
  eval.shuffle = true;
  auto it = std::move(TaskIterator::Create(*task, eval)).value();
  const ConvertedBatch converted = *it->Next();
  const T5Batch batch = ToT5Batch(converted);
  DecodeOptions decode;
  decode.max_decode_length = 32;
  auto predicted = model->PredictBatchWithAux(batch, decode);
  ASSERT_TRUE(predicted.ok()) << predicted.status();
  int exact = 0;
  for (int64_t r = 0; r < 64; ++r) {
    auto row = [&](const torch::Tensor& t) {
      std::vector<int> ids;
      for (int64_t i = 0; i < t.size(1); ++i) ids.push_back(static_cast<int>(t[r][i].item<int64_t>()));
      return *task->vocabulary->Decode(ids);
    };
    exact += row(predicted->tokens) == row(batch.decoder_target_tokens);
  }
  std::printf(
      "digits_to_words: loss %.3f (first 20 steps) -> %.3f (steps 21-600), token accuracy "
      "%.3f; exact match %d/64\n",
      first->at("loss"), rest->at("loss"), rest->at("accuracy"), exact);
  EXPECT_GT(first->at("loss"), 2.5);
  // Packing places ~2 examples per row (measured: 12,160 examples, 67 % of
  // the target positions filled), and nothing here is long enough to cut.
  EXPECT_EQ(rest->at("data/truncated_examples"), 0.0);
  EXPECT_GT(rest->at("data/examples"), 580 * 16);  // several examples per row
  EXPECT_GT(rest->at("non_padding_fraction/targets"), 0.6);
  // 600 steps, not 400: at 400 the model sits on the step where it learns
  // the word after a hyphen ("forty-" then "seven"), and which side it
  // lands on depends on the BLAS kernels' rounding (OpenBLAS's Zen kernels
  // 10/64 exact, Sandybridge's 64/64). Measured at 600 with Zen,
  // Sandybridge and Prescott kernels: mean loss 0.31-0.33 over steps
  // 21-600, 62, 63 and 64 of 64 exact.
  EXPECT_LT(rest->at("loss"), 0.8);
  EXPECT_GE(exact, 56);
}

}  // namespace
}  // namespace trainyard
