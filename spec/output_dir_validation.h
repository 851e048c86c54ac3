// Validation of a job's output directory (internal to spec/): a path without
// "..", cleaned, and with ValidationOptions::output_root set, resolved
// against it and kept inside it, symbolic links included.
#ifndef TRAINYARD_SPEC_OUTPUT_DIR_VALIDATION_H_
#define TRAINYARD_SPEC_OUTPUT_DIR_VALIDATION_H_

#include "proto/job.pb.h"
#include "spec/jobspec_validator.h"
#include "spec/validation_util.h"

namespace trainyard {
namespace spec_internal {

// Checks spec->output_dir and rewrites it cleaned (and resolved against
// options.output_root when that is set); errors name "output_dir".
void ValidateOutputDir(Errors* errors, JobSpec* spec, const ValidationOptions& options);

}  // namespace spec_internal
}  // namespace trainyard

#endif  // TRAINYARD_SPEC_OUTPUT_DIR_VALIDATION_H_
