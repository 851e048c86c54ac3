// The small protocols every rank of a group runs together, so that ranks
// never part ways: each is one or two all-reduces, called by every rank at
// the same point with its own view, and returns the same answer on every
// rank (or the same collective failure, which callers treat as "a peer left").
//
//   AnyRank            did any rank raise this flag? (a stop request, the
//                      end of a shard)
//   AgreeOnOutcome     did every rank succeed at what each did alone? (a
//                      save on rank 0, building a model)
//   AgreeOnValue       do all ranks hold the same number? (the step they
//                      restored)
//   LowestValue        the smallest of the ranks' numbers (the next
//                      checkpoint any rank found)
//   FindDisagreement   do all ranks hold the same values? (per-parameter
//                      sums after a chunk: divergence)
//
// Thread-safety: as the Collective (one thread per rank).
#ifndef TRAINYARD_COLLECTIVE_AGREEMENT_H_
#define TRAINYARD_COLLECTIVE_AGREEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collective/collective.h"

namespace trainyard {

// For each flag, whether any rank raised it (one MAX all-reduce for all).
absl::StatusOr<std::vector<bool>> AnyRank(Collective* collective, const std::vector<bool>& mine);
absl::StatusOr<bool> AnyRank(Collective* collective, bool mine);

// Every rank's verdict on `what`, which each rank did on its own: OK when
// every rank's `mine` is OK; else this rank's own error where it failed, and
// kAborted naming the ranks that failed on the others ("<what> failed on
// rank(s) 1, 3 (their errors are in their logs)").
absl::Status AgreeOnOutcome(Collective* collective, const absl::Status& mine, absl::string_view what);

// The value every rank holds; kFailedPrecondition "<what>: the ranks hold
// different values (<lowest> to <highest>)" when they differ (on every rank).
absl::StatusOr<int64_t> AgreeOnValue(Collective* collective, int64_t mine, absl::string_view what);

// The smallest of the ranks' values (one MIN all-reduce), on every rank.
absl::StatusOr<int64_t> LowestValue(Collective* collective, int64_t mine);

// Where the ranks' values differ: `values` is a 1-D tensor of the same
// length on every rank, compared elementwise bit for bit (as doubles).
struct Disagreement {
  int64_t index = 0;  // the element that differs most
  double lowest = 0, highest = 0;
};
// nullopt when every rank holds identical values.
absl::StatusOr<std::optional<Disagreement>> FindDisagreement(Collective* collective, const torch::Tensor& values);

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_AGREEMENT_H_
