// Deterministic, sharded, resumable batches of a task's split.
//
// Order: epoch e visits the split in a permutation that is a function of
// (seed, e) (the identity without shuffling). Rank r of W takes every W-th
// example of that order starting at r, so the W shards cover each epoch
// exactly once. Batches are `rows` rows of this rank's examples through the
// feature converter (packed or not).
//
// A task whose chain splits documents into segments (Task::split_length)
// yields each example's segments in order, as examples of their own.
//
// The iterator's position is (epoch, next unconsumed example of this shard,
// segments of that example already consumed): State() serialises it and
// Restore() returns to it, so a resumed job sees exactly the batches it
// would have seen.
//
// Where every example is one row (RowsAreExamples), a rank of a job that
// reads global batches can read only its rows of each (NextRows): the same
// rows, the same position after it, at the cost of its own examples.
//
// Every batch also names what it holds (LastBatchIds): how many example
// segments it took and an order-independent digest of their ids (epoch,
// index in the split, segment), so that two runs can be compared step by
// step without their tokens: a step of W ranks holds the sum of its ranks'
// digests.
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

// The ids of the example segments in a batch: their count and the sum
// (mod 2^64) of ExampleIdDigest over them. A sum, so the digest of the
// union of disjoint batches is the sum of theirs, whatever the order.
struct BatchIds {
  int64_t examples = 0;
  uint64_t digest = 0;
};

// A 64-bit hash of one example segment's id: segment `segment` of the
// example at `index` of the split, in epoch `epoch`.
uint64_t ExampleIdDigest(int64_t epoch, int64_t index, int64_t segment);

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
  // Whether each example is one row of a batch: not packed, no document
  // split into segments and no example dropped (Task::split_length and
  // Task::drops_examples, a mixture's components' too).
  bool RowsAreExamples() const;
  // Rows [first, first + count) of the batch Next() would return, loading
  // only the examples in them: the position then moves past the whole
  // batch, and last_batch_ids() names all of it, as after Next().
  // kFailedPrecondition unless RowsAreExamples(), or when a preprocessor
  // drops an example (Task::drops_examples unset); kInvalidArgument for rows
  // outside [0, rows); kOutOfRange at the end of a non-repeating iterator.
  absl::StatusOr<ConvertedBatch> NextRows(int64_t first, int64_t count);
  // The ids of the segments the last batch of Next() took (zero before the
  // first).
  const BatchIds& last_batch_ids() const { return last_ids_; }

  // The position of the next unconsumed example (FormatIteratorState).
  std::string State() const;
  // kInvalidArgument for a malformed or out-of-range state.
  absl::Status Restore(const std::string& state);

  int64_t epoch() const { return epoch_; }
  // The next unconsumed example of this shard in the epoch (State()'s
  // second number).
  int64_t position() const { return position_; }
  // Segments of that example already consumed (State()'s third number).
  int64_t segment() const { return segment_; }
  // Examples in this rank's shard of one epoch.
  int64_t shard_size() const;
  // Examples dropped by preprocessors so far.
  int64_t dropped() const { return dropped_; }

 private:
  TaskIterator(const Task& task, const IteratorOptions& options, std::unique_ptr<ExampleSource> source);
  void StartEpoch(int64_t epoch);
  // The segments of the example at shard position `p` of the current epoch
  // (none if a preprocessor dropped it).
  absl::StatusOr<std::vector<TokenizedExample>> Load(int64_t p);
  // The split index of the example at shard position `p` of this epoch.
  int64_t IndexAt(int64_t p) const { return order_[static_cast<size_t>(p * options_.world_size + options_.rank)]; }

  struct Buffered {
    int64_t position;
    int64_t segment;
    TokenizedExample example;
  };

  const Task& task_;
  IteratorOptions options_;
  std::unique_ptr<ExampleSource> source_;
  FeatureConverter converter_;
  std::vector<int64_t> order_;  // this epoch's permutation
  int64_t epoch_ = 0;
  int64_t position_ = 0;  // next unconsumed shard position
  int64_t segment_ = 0;   // its segments already consumed
  // Segments from (position_, segment_) on (a cache).
  std::deque<Buffered> buffer_;
  int64_t loaded_ = 0;  // next shard position to load into buffer_
  // Restore(): segments of the example at shard position `skip_at_` to
  // leave out when it is loaded.
  int64_t skip_at_ = -1;
  int64_t skip_segments_ = 0;
  int64_t dropped_ = 0;
  BatchIds last_ids_;
};

// An iterator's position, as State() writes it and checkpoints record it
// (one per rank): "EPOCH POSITION", or "EPOCH POSITION SEGMENT" when part
// of a split document was consumed.
struct IteratorPosition {
  int64_t epoch = 0;
  int64_t position = 0;  // the next unconsumed example of the shard
  int64_t segment = 0;   // its segments already consumed
};
std::string FormatIteratorState(const IteratorPosition& p);
// kInvalidArgument naming the text unless it is two or three non-negative
// integers.
absl::StatusOr<IteratorPosition> ParseIteratorState(absl::string_view state);

// Where every rank starts when the positions were recorded by a different
// number of ranks (the shards differ, so no position carries over): the
// beginning of the epoch after the furthest one recorded, so no example is
// seen twice (the rest of the interrupted epoch is skipped). States that do
// not parse count as epoch 0.
IteratorPosition ResumeAfterFurthestEpoch(const std::vector<std::string>& states);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_ITERATOR_H_
