#include "interactive/examples.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard {
namespace interactive_internal {

std::map<std::string, double> DataMetrics(const T5Batch& batch, int64_t truncated) {
  const double inputs = static_cast<double>(batch.encoder_input_tokens.numel());
  const double targets = static_cast<double>(batch.decoder_target_tokens.numel());
  return {{"data/examples", static_cast<double>(batch.batch_size())},
          {"data/truncated_examples", static_cast<double>(truncated)},
          {"non_padding_fraction/inputs", batch.encoder_input_tokens.gt(0).sum().item<double>() / inputs},
          {"non_padding_fraction/targets", batch.decoder_target_tokens.gt(0).sum().item<double>() / targets}};
}

absl::StatusOr<int64_t> CheckExamples(const std::vector<NaturalExample>& examples, bool need_targets,
                                      bool token_preprocessors) {
  if (examples.empty()) return absl::InvalidArgumentError("no examples given");
  for (size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].input.empty() && !token_preprocessors) {
      return absl::InvalidArgumentError(absl::StrCat("example ", i, ": the input is empty"));
    }
    if (token_preprocessors && !examples[i].target.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "example ", i, " (\"", examples[i].input,
          "\"): the token preprocessors make the inputs and targets from the target; give {input, target}"));
    }
    if (need_targets && !examples[i].target.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example ", i, " (\"", examples[i].input, "\"): a target is needed here; give {input, target}"));
    }
  }
  return static_cast<int64_t>(examples.size());
}

// Tokenised, truncated, unpacked rows of `examples`, in order.
absl::StatusOr<T5Batch> TokenizeAndBatch(const std::vector<NaturalExample>& examples, bool need_targets,
                                         const Vocabulary& vocabulary, bool add_eos, const FeatureLengths& lengths,
                                         int64_t* truncated) {
  TY_RETURN_IF_ERROR(CheckExamples(examples, need_targets).status());
  std::vector<TokenizedExample> tokenized;
  for (size_t i = 0; i < examples.size(); ++i) {
    TokenizedExample t;
    absl::StatusOr<std::vector<int>> inputs = vocabulary.Encode(examples[i].input);
    if (!inputs.ok()) return absl::InvalidArgumentError(absl::StrCat("example ", i, ": ", inputs.status().message()));
    t.inputs.assign(inputs->begin(), inputs->end());
    if (examples[i].target.has_value()) {
      absl::StatusOr<std::vector<int>> targets = vocabulary.Encode(*examples[i].target);
      if (!targets.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("example ", i, ": ", targets.status().message()));
      }
      t.targets.assign(targets->begin(), targets->end());
      if (add_eos) t.targets.push_back(Vocabulary::kEosId);
    }
    if (add_eos) t.inputs.push_back(Vocabulary::kEosId);
    tokenized.push_back(std::move(t));
  }
  return BatchTokens(tokenized, lengths, truncated);
}

T5Batch BatchTokens(const std::vector<TokenizedExample>& tokenized, const FeatureLengths& lengths, int64_t* truncated) {
  FeatureConverter converter(lengths.inputs(), lengths.targets(), /*pack=*/false);
  const ConvertedBatch converted = converter.Convert(tokenized);
  if (truncated != nullptr) *truncated = converted.truncated_examples;
  return ToT5Batch(converted);
}

absl::StatusOr<std::vector<TokenizedExample>> TokenizeThroughTask(const std::vector<NaturalExample>& examples,
                                                                  const std::vector<int64_t>& indices, const Task& task,
                                                                  uint64_t seed, int64_t epoch) {
  TY_RETURN_IF_ERROR(CheckExamples(examples, /*need_targets=*/true, /*token_preprocessors=*/true).status());
  std::vector<TokenizedExample> out;
  for (size_t i = 0; i < examples.size(); ++i) {
    Example ex = {{"inputs", examples[i].input}, {"targets", *examples[i].target}};
    std::mt19937_64 rng(ExampleSeed(seed, epoch, indices[i]));
    absl::StatusOr<TokenizedExample> tokens = Tokenize(task, ex, &rng);
    if (!tokens.ok()) {
      return absl::Status(tokens.status().code(), absl::StrCat("example ", indices[i], " (\"", examples[i].input,
                                                               "\"): ", tokens.status().message()));
    }
    out.push_back(std::move(*tokens));
  }
  return out;
}

