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
// input (or no target when `need_targets`), or for none at all.
absl::StatusOr<int64_t> CheckExamples(const std::vector<NaturalExample>& examples, bool need_targets);

// Tokenised, truncated, unpacked rows of `examples`, in order; counts the
// examples cut to the feature lengths in *truncated.
absl::StatusOr<T5Batch> TokenizeAndBatch(const std::vector<NaturalExample>& examples, bool need_targets,
                                         const Vocabulary& vocabulary, bool add_eos, const FeatureLengths& lengths,
                                         int64_t* truncated);

// Text preprocessors over natural examples; dropped ones are left out.
absl::StatusOr<std::vector<NaturalExample>> ApplyPreprocessors(const std::vector<NaturalExample>& examples,
                                                               const std::vector<Preprocessor>& preprocessors);

}  // namespace interactive_internal
}  // namespace trainyard

#endif  // TRAINYARD_INTERACTIVE_EXAMPLES_H_
