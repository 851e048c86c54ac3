#include "data/iterator.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/random.h"

namespace trainyard {

absl::StatusOr<std::unique_ptr<TaskIterator>> TaskIterator::Create(const Task& task, const IteratorOptions& options) {
  if (options.rows < 1 || options.inputs_length < 1 || options.targets_length < 1) {
    return absl::InvalidArgumentError("rows and feature lengths must be >= 1");
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is not in [0, ", options.world_size, ")"));
  }
  absl::StatusOr<std::unique_ptr<ExampleSource>> source = task.source(options.split);
  if (!source.ok()) {
    return absl::Status(source.status().code(), absl::StrCat("task ", task.name, ": ", source.status().message()));
  }
  if ((*source)->size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("task ", task.name, ", split ", options.split, ": no examples"));
  }
  std::unique_ptr<TaskIterator> it(new TaskIterator(task, options, std::move(*source)));
  if (it->shard_size() == 0) {
    return absl::FailedPreconditionError(absl::StrCat("task ", task.name, ", split ", options.split, ": ",
                                                      it->source_->size(), " examples leave rank ", options.rank,
                                                      " of ", options.world_size, " nothing"));
  }
  it->StartEpoch(0);
  return it;
}

TaskIterator::TaskIterator(const Task& task, const IteratorOptions& options, std::unique_ptr<ExampleSource> source)
    : task_(task),
      options_(options),
      source_(std::move(source)),
      converter_(options.inputs_length, options.targets_length, options.pack) {}

int64_t TaskIterator::shard_size() const {
  const int64_t n = source_->size();
  const int64_t w = options_.world_size, r = options_.rank;
  return r < n ? (n - r + w - 1) / w : 0;
}

void TaskIterator::StartEpoch(int64_t epoch) {
  const int64_t n = source_->size();
  order_.resize(static_cast<size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  if (options_.shuffle) {
    // Fisher-Yates with an explicit generator: the same order on every
    // platform and standard library.
    std::mt19937_64 gen(SplitMix64(options_.seed) ^ SplitMix64(static_cast<uint64_t>(epoch) + 1));
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(gen() % static_cast<uint64_t>(i + 1));
      std::swap(order_[i], order_[j]);
    }
  }
  epoch_ = epoch;
  position_ = 0;
  segment_ = 0;
  loaded_ = 0;
  skip_at_ = -1;
  skip_segments_ = 0;
  buffer_.clear();
}

absl::StatusOr<std::vector<TokenizedExample>> TaskIterator::Load(int64_t p) {
  const int64_t index = IndexAt(p);
  absl::StatusOr<Example> example = source_->Get(index);
  if (!example.ok()) return example.status();
  Example ex = std::move(*example);
  for (const Preprocessor& preprocess : task_.preprocessors) {
    absl::StatusOr<absl::optional<Example>> out = preprocess(std::move(ex));
    if (!out.ok()) return out.status();
    if (!out->has_value()) return std::vector<TokenizedExample>();
    ex = std::move(**out);
  }
  return TokenizeSegments(task_, ex, options_.inputs_length, ExampleSeed(options_.seed, epoch_, index));
}

absl::StatusOr<ConvertedBatch> TaskIterator::Next() {
  const int64_t shard = shard_size();
  while (true) {
    size_t want = static_cast<size_t>(options_.rows);
    while (true) {
      while (buffer_.size() < want && loaded_ < shard) {
        const int64_t p = loaded_++;
        absl::StatusOr<std::vector<TokenizedExample>> segments = Load(p);
        if (!segments.ok()) return segments.status();
        if (segments->empty()) ++dropped_;
        const int64_t skip = p == skip_at_ ? skip_segments_ : 0;
        for (int64_t s = skip; s < static_cast<int64_t>(segments->size()); ++s) {
          buffer_.push_back({p, s, std::move((*segments)[static_cast<size_t>(s)])});
        }
      }
      if (buffer_.empty()) break;  // the epoch is over
      std::vector<TokenizedExample> candidates;
      candidates.reserve(buffer_.size());
      for (const Buffered& b : buffer_) candidates.push_back(b.example);
      size_t consumed = 0;
      ConvertedBatch batch = converter_.ConvertToRows(candidates, options_.rows, &consumed);
      // Full (some examples left over), or nothing more to add: done.
      if (consumed < candidates.size() || loaded_ >= shard) {
        last_ids_ = BatchIds{static_cast<int64_t>(consumed), 0};
        for (size_t i = 0; i < consumed; ++i) {
          const Buffered& b = buffer_.front();
          last_ids_.digest += ExampleIdDigest(epoch_, IndexAt(b.position), b.segment);
          buffer_.pop_front();
        }
        if (buffer_.empty()) {
          position_ = loaded_;
          segment_ = 0;
        } else {
          position_ = buffer_.front().position;
          segment_ = buffer_.front().segment;
        }
        return batch;
      }
      want *= 2;
    }
    if (!options_.repeat) return absl::OutOfRangeError(absl::StrCat("end of epoch ", epoch_));
    StartEpoch(epoch_ + 1);
  }
}

