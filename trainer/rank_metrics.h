// Metrics combined over the ranks of a data-parallel group into those of
// the global batch, as T5X's clu metrics computed on the whole batch.
//
// A step's global batch is the ranks' shares together. Each rank merges the
// metrics of its shares over the steps; combining them then sums, over the
// ranks, every metric's numerator and denominator, never ratios:
//  - Average metrics (accuracy, loss_per_nonpadding_target_token, ...):
//    totals and counts summed, e.g. accuracy = correct tokens of every
//    rank / real target tokens of every rank.
//  - AveragePerStep metrics (loss, z_loss, cross_ent_loss): totals summed,
//    the count is the number of global steps. A rank's share of a step's
//    loss must be its tokens' loss over the global batch's normalising
//    factor (LossOptions::loss_normalizing_factor), so that the shares sum
//    to the global batch's loss.
//
// Thread-safety: as the Collective (one thread per rank).
#ifndef TRAINYARD_TRAINER_RANK_METRICS_H_
#define TRAINYARD_TRAINER_RANK_METRICS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "collective/collective.h"
#include "model/metrics.h"

namespace trainyard {

// In place on every rank: `metrics`, this rank's shares of `steps` global
// steps, become the global metrics (the same on every rank). A rank that
// took part in no step (an empty eval shard) may hold none: it gets the
// other ranks' names. Every rank of the group calls it at the same point.
// With one rank, `metrics` is left as it is.
absl::Status AllReduceMetrics(Collective* collective, int64_t steps, Metrics* metrics);

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_RANK_METRICS_H_
