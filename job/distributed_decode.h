// One batch decoded and scored across the ranks of a collective, and the
// results gathered: the one way every caller does it (inference evaluation
// during training, EVALUATION and INFERENCE jobs, the interactive model and
// its sessions).
//
// The padding rule: every rank sends `rows_per_rank` rows and how many of
// them are its own; a rank whose batch is shorter (or that has none this
// round) pads with zeros, which are never decoded and are dropped after the
// gather. Every rank receives every rank's rows, in rank order.
#ifndef TRAINYARD_JOB_DISTRIBUTED_DECODE_H_
#define TRAINYARD_JOB_DISTRIBUTED_DECODE_H_

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "model/batch.h"
#include "model/model.h"

namespace trainyard {

struct DistributedDecodeOptions {
  bool predict = false;  // decode predictions (Model::PredictBatchWithAux with `decode`)
  bool score = false;    // score the batch's targets (Model::ScoreBatch)
  DecodeOptions decode;  // predict: max_decode_length is the width of the gathered predictions
  // Gather the rows' input and target tokens too, cut or zero-padded to
  // these widths (0: not gathered).
  int64_t inputs_length = 0;
  int64_t targets_length = 0;
  // Every rank's rows in a round (> 0): the most any rank's batch holds.
  int64_t rows_per_rank = 0;
};

// Every rank's own rows of a round, in rank order and, within a rank, in
// its batch's order.
struct DecodedRows {
  std::vector<int> rank;            // the rank each row came from
  std::vector<int64_t> row;         // its row in that rank's batch
  torch::Tensor inputs;             // [n, inputs_length] long (inputs_length > 0)
  torch::Tensor targets;            // [n, targets_length] long (targets_length > 0)
  torch::Tensor predictions;        // [n, max_decode_length] long, 0 after EOS (predict)
  torch::Tensor prediction_scores;  // [n] double (predict)
  torch::Tensor target_scores;      // [n] double (score)
  int64_t size() const { return static_cast<int64_t>(rank.size()); }
};

// One round, called by every rank of `collective` together: this rank
// decodes and/or scores `batch` (null: no rows this round; at most
// rows_per_rank rows), then the ranks gather. kInvalidArgument for a batch
// of more rows than rows_per_rank; a failed gather is the collective's
// error.
absl::StatusOr<DecodedRows> DecodeAndGather(Model* model, const T5Batch* batch, const DistributedDecodeOptions& options,
                                            Collective* collective);

}  // namespace trainyard

#endif  // TRAINYARD_JOB_DISTRIBUTED_DECODE_H_
