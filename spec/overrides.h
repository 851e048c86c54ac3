// `--set path.to.field=value` overrides, the command-line habit T5X users know
// from gin bindings. Applied to a parsed JobSpec before validation.
//
// Paths are proto field names joined by '.', with [i] to index a repeated
// field (i == size appends a new element):
//   batch_size=64
//   model.preset=t5_1_1_small              (clears model.config: a oneof)
//   learning_rate.factors="constant * rsqrt_decay"
//   actions[0].early_stopping.patience=5
//   eval.tasks=wmt_validation,glue_mrpc   (a repeated scalar: the whole list)
//   model={preset: "tiny"}                 (a message: text format in braces)
// Values are parsed by the field's type: integers, floats, bools (true/false/
// 1/0), enum names, strings (surrounding quotes optional).
//
// Thread-safety: thread-compatible (mutates only its argument).
#ifndef TRAINYARD_SPEC_OVERRIDES_H_
#define TRAINYARD_SPEC_OVERRIDES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace trainyard {

// Applies one "path=value" override. kInvalidArgument names the override,
// the path element at fault and what is allowed there.
absl::Status ApplyOverride(absl::string_view assignment, google::protobuf::Message* message);

// Applies overrides in order (a later one wins); stops at the first error.
absl::Status ApplyOverrides(const std::vector<std::string>& assignments, google::protobuf::Message* message);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_OVERRIDES_H_
