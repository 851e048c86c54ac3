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
#include <utility>
#include <vector>

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

// On every rank: `total` becomes the metrics of `steps` global steps made
// of every rank's pieces, added in one fixed order: step by step, rank by
// rank, and each rank's pieces of the step in order. `pieces`: this rank's,
// as (step in [0, steps), metrics). When each rank's pieces of a step are
// the run of whole units that follows the lower ranks' (the global
// microbatches, or eval units, of data_parallel.reproducible), that order
// is the global one, and `total` is the same bits however the units were
// spread over the ranks. Pieces of a step merge as parts of it, steps as
// steps (MergeMetrics). A rank with no pieces takes the names of the
// lowest rank that has some. kInternal for pieces of other metrics than
// the first's, or of a step out of range.
absl::Status CombineMetricPiecesInOrder(Collective* collective, int64_t steps,
                                        const std::vector<std::pair<int64_t, Metrics>>& pieces, Metrics* total);

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_RANK_METRICS_H_
