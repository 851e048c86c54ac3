#include "job/distributed_decode.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard {

namespace {

// `t` ([rows, w] tokens) as `width` columns of longs: cut, or zero-padded.
torch::Tensor ToWidth(const torch::Tensor& t, int64_t width) {
  torch::Tensor l = t.to(torch::kCPU, torch::kLong);
  if (l.size(1) >= width) return l.slice(1, 0, width);
  return torch::constant_pad_nd(l, {0, width - l.size(1)}, 0);
}

}  // namespace

absl::StatusOr<DecodedRows> DecodeAndGather(Model* model, const T5Batch* batch, const DistributedDecodeOptions& options,
                                            Collective* collective) {
  const int64_t n = options.rows_per_rank;
  const int64_t own = batch == nullptr ? 0 : batch->batch_size();
  if (n < 1 || own > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("distributed decode: a batch of ", own, " rows on a rank that sends ", n));
  }
  const int64_t li = options.inputs_length, lt = options.targets_length;
  const int64_t ld = options.predict ? options.decode.max_decode_length : 0;
  // One row of longs per row: [own?, inputs, targets, predictions]; and of
  // doubles: [prediction score, target score].
  torch::Tensor tokens = torch::zeros({n, 1 + li + lt + ld}, torch::kLong);
  torch::Tensor scores = torch::zeros({n, 2}, torch::kDouble);
  if (own > 0) {
    tokens.slice(0, 0, own).select(1, 0).fill_(1);
    if (li > 0) tokens.slice(0, 0, own).slice(1, 1, 1 + li).copy_(ToWidth(batch->encoder_input_tokens, li));
    if (lt > 0) tokens.slice(0, 0, own).slice(1, 1 + li, 1 + li + lt).copy_(ToWidth(batch->decoder_target_tokens, lt));
    if (options.predict) {
      TY_ASSIGN_OR_RETURN(Predictions predicted, model->PredictBatchWithAux(*batch, options.decode));
      tokens.slice(0, 0, own).slice(1, 1 + li + lt).copy_(ToWidth(predicted.tokens, ld));
      scores.slice(0, 0, own).select(1, 0).copy_(predicted.scores.to(torch::kCPU, torch::kDouble));
    }
    if (options.score) {
      TY_ASSIGN_OR_RETURN(torch::Tensor target_scores, model->ScoreBatch(*batch));
      scores.slice(0, 0, own).select(1, 1).copy_(target_scores.to(torch::kCPU, torch::kDouble));
    }
  }
  std::vector<torch::Tensor> all_tokens = {tokens}, all_scores = {scores};
  if (collective->world_size() > 1) {
    TY_RETURN_IF_ERROR(collective->AllGather(tokens, &all_tokens));
    TY_RETURN_IF_ERROR(collective->AllGather(scores, &all_scores));
  }
  DecodedRows out;
  std::vector<int64_t> keep;  // rows of the concatenation
  for (size_t r = 0; r < all_tokens.size(); ++r) {
    for (int64_t i = 0; i < n; ++i) {
      if (all_tokens[r][i][0].item<int64_t>() == 0) continue;
      out.rank.push_back(static_cast<int>(r));
      out.row.push_back(i);
      keep.push_back(static_cast<int64_t>(r) * n + i);
    }
  }
  const torch::Tensor index = torch::tensor(keep, torch::kLong);
  const torch::Tensor t = torch::cat(all_tokens).index_select(0, index);
  const torch::Tensor s = torch::cat(all_scores).index_select(0, index);
  if (li > 0) out.inputs = t.slice(1, 1, 1 + li);
  if (lt > 0) out.targets = t.slice(1, 1 + li, 1 + li + lt);
  if (options.predict) {
    out.predictions = t.slice(1, 1 + li + lt);
    out.prediction_scores = s.select(1, 0);
  }
  if (options.score) out.target_scores = s.select(1, 1);
  return out;
}

}  // namespace trainyard