bool TaskIterator::RowsAreExamples() const {
  if (options_.pack) return false;
  auto one_row = [](const Task& t) { return !t.split_length && !t.drops_examples; };
  if (!one_row(task_)) return false;
  return std::all_of(task_.components.begin(), task_.components.end(),
                     [&](const std::pair<const Task*, double>& c) { return one_row(*c.first); });
}

absl::StatusOr<ConvertedBatch> TaskIterator::NextRows(int64_t first, int64_t count) {
  if (!RowsAreExamples()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "task ", task_.name, ": a batch's rows are not its examples (packed, split documents or dropped examples)"));
  }
  if (first < 0 || count < 0 || first + count > options_.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows [", first, ", ", first + count, ") are not within a batch of ", options_.rows));
  }
  const int64_t shard = shard_size();
  if (position_ >= shard) {
    if (!options_.repeat) return absl::OutOfRangeError(absl::StrCat("end of epoch ", epoch_));
    StartEpoch(epoch_ + 1);
  }
  // Next()'s read-ahead, if the two were mixed, is read again from here.
  buffer_.clear();
  skip_at_ = -1;
  const int64_t end = std::min(position_ + options_.rows, shard);
  std::vector<TokenizedExample> rows;
  for (int64_t p = position_ + first; p < std::min(position_ + first + count, end); ++p) {
    absl::StatusOr<std::vector<TokenizedExample>> segments = Load(p);
    if (!segments.ok()) return segments.status();
    if (segments->size() != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("task ", task_.name, ": example ", IndexAt(p), " of split ", options_.split, " became ",
                       segments->size(), " rows; a task whose preprocessors drop examples must set drops_examples"));
    }
    rows.push_back(std::move(segments->front()));
  }
  size_t consumed = 0;
  ConvertedBatch batch = converter_.ConvertToRows(rows, count, &consumed);
  last_ids_ = BatchIds{end - position_, 0};
  for (int64_t p = position_; p < end; ++p) last_ids_.digest += ExampleIdDigest(epoch_, IndexAt(p), 0);
  position_ = loaded_ = end;
  segment_ = 0;
  return batch;
}

uint64_t ExampleIdDigest(int64_t epoch, int64_t index, int64_t segment) {
  // Chained SplitMix64 rounds: a bijection of each part, mixed with the
  // previous, so (1, 2, 0) and (2, 1, 0) hash apart.
  uint64_t h = SplitMix64(static_cast<uint64_t>(epoch));
  h = SplitMix64(h ^ static_cast<uint64_t>(index));
  return SplitMix64(h ^ (static_cast<uint64_t>(segment) << 1 | 1));
}

std::string TaskIterator::State() const { return FormatIteratorState({epoch_, position_, segment_}); }

absl::Status TaskIterator::Restore(const std::string& state) {
  absl::StatusOr<IteratorPosition> p = ParseIteratorState(state);
  if (!p.ok() || p->position > shard_size() || (p->segment > 0 && p->position == shard_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "iterator state \"", state, "\": want \"EPOCH POSITION [SEGMENT]\" with 0 <= POSITION <= ", shard_size()));
  }
  // The permutation is a function of the epoch: a position in this one
  // (an ELASTIC step put back) keeps it rather than drawing it again.
  if (p->epoch == epoch_ && !order_.empty()) {
    buffer_.clear();
  } else {
    StartEpoch(p->epoch);
  }
  position_ = loaded_ = p->position;
  segment_ = p->segment;
  skip_at_ = p->position;
  skip_segments_ = p->segment;
  return absl::OkStatus();
}

std::string FormatIteratorState(const IteratorPosition& p) {
  if (p.segment == 0) return absl::StrCat(p.epoch, " ", p.position);
  return absl::StrCat(p.epoch, " ", p.position, " ", p.segment);
}

absl::StatusOr<IteratorPosition> ParseIteratorState(absl::string_view state) {
  std::istringstream in{std::string(state)};
  IteratorPosition p{-1, -1, 0};
  std::string rest;
  bool ok = static_cast<bool>(in >> p.epoch >> p.position);
  if (ok && !(in >> std::ws).eof()) ok = static_cast<bool>(in >> p.segment) && !(in >> rest);
  if (!ok || p.epoch < 0 || p.position < 0 || p.segment < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("iterator state \"", state, "\": want \"EPOCH POSITION [SEGMENT]\", two or three integers >= 0"));
  }
  return p;
}

IteratorPosition ResumeAfterFurthestEpoch(const std::vector<std::string>& states) {
  int64_t furthest = 0;
  for (const std::string& state : states) {
    absl::StatusOr<IteratorPosition> p = ParseIteratorState(state);
    if (p.ok()) furthest = std::max(furthest, p->epoch);
  }
  return {furthest + 1, 0};
}

}  // namespace trainyard
