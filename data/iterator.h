// Deterministic, sharded, resumable batches of a task's split.
//
// Order: epoch e visits the split in a permutation that is a function of
// (seed, e) (the identity without shuffling). Rank r of W takes every W-th
// example of that order starting at r, so the W shards cover each epoch
// exactly once. Batches are `rows` rows of this rank's examples through the
// feature converter (packed or not).
//
// The iterator's position is two numbers, (epoch, next unconsumed example of
// this shard): State() serialises them and Restore() returns to them, so a
// resumed job sees exactly the batches it would have seen.
//
// Thread-safety: one thread drives an iterator.
#ifndef TRAINYARD_DATA_ITERATOR_H_
#define TRAINYARD_DATA_ITERATOR_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/feature_converter.h"
#include "data/task.h"

namespace trainyard {

struct IteratorOptions {
  std::string split = "train";
  int64_t rows = 8;  // per batch, on this rank
  int64_t inputs_length = 64;
  int64_t targets_length = 64;
  bool pack = true;
  bool shuffle = true;
  bool repeat = true;  // false: kOutOfRange after one epoch
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
};

class TaskIterator {
 public:
  static absl::StatusOr<std::unique_ptr<TaskIterator>> Create(const Task& task, const IteratorOptions& options);

  // The next batch; kOutOfRange at the end of a non-repeating iterator.
  absl::StatusOr<ConvertedBatch> Next();

  // "epoch position" of the next unconsumed example (FormatIteratorState).
  std::string State() const;
  // kInvalidArgument for a malformed or out-of-range state.
  absl::Status Restore(const std::string& state);

  int64_t epoch() const { return epoch_; }
  // The next unconsumed example of this shard in the epoch (State()'s
  // second number).
  int64_t position() const { return position_; }
  // Examples in this rank's shard of one epoch.
  int64_t shard_size() const;
  // Examples dropped by preprocessors so far.
  int64_t dropped() const { return dropped_; }

 private:
  TaskIterator(const Task& task, const IteratorOptions& options, std::unique_ptr<ExampleSource> source);
  void StartEpoch(int64_t epoch);
  // Tokenized example at shard position `p` of the current epoch, or nullopt
  // if a preprocessor dropped it.
  absl::StatusOr<absl::optional<TokenizedExample>> Load(int64_t p);

  const Task& task_;
  IteratorOptions options_;
  std::unique_ptr<ExampleSource> source_;
  FeatureConverter converter_;
  std::vector<int64_t> order_;  // this epoch's permutation
  int64_t epoch_ = 0;
  int64_t position_ = 0;  // next unconsumed shard position
  // Tokenized examples at positions position_, position_+1, ... (a cache).
  std::deque<std::pair<int64_t, TokenizedExample>> buffer_;
  int64_t loaded_ = 0;  // next shard position to load into buffer_
  int64_t dropped_ = 0;
};

// An iterator's position, as State() writes it and checkpoints record it
// (one per rank): "EPOCH POSITION".
struct IteratorPosition {
  int64_t epoch = 0;
  int64_t position = 0;  // the next unconsumed example of the shard
};
std::string FormatIteratorState(const IteratorPosition& p);
// kInvalidArgument naming the text unless it is two non-negative integers.
absl::StatusOr<IteratorPosition> ParseIteratorState(absl::string_view state);

// Where every rank starts when the positions were recorded by a different
// number of ranks (the shards differ, so no position carries over): the
// beginning of the epoch after the furthest one recorded, so no example is
// seen twice (the rest of the interrupted epoch is skipped). States that do
// not parse count as epoch 0.
IteratorPosition ResumeAfterFurthestEpoch(const std::vector<std::string>& states);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_ITERATOR_H_
