// Internal to //interactive: natural-text examples into batches, shared by
// the InteractiveModel and its helpers (interactive_model.h declares the
// public API).
#ifndef TRAINYARD_INTERACTIVE_EXAMPLES_H_
#define TRAINYARD_INTERACTIVE_EXAMPLES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "interactive/interactive_model.h"

namespace trainyard {
namespace interactive_internal {

// The data counts of a batch ("data/examples", "data/truncated_examples",
// "non_padding_fraction/{inputs,targets}").
std::map<std::string, double> DataMetrics(const T5Batch& batch, int64_t truncated);

// The number of examples; kInvalidArgument naming the first that has no
// input (or no target when `need_targets`), or for none at all. With
// `token_preprocessors` every example needs a target (they read its ids)
// and its input may be empty (they make the inputs).
absl::StatusOr<int64_t> CheckExamples(const std::vector<NaturalExample>& examples, bool need_targets,
                                      bool token_preprocessors = false);

// Tokenised, truncated, unpacked rows of `examples`, in order; counts the
// examples cut to the feature lengths in *truncated.
absl::StatusOr<T5Batch> TokenizeAndBatch(const std::vector<NaturalExample>& examples, bool need_targets,
                                         const Vocabulary& vocabulary, bool add_eos, const FeatureLengths& lengths,
                                         int64_t* truncated);

// Unpacked rows of tokenised examples, in order, cut to the feature
// lengths; counts the examples cut in *truncated.
T5Batch BatchTokens(const std::vector<TokenizedExample>& tokenized, const FeatureLengths& lengths, int64_t* truncated);

// The examples through the data pipeline's token stage (Tokenize of
// data/task.h): tokenised with `task`'s vocabulary, its token preprocessors
// run on example i with a generator seeded by ExampleSeed(seed, epoch,
// indices[i]), EOS appended when task.add_eos. Errors name the example.
absl::StatusOr<std::vector<TokenizedExample>> TokenizeThroughTask(const std::vector<NaturalExample>& examples,
                                                                  const std::vector<int64_t>& indices, const Task& task,
                                                                  uint64_t seed, int64_t epoch);

// Text preprocessors over natural examples; dropped ones are left out.
// `kept`, when given, receives the index in `examples` of each one returned.
absl::StatusOr<std::vector<NaturalExample>> ApplyPreprocessors(const std::vector<NaturalExample>& examples,
                                                               const std::vector<Preprocessor>& preprocessors,
                                                               std::vector<int64_t>* kept = nullptr);

}  // namespace interactive_internal
}  // namespace trainyard

#endif  // TRAINYARD_INTERACTIVE_EXAMPLES_H_
