// Validation of a spec's fault_tolerance (internal to spec/).
#ifndef TRAINYARD_SPEC_FAULT_TOLERANCE_VALIDATION_H_
#define TRAINYARD_SPEC_FAULT_TOLERANCE_VALIDATION_H_

#include "proto/job.pb.h"
#include "spec/validation_util.h"

namespace trainyard {
namespace spec_internal {

// fault_tolerance: RESTART by default; ELASTIC only for `training` kinds on
// 2 or more workers, replicated or hybrid-sharded (ShardGroupSize below
// num_workers); min_workers (ELASTIC only) defaults to one shard group and
// is a whole number of them. Reads num_workers and data_parallel as
// normalised before it. Errors name "fault_tolerance.mode" or
// "fault_tolerance.min_workers".
void ValidateFaultTolerance(Errors* errors, JobSpec* spec, bool training);

}  // namespace spec_internal
}  // namespace trainyard

#endif  // TRAINYARD_SPEC_FAULT_TOLERANCE_VALIDATION_H_
