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
// drop it.
using Preprocessor = std::function<absl::StatusOr<absl::optional<Example>>(Example)>;

// A token-level preprocessor (after tokenisation, before EOS is appended),
// with a generator seeded per example: f(seed, epoch, example index).
using TokenPreprocessor = std::function<absl::StatusOr<TokenizedExample>(TokenizedExample, std::mt19937_64* rng)>;

struct Task {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<ExampleSource>>(const std::string& split)> source;
  std::vector<Preprocessor> preprocessors;
  std::vector<TokenPreprocessor> token_preprocessors;
  std::shared_ptr<const Vocabulary> vocabulary;
  bool add_eos = true;
  std::vector<std::string> metric_fns;
};

// Tokenizes an example's "inputs" and "targets" (a missing feature is
// empty), runs the token preprocessors, appends EOS if asked; both features
// must end up non-empty. `rng` may be null when the task has no token
// preprocessors.
absl::StatusOr<TokenizedExample> Tokenize(const Task& task, const Example& example, std::mt19937_64* rng = nullptr);

// Built-in preprocessors.
// Renames features: {new name: old name}; other features are dropped.
Preprocessor Rekey(std::map<std::string, std::string> mapping);
// T5's span corruption of the "targets" tokens into inputs and targets
// (data/span_corruption.h); sentinels are the vocabulary's extra ids.
TokenPreprocessor SpanCorruption(const Vocabulary& vocabulary, double noise_density = 0.15,
                                 double mean_noise_span_length = 3.0);
// Prefix LM: the "targets" tokens split at a uniformly random point; the
// prefix becomes the inputs, the rest the targets.
TokenPreprocessor PrefixLm();

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
  // come from the named tasks in proportion to their rates. One epoch of a
  // split holds as many examples as its components' splits together; which
  // component each position draws from is fixed by a generator seeded with
  // the mixture's name, and each component's examples are used in order,
  // wrapping around. Components must share a vocabulary. kNotFound for an
  // unknown component, kInvalidArgument for a rate <= 0 or mismatched
  // vocabularies, kAlreadyExists for a taken name.
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
