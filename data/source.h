// Example sources: random-access collections of text examples (feature name
// -> text), so that shuffling, sharding and resuming are pure index
// arithmetic. Files are indexed once (line offsets), then read on demand.
//
//  - TSV: one example per line, tab-separated columns named by `fields`.
//  - JSONL: one JSON object per line with string values for `fields`.
//  - Plain text: one document per line.
//  - In-memory examples (the interactive model's).
//
// Bad lines (wrong column count, invalid JSON, a missing or non-string field,
// invalid UTF-8) either fail with file:line (strict) or are skipped and
// counted (lenient).
//
// Thread-safety: sources are immutable after Open; Get is thread-safe.
#ifndef TRAINYARD_DATA_SOURCE_H_
#define TRAINYARD_DATA_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

using Example = std::map<std::string, std::string>;

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual int64_t size() const = 0;
  virtual absl::StatusOr<Example> Get(int64_t index) const = 0;
  // Lines skipped as bad while indexing (lenient mode).
  virtual int64_t skipped() const { return 0; }
};

struct FileSourceOptions {
  std::vector<std::string> fields = {"inputs", "targets"};
  bool strict = true;  // false: skip bad lines and count them
};

// `paths`: files read in order; shell patterns ("train-*.tsv") expand to
// their matches in sorted order (kNotFound if a pattern matches nothing).
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTsvSource(const std::vector<std::string>& paths,
                                                             const FileSourceOptions& options = {});
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenJsonlSource(const std::vector<std::string>& paths,
                                                               const FileSourceOptions& options = {});

// Plain text: one document per line as the feature `field`; blank lines
// are skipped (not counted as bad), a trailing CR is dropped, invalid UTF-8
// is a bad line.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTextSource(const std::vector<std::string>& paths,
                                                              const std::string& field = "text", bool strict = true);

// Structural UTF-8 check (lead and continuation bytes), as the sources
// check text.
bool IsValidUtf8(std::string_view s);

// Shell patterns (a sharded data set's "train-*.tsv") expanded to their
// matches in sorted order per pattern; a plain path stays as it is.
// kNotFound if a pattern matches nothing.
absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(const std::vector<std::string>& patterns);

std::unique_ptr<ExampleSource> InMemorySource(std::vector<Example> examples);

// The bundled task's split as a source: {"inputs": "1234", "targets": "one
// thousand two hundred thirty-four"} for every number of the split, in
// increasing order. split: "train", "validation" or "test".
absl::StatusOr<std::unique_ptr<ExampleSource>> DigitsToWordsSource(const std::string& split);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_SOURCE_H_
