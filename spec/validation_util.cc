#include "spec/validation_util.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trainyard {
namespace spec_internal {

void Errors::Add(absl::string_view field, absl::string_view message) {
  lines_.push_back(absl::StrCat(field, ": ", message));
}

absl::Status Errors::ToStatus() const {
  if (lines_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(lines_, "\n"));
}

namespace {

bool IsNameChar(char c, absl::string_view extra) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || extra.find(c) != extra.npos;
}

}  // namespace

std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, 200)) {
    if (absl::ascii_isprint(static_cast<unsigned char>(c))) {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    }
  }
  if (s.size() > 200) out += "...";
  return out + "\"";
}

bool IsValidName(absl::string_view s, absl::string_view extra, size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  if (!absl::ascii_isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!IsNameChar(c, extra)) return false;
  }
  return true;
}

void CheckRange(Errors* errors, absl::string_view field, double v, double lo, bool lo_open, double hi, bool hi_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok) {
    errors->Add(field, absl::StrCat(v, " is out of range; allowed: ", lo_open ? "(" : "[", lo, ", ",
                                    std::isinf(hi) ? "inf" : absl::StrCat(hi), hi_open ? ")" : "]"));
  }
}

void CheckIntRange(Errors* errors, absl::string_view field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    errors->Add(field, absl::StrCat(v, " is out of range; allowed: ", lo, "..", hi));
  }
}

bool CheckPath(Errors* errors, absl::string_view field, absl::string_view path) {
  if (path.find('\0') != path.npos || path.find('\n') != path.npos) {
    errors->Add(field, absl::StrCat(Quote(path), " contains a NUL or newline character"));
    return false;
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      errors->Add(field, absl::StrCat(Quote(path), " contains \"..\"; paths may not climb out of their root"));
      return false;
    }
  }
  return true;
}

}  // namespace spec_internal
}  // namespace trainyard
