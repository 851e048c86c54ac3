// The values of gin's configuration language: Python literals (None, bool,
// int, float, str, list, tuple, dict), configurable references
// (`@scope/name`, `@scope/name()`) and macros (`%scope/NAME`), with where
// each statement was written.
//
// Thread-safety: plain values; safe to share once built.
#ifndef TRAINYARD_GIN_GIN_VALUE_H_
#define TRAINYARD_GIN_GIN_VALUE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainyard {

// A file and a 1-based line: what an error names.
struct GinLocation {
  std::string file;
  int line = 0;
  std::string ToString() const;  // "file:line"
};

struct GinValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kReference, kMacro };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  // kString: the text; kReference and kMacro: the scoped name
  // ("train/utils.DatasetConfig", "gin.REQUIRED").
  std::string s;
  bool evaluate = false;        // kReference: written with "()"
  std::vector<GinValue> items;  // kList, kTuple; kDict: key, value, key, value, ...

  static GinValue None() { return {}; }
  static GinValue Bool(bool v);
  static GinValue Int(int64_t v);
  static GinValue Float(double v);
  static GinValue String(std::string v);
  static GinValue Reference(std::string name, bool evaluate);
  static GinValue Macro(std::string name);

  bool is_none() const { return kind == Kind::kNone; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double number() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }
  // `%gin.REQUIRED`: a value the configuration leaves to its user.
  bool is_required() const { return kind == Kind::kMacro && s == "gin.REQUIRED"; }

  // Python's repr of the value (gin's own form for references and macros):
  // what error messages quote and what the cross-check with gin-config
  // compares.
  std::string ToString() const;
};

bool operator==(const GinValue& a, const GinValue& b);
inline bool operator!=(const GinValue& a, const GinValue& b) { return !(a == b); }

}  // namespace trainyard

#endif  // TRAINYARD_GIN_GIN_VALUE_H_
