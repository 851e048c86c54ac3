// The tasks bundled with Trainyard, and where their files are found at run
// time: $TRAINYARD_DATA_DIR, else next to the running binary (an installed
// layout: <bin>/../share/trainyard/), else its Bazel runfiles.
#ifndef TRAINYARD_DATA_BUNDLED_H_
#define TRAINYARD_DATA_BUNDLED_H_

#include <string>

#include "absl/status/statusor.h"
#include "data/task.h"

namespace trainyard {

// The path of a bundled data file, e.g. "vocab/digits_to_words.model";
// kNotFound listing the places searched.
absl::StatusOr<std::string> FindBundledFile(const std::string& relative);

// Registers every bundled task (today: digits_to_words) in `registry`;
// with `vocabulary` (a checkpoint's, data/vocabulary_choice.h), every one
// tokenises with it in place of its own.
absl::Status RegisterBundledTasks(TaskRegistry* registry, const std::string& vocabulary = "");

}  // namespace trainyard

#endif  // TRAINYARD_DATA_BUNDLED_H_
