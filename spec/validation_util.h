// The vocabulary of spec validation, shared by the validator's files: an
// error list of "FIELD: message" lines, quoting, names, ranges and paths.
// Internal to spec/.
#ifndef TRAINYARD_SPEC_VALIDATION_UTIL_H_
#define TRAINYARD_SPEC_VALIDATION_UTIL_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainyard {
namespace spec_internal {

// Every problem of a spec, one line each, reported all at once.
class Errors {
 public:
  void Add(absl::string_view field, absl::string_view message);
  bool empty() const { return lines_.empty(); }
  // kInvalidArgument with the lines, or OK.
  absl::Status ToStatus() const;

 private:
  std::vector<std::string> lines_;
};

constexpr double kInf = INFINITY;

// `s` in double quotes, non-printable bytes as \xNN, cut at 200 characters.
std::string Quote(absl::string_view s);

// A name of [A-Za-z0-9] then [A-Za-z0-9 + extra], 1..max_len characters.
bool IsValidName(absl::string_view s, absl::string_view extra, size_t max_len);

// Adds an error unless v lies in [lo, hi] (or the open variants) and is
// finite.
void CheckRange(Errors* errors, absl::string_view field, double v, double lo, bool lo_open, double hi, bool hi_open);
void CheckIntRange(Errors* errors, absl::string_view field, int64_t v, int64_t lo, int64_t hi);

// Adds an error (and returns false) for a path with "..", a NUL or a newline.
bool CheckPath(Errors* errors, absl::string_view field, absl::string_view path);

}  // namespace spec_internal
}  // namespace trainyard

#endif  // TRAINYARD_SPEC_VALIDATION_UTIL_H_
