// Feeds a data/ TaskIterator to the Trainer: converted rows become a
// T5Batch of LibTorch tensors (int64 tokens, float32 weights).
#ifndef TRAINYARD_TRAINER_TASK_BATCHES_H_
#define TRAINYARD_TRAINER_TASK_BATCHES_H_

#include <memory>
#include <string>

#include "data/iterator.h"
#include "data/vocabulary.h"
#include "model/batch.h"
#include "trainer/trainer.h"

namespace trainyard {

T5Batch ToT5Batch(const ConvertedBatch& batch);
// An unpacked batch's examples only: the rows past them pad a short last
// batch and are no examples.
T5Batch ExampleRows(const ConvertedBatch& batch);

// The text of one row of token ids (up to EOS, padding skipped); "" if the
// vocabulary cannot decode it.
std::string DecodeRow(const Vocabulary& vocab, const torch::Tensor& row);

class TaskBatchIterator : public BatchIterator {
 public:
  explicit TaskBatchIterator(std::unique_ptr<TaskIterator> it) : it_(std::move(it)) {}
  absl::StatusOr<T5Batch> Next() override;
  // Rows [first, first + count) of the next batch (TaskIterator::NextRows):
  // the data metrics count only those.
  absl::StatusOr<T5Batch> NextRows(int64_t first, int64_t count);
  // data/examples, data/truncated_examples, data/dropped_examples (by
  // preprocessors), non_padding_fraction/{inputs,targets}: over the batches
  // since the last call.
  std::map<std::string, double> TakeDataMetrics() override;
  TaskIterator* task_iterator() { return it_.get(); }

 private:
  T5Batch Count(const ConvertedBatch& batch);

  std::unique_ptr<TaskIterator> it_;
  int64_t examples_ = 0, truncated_ = 0, input_tokens_ = 0, target_tokens_ = 0;
  int64_t input_slots_ = 0, target_slots_ = 0, dropped_reported_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_TASK_BATCHES_H_
