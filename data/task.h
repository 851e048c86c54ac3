// seqio-like tasks: a named source of text examples per split, text
// preprocessors, a vocabulary for the "inputs" and "targets" features, and
// the names of the task's metric functions. A TaskRegistry maps names to
// tasks; job specs select tasks by name.
//
// Thread-safety: the registry is thread-safe; tasks are immutable once added.
#ifndef TRAINYARD_DATA_TASK_H_
#define TRAINYARD_DATA_TASK_H_

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "common/mutex.h"
#include "data/feature_converter.h"
#include "data/source.h"
#include "data/vocabulary.h"

namespace trainyard {

// A text-level preprocessor: returns the changed example, or nullopt to
// drop it (a task with one that may drop sets Task::drops_examples).
using Preprocessor = std::function<absl::StatusOr<absl::optional<Example>>(Example)>;

// A token-level preprocessor (after tokenisation, before EOS is appended),
// with a generator seeded per example: f(seed, epoch, example index).
using TokenPreprocessor = std::function<absl::StatusOr<TokenizedExample>(TokenizedExample, std::mt19937_64* rng)>;

struct Task {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<ExampleSource>>(const std::string& split)> source;
  std::vector<Preprocessor> preprocessors;
  // Some preprocessor may drop an example. Then the rows of a batch depend
  // on every example before them, and a rank cannot read only its rows of
  // a global batch (TaskIterator::NextRows); that refuses a drop it meets
  // in a task that does not say so.
  bool drops_examples = false;
  std::vector<TokenPreprocessor> token_preprocessors;
  std::shared_ptr<const Vocabulary> vocabulary;
  bool add_eos = true;
  // The source's "inputs" and "targets" are token ids already (packed as
  // data/tfrecord.h's PackTokenIds: seqio's cached tasks), not text: they
  // are used as they are, each id checked against the vocabulary.
  bool pretokenized = false;
  std::vector<std::string> metric_fns;
  // Splits each document's tokenized targets into consecutive segments of
  // at most split_length(inputs_length) tokens before the token
  // preprocessors run, each an example of its own (T5's split_tokens; the
  // inputs, if any, go with every segment). Unset, or 0: no splitting.
  std::function<int64_t(int64_t inputs_length)> split_length;
  // A mixture's tasks (never mixtures: nested ones are flattened) with their
  // shares of its examples, summing to 1; empty for a task. Each example of
  // a mixture goes through its own task's chain.
  std::vector<std::pair<const Task*, double>> components;
};

// Tokenizes an example's "inputs" and "targets" (a missing feature is
// empty), runs the token preprocessors, appends EOS if asked; both features
// must end up non-empty. `rng` may be null when the task has no token
// preprocessors. No splitting: see TokenizeSegments.
absl::StatusOr<TokenizedExample> Tokenize(const Task& task, const Example& example, std::mt19937_64* rng = nullptr);

// As Tokenize, after splitting the targets into segments by
// task.split_length(inputs_length): one tokenized example per segment, in
// order. Segment s draws its random numbers from a generator seeded with
// SegmentSeed(seed, s), so every segment is reproducible on its own.
absl::StatusOr<std::vector<TokenizedExample>> TokenizeSegments(const Task& task, const Example& example,
                                                               int64_t inputs_length, uint64_t seed);
uint64_t SegmentSeed(uint64_t seed, int64_t segment);
// The seed of the example at `index` of a split in `epoch` of an iterator
// seeded with `seed` (TokenizeSegments' `seed`): the data pipeline's one
// rule, which the interactive model follows with its step as the epoch.
uint64_t ExampleSeed(uint64_t seed, int64_t epoch, int64_t index);

// Built-in preprocessors.
// Renames features: {new name: old name}; other features are dropped.
Preprocessor Rekey(std::map<std::string, std::string> mapping);
// T5's translate: {inputs: "translate <source_name> to <target_name>: " +
// example[source_feature], targets: example[target_feature]}; the names
// are English ones (spec/task_spec.h's T5LanguageName). Other features are
// dropped; kInvalidArgument naming a missing feature.
Preprocessor Translate(std::string source_feature, std::string source_name, std::string target_feature,
                       std::string target_name);
// T5's summarize: {inputs: "summarize: " + example[article_key], targets:
// example[summary_key]}. Other features are dropped.
Preprocessor Summarize(std::string article_key, std::string summary_key);
// T5's span corruption of the "targets" tokens into inputs and targets
// (data/span_corruption.h); sentinels are the vocabulary's extra ids.
TokenPreprocessor SpanCorruption(const Vocabulary& vocabulary, double noise_density = 0.15,
                                 double mean_noise_span_length = 3.0);
// Prefix LM: the "targets" tokens split at a uniformly random point; the
// prefix becomes the inputs, the rest the targets.
TokenPreprocessor PrefixLm();
// The token preprocessors above by the names task definitions give them
// (proto PreprocessorConfig), with their defaults: "span_corruption" (T5's
// noise density 0.15 and mean noise span length 3) and "prefix_lm".
// kInvalidArgument naming `name` and the names allowed; kFailedPrecondition
// for span_corruption when `vocabulary` has no extra ids (its sentinels).
absl::StatusOr<TokenPreprocessor> TokenPreprocessorByName(const std::string& name, const Vocabulary& vocabulary);
std::vector<std::string> TokenPreprocessorNames();

class TaskRegistry {
 public:
  static TaskRegistry& Global();

  // kAlreadyExists for a duplicate name; kInvalidArgument for a task without
  // a name, source or vocabulary.
  absl::Status Add(Task task);
  // kNotFound listing the registered names.
  absl::StatusOr<const Task*> Get(const std::string& name) const;
  std::vector<std::string> Names() const;

  // Registers a mixture (seqio's Mixture) under `name`: a task whose examples
  // come from the named tasks in proportion to their rates. A component that
  // is a mixture counts as its own tasks, its rate shared among them by
  // their shares. One epoch of a split holds as many examples as its tasks'
  // splits together; which task each position draws from is fixed by a
  // generator seeded with the mixture's name, and each task's examples are
  // used in order, wrapping around. Components must share a vocabulary.
  // kNotFound for an unknown component, kInvalidArgument for a rate <= 0 or
  // mismatched vocabularies, kAlreadyExists for a taken name.
  absl::Status AddMixture(const std::string& name, const std::vector<std::pair<std::string, double>>& rates);

 private:
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);
};

// Registers the bundled digits_to_words task (its vocabulary at
// `vocabulary_path`) in `registry`.
absl::Status RegisterDigitsToWords(const std::string& vocabulary_path, TaskRegistry* registry);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_TASK_H_
