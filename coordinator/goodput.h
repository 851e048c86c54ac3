// A job's goodput: where its wall time went (proto/job_service.proto,
// Goodput). The driver adds each call's time to its bucket as it ends;
// the coordinator adds the time a job waited for a gang, and fills the
// wall time, the rest and the ratio whenever a job's record is read.
#ifndef TRAINYARD_COORDINATOR_GOODPUT_H_
#define TRAINYARD_COORDINATOR_GOODPUT_H_

#include <cstdint>
#include "proto/job_service.pb.h"

namespace trainyard {

// A chunk of `steps` steps from `first_step` that took `seconds` of wall
// time, of which rank 0 waited `data_wait` for batches and `checkpoint`
// for the chunk's checkpoint: steps above trained_to_step are productive,
// the others recomputed (each step an equal share of the compute time, and
// counted in recomputed_steps); trained_to_step advances.
void AccountChunk(int64_t first_step, int64_t steps, double seconds, double data_wait, double checkpoint,
                  Goodput* goodput);

// wall_seconds (from `create_ms` to `end_ms`, or to `now_ms` while the
// job runs), other_seconds (wall less every bucket, at least 0) and ratio.
void FinishGoodput(int64_t create_ms, int64_t end_ms, int64_t now_ms, Goodput* goodput);

}  // namespace trainyard

#endif  // TRAINYARD_COORDINATOR_GOODPUT_H_
