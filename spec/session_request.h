// JobService.OpenSession's request, normalised: the session's counterpart of
// ValidateAndNormalize (spec/jobspec_validator.h). Apart from the job spec's
// target because its message is the service's (proto/job_service.proto),
// which the training layers below do not speak.
#ifndef TRAINYARD_SPEC_SESSION_REQUEST_H_
#define TRAINYARD_SPEC_SESSION_REQUEST_H_

#include "absl/status/statusor.h"
#include "proto/job_service.pb.h"
#include "spec/jobspec_validator.h"

namespace trainyard {

// An OpenSessionRequest with defaults filled in (batch_size 32, feature
// lengths 64/64, idle timeout 300 s, wait 10 s, num_workers 1) and checked:
// kInvalidArgument naming the field; output_dir resolved as a job's. The
// checkpoint (or job id) is checked where it is resolved.
absl::StatusOr<OpenSessionRequest> NormalizeOpenSessionRequest(const OpenSessionRequest& request,
                                                               const ValidationOptions& options);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_SESSION_REQUEST_H_
