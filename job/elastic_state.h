// fault_tolerance ELASTIC: a training job's state moved between the ranks
// of a new group (Regroup) and its digest, which proves the ranks hold the
// same state afterwards.
#ifndef TRAINYARD_JOB_ELASTIC_STATE_H_
#define TRAINYARD_JOB_ELASTIC_STATE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "job/components.h"

namespace trainyard {

// What Regroup did on this rank.
struct RegroupOutcome {
  int64_t step = 0;        // every rank's step after it
  int source_rank = -1;    // whose state was broadcast (-1: none, all agreed)
  int64_t sent_bytes = 0;  // the broadcast's size
  double transfer_seconds = 0;
  uint64_t state_digest = 0;  // StateDigest() after it: equal on every rank
};

// TrainingJob::Regroup on `job`: a rank that is not `fresh` moves to
// `collective` first (JobComponents::MoveTo); the ranks then agree on the
// source and, when any differs from it, the source broadcasts its state in
// flat buckets (collective/flat_buckets.h).
absl::StatusOr<RegroupOutcome> RegroupState(JobComponents* job, Collective* collective, bool fresh);

// A hash of the parameters (PARAMETERS sharding: this rank's), optimizer
// state (sharded: this rank's shard), step and data position: equal on two
// ranks exactly when the training states they hold are bit for bit equal
// (but for hash collisions).
uint64_t StateDigest(const JobComponents& job);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_ELASTIC_STATE_H_
