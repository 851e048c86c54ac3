// Feeds a data/ TaskIterator to the Trainer: converted rows become a
// T5Batch of LibTorch tensors (int64 tokens, float32 weights).
#ifndef TRAINYARD_TRAINER_TASK_BATCHES_H_
#define TRAINYARD_TRAINER_TASK_BATCHES_H_

#include <memory>

#include "data/iterator.h"
#include "model/batch.h"
#include "trainer/trainer.h"

namespace trainyard {

T5Batch ToT5Batch(const ConvertedBatch& batch);

class TaskBatchIterator : public BatchIterator {
 public:
  explicit TaskBatchIterator(std::unique_ptr<TaskIterator> it) : it_(std::move(it)) {}
  absl::StatusOr<T5Batch> Next() override;
  TaskIterator* task_iterator() { return it_.get(); }

 private:
  std::unique_ptr<TaskIterator> it_;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_TASK_BATCHES_H_
