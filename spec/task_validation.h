// Validation of the tasks a spec names (internal to spec/): task_definitions
// with their preprocessing chains, mixture_definitions, `task` and
// eval.tasks. Fills in the chains' defaults, T5's implicit rekey of plain
// text, and expands mixtures in eval.tasks into their component tasks.
#ifndef TRAINYARD_SPEC_TASK_VALIDATION_H_
#define TRAINYARD_SPEC_TASK_VALIDATION_H_

#include <string>

#include "proto/job.pb.h"
#include "spec/validation_util.h"

namespace trainyard {
namespace spec_internal {

void ValidateTasks(Errors* errors, JobSpec* spec);

// One definition's preprocessing chain (task_chain.cc): order, parameters,
// and the features each step sees. Fills in defaults (and T5's rekey of
// plain text) and extra_ids. `prefix` names the definition in errors.
void ValidateChain(Errors* errors, const std::string& prefix, TaskDefinition* def);

}  // namespace spec_internal
}  // namespace trainyard

#endif  // TRAINYARD_SPEC_TASK_VALIDATION_H_
