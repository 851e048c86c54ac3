// A gin configuration loaded as T5X's gin_utils loads one: the files in
// order, each `include` read from the search path (then the including
// file's folder), then the command line's bindings; the last binding of a
// key wins. Lookups follow gin's rules:
//   - a configurable is named by the end of its module path ("train",
//     "utils.DatasetConfig", "network.T5Config"); a binding's selector
//     matches it when one ends the other at a '.', after the file's import
//     aliases are expanded (`import __main__ as train_script` makes
//     `train_script.train` mean `__main__.train`);
//   - a configurable called in scope "train" (`@train/utils.DatasetConfig()`)
//     takes a `train/...` binding before an unscoped one;
//   - `%NAME` is the macro NAME's value, resolved through other macros;
//     `%gin.REQUIRED` left unbound is an error naming where it was required.
// Every binding remembers whether a lookup read it, so that a converter
// can name the ones it never used.
//
// Thread-safety: not thread-safe (lookups mark bindings used).
#ifndef TRAINYARD_GIN_GIN_CONFIG_H_
#define TRAINYARD_GIN_GIN_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gin/parser.h"

namespace trainyard {

struct GinLoadOptions {
  std::vector<std::string> search_path;  // folders `include` looks in, in order
  // Whole binding statements ("MODEL_DIR = '/tmp/run'"), applied after the
  // files as T5X's --gin.NAME=VALUE flags are.
  std::vector<std::string> bindings;
};

class GinConfig {
 public:
  struct Binding {
    GinStatement statement;
    std::string module_selector;  // the selector with import aliases expanded
    bool used = false;
    bool overridden = false;  // a later binding of the same key replaced it
  };

  // kNotFound for a file (or include) found nowhere, naming where it was
  // looked for; kInvalidArgument for a syntax error or an include cycle.
  static absl::StatusOr<GinConfig> Load(const std::vector<std::string>& files, const GinLoadOptions& options);
  // One text as a file named `file` (includes resolved as Load does).
  static absl::StatusOr<GinConfig> FromText(const std::string& text, const std::string& file,
                                            const GinLoadOptions& options = {});

  // The binding of `arg` for `configurable` called in `scope` ("" for
  // none; "a/b" for nested scopes, innermost last), or nullptr. Marks it
  // used.
  const Binding* Find(const std::string& scope, const std::string& configurable, const std::string& arg);
  // Whether any binding names `configurable` in `scope` (or unscoped).
  bool Mentions(const std::string& scope, const std::string& configurable) const;
  // `value` with every macro replaced by its bound value (recursively,
  // inside containers too). kInvalidArgument for an unbound or required
  // macro or a cycle, naming `where`.
  absl::StatusOr<GinValue> Resolve(const GinValue& value, const GinLocation& where);
  // A selector or reference name with the files' import aliases expanded
  // ("network.T5Config" after `from t5x.examples.t5 import network` is
  // "t5x.examples.t5.network.T5Config").
  std::string ExpandAliases(const std::string& selector) const;

  // Every binding statement in the order read (include files in place).
  const std::vector<Binding>& bindings() const { return bindings_; }
  // Every statement, imports and includes too (the files' order).
  const std::vector<GinStatement>& statements() const { return statements_; }

 private:
  absl::Status Read(const std::string& path, const std::string& text, const GinLoadOptions& options,
                    std::vector<std::string>* stack);
  absl::Status Add(std::vector<GinStatement> statements, const GinLoadOptions& options, const std::string& folder,
                   std::vector<std::string>* stack);
  absl::StatusOr<GinValue> ResolveDepth(const GinValue& value, const GinLocation& where, int depth);

  std::vector<Binding> bindings_;
  std::vector<GinStatement> statements_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // bound name -> module path
};

// Whether `selector` (aliases expanded) names `configurable`: equal, or one
// ends the other at a '.'.
bool GinSelectorMatches(const std::string& selector, const std::string& configurable);

}  // namespace trainyard

#endif  // TRAINYARD_GIN_GIN_CONFIG_H_
