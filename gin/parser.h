// gin's configuration language, parsed as gin-config's ConfigParser does:
//
//   from __gin__ import dynamic_registration     # imports
//   include 't5x/configs/runs/pretrain.gin'       # includes
//   BATCH_SIZE = 128                              # macros
//   train/utils.DatasetConfig.batch_size = %BATCH_SIZE
//   train_script.train:                           # a block of bindings
//     total_steps = 1_000
//     partitioner = @partitioning.PjitPartitioner()
//
// Values are Python literals, `@scope/name[()]` references and
// `%scope/NAME` macros; brackets continue a statement over lines, `#`
// starts a comment. The statements come back in the file's order, each with
// its line; nothing is resolved here (gin/gin_config.h does).
//
// Thread-safety: pure functions.
#ifndef TRAINYARD_GIN_PARSER_H_
#define TRAINYARD_GIN_PARSER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gin/gin_value.h"

namespace trainyard {

struct GinStatement {
  enum class Kind { kBinding, kImport, kInclude };
  Kind kind = Kind::kBinding;
  GinLocation location;
  // kBinding: `scope/selector.arg = value`. A macro `scope/NAME = value`
  // has selector NAME and an empty arg (gin-config's split).
  std::string scope, selector, arg;
  GinValue value;
  // kImport: `import module [as alias]` or `from a.b import module [as
  // alias]` (module is then "a.b.module").
  std::string module, alias;
  bool is_from = false;
  // kInclude: the file as written.
  std::string include;

  bool is_macro() const { return kind == Kind::kBinding && arg.empty(); }
};

// kInvalidArgument "FILE:LINE: what was expected" for a syntax error.
absl::StatusOr<std::vector<GinStatement>> ParseGin(absl::string_view text, const std::string& file);

}  // namespace trainyard

#endif  // TRAINYARD_GIN_PARSER_H_