// Text preprocessors over natural examples; dropped ones are left out.
absl::StatusOr<std::vector<NaturalExample>> ApplyPreprocessors(const std::vector<NaturalExample>& examples,
                                                               const std::vector<Preprocessor>& preprocessors,
                                                               std::vector<int64_t>* kept) {
  if (kept != nullptr) kept->clear();
  if (preprocessors.empty()) {
    for (size_t i = 0; kept != nullptr && i < examples.size(); ++i) kept->push_back(static_cast<int64_t>(i));
    return examples;
  }
  std::vector<NaturalExample> out;
  for (size_t i = 0; i < examples.size(); ++i) {
    Example ex = {{"inputs", examples[i].input}};
    if (examples[i].target.has_value()) ex["targets"] = *examples[i].target;
    bool dropped = false;
    for (const Preprocessor& preprocess : preprocessors) {
      absl::StatusOr<absl::optional<Example>> next = preprocess(std::move(ex));
      if (!next.ok()) {
        return absl::Status(next.status().code(),
                            absl::StrCat("example ", i, ": a preprocessor failed: ", next.status().message()));
      }
      if (!next->has_value()) {
        dropped = true;
        break;
      }
      ex = std::move(**next);
    }
    if (dropped) continue;
    auto inputs = ex.find("inputs");
    if (inputs == ex.end()) {
      return absl::InvalidArgumentError(absl::StrCat("example ", i, ": no \"inputs\" after the preprocessors"));
    }
    auto targets = ex.find("targets");
    if (kept != nullptr) kept->push_back(static_cast<int64_t>(i));
    out.push_back(targets == ex.end() ? NaturalExample(inputs->second)
                                      : NaturalExample(inputs->second, targets->second));
  }
  return out;
}

}  // namespace interactive_internal

namespace {

using interactive_internal::ApplyPreprocessors;
using interactive_internal::CheckExamples;
using interactive_internal::TokenizeAndBatch;

// Ready batches, one after another.
class BatchList : public BatchIterator {
 public:
  explicit BatchList(std::vector<std::pair<T5Batch, int64_t>> batches) : batches_(std::move(batches)) {}
  absl::StatusOr<T5Batch> Next() override {
    if (next_ == batches_.size()) return absl::OutOfRangeError("the examples are used up");
    examples_ += batches_[next_].first.encoder_input_tokens.size(0);
    truncated_ += batches_[next_].second;
    return batches_[next_++].first;
  }
  std::map<std::string, double> TakeDataMetrics() override {
    std::map<std::string, double> m = {{"data/examples", static_cast<double>(examples_)},
                                       {"data/truncated_examples", static_cast<double>(truncated_)}};
    examples_ = truncated_ = 0;
    return m;
  }

 private:
  std::vector<std::pair<T5Batch, int64_t>> batches_;
  size_t next_ = 0;
  int64_t examples_ = 0, truncated_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BatchIterator>> GetDatasetFromNaturalTextExamples(
    const std::vector<NaturalExample>& examples, const std::vector<Preprocessor>& preprocessors,
    const FeatureLengths& task_feature_lengths, const Vocabulary& vocabulary, int batch_size, bool add_eos,
    bool need_targets) {
  if (batch_size < 1) return absl::InvalidArgumentError(absl::StrCat("batch_size: ", batch_size, "; must be >= 1"));
  if (task_feature_lengths.inputs() < 1 || task_feature_lengths.targets() < 1) {
    return absl::InvalidArgumentError("task_feature_lengths: inputs and targets must be >= 1");
  }
  TY_ASSIGN_OR_RETURN(std::vector<NaturalExample> prepared, ApplyPreprocessors(examples, preprocessors));
  TY_RETURN_IF_ERROR(CheckExamples(prepared, need_targets).status());
  std::vector<std::pair<T5Batch, int64_t>> batches;
  try {
    for (size_t start = 0; start < prepared.size(); start += static_cast<size_t>(batch_size)) {
      const size_t end = std::min(prepared.size(), start + static_cast<size_t>(batch_size));
      int64_t truncated = 0;
      TY_ASSIGN_OR_RETURN(T5Batch batch,
                          TokenizeAndBatch({prepared.begin() + start, prepared.begin() + end}, need_targets, vocabulary,
                                           add_eos, task_feature_lengths, &truncated));
      batches.emplace_back(std::move(batch), truncated);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("batching the examples: ", e.what()));
  }
  return std::unique_ptr<BatchIterator>(new BatchList(std::move(batches)));
}

}  // namespace trainyard
