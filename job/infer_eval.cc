#include "job/infer_eval.h"

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/status_macros.h"
#include "trainer/task_batches.h"

namespace trainyard {

DecodeOptions DecodeOptionsFromConfig(const InferenceConfig& config, uint64_t seed, int rank) {
  DecodeOptions decode;
  switch (config.method()) {
    case InferenceConfig::BEAM:
      decode.method = DecodeOptions::Method::kBeam;
      break;
    case InferenceConfig::SAMPLE:
      decode.method = DecodeOptions::Method::kSample;
      break;
    default:
      decode.method = DecodeOptions::Method::kGreedy;
  }
  decode.max_decode_length = config.max_decode_length();
  if (config.beam_size() > 0) decode.beam_size = config.beam_size();
  if (config.has_alpha()) decode.alpha = config.alpha();
  if (config.has_temperature()) decode.temperature = config.temperature();
  decode.top_k = config.top_k();
  decode.top_p = config.top_p();
  decode.seed = (config.has_seed() ? static_cast<uint64_t>(config.seed()) : seed) + static_cast<uint64_t>(rank);
  return decode;
}

DecodeOptions DecodeOptionsFromSpec(const JobSpec& spec, int rank) {
  DecodeOptions decode = DecodeOptionsFromConfig(spec.inference(), static_cast<uint64_t>(spec.seed()), rank);
  decode.compute_dtype = spec.dtype() == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
  return decode;
}

absl::StatusOr<MetricResults> InferEval(Model* model, BatchIterator* batches, const Vocabulary& vocabulary,
                                        const std::vector<MetricFn>& fns, const InferEvalOptions& options,
                                        Collective* collective) {
  const int64_t decode_length = options.decode.max_decode_length;
  const int64_t targets_length = options.targets_length;
  std::vector<std::string> targets, predictions;
  std::vector<double> target_scores;
  AuxValues aux;
  const int64_t n = options.rows;
  while (true) {
    absl::StatusOr<T5Batch> batch = batches->Next();
    const bool exhausted = absl::IsOutOfRange(batch.status());
    if (!exhausted) TY_RETURN_IF_ERROR(batch.status());
    const bool stop = options.preempted != nullptr && options.preempted->load();
    TY_ASSIGN_OR_RETURN(std::vector<bool> any, AnyRank(collective, {stop, !exhausted}));
    if (any[0]) return PreemptionError(options.step);
    if (!any[1]) break;
    // This rank's rows: prediction tokens then target tokens, and their two
    // scores; zeros for a rank whose shard has ended.
    torch::Tensor tokens = torch::zeros({n, decode_length + targets_length}, torch::kLong);
    torch::Tensor scores = torch::zeros({n, 2}, torch::kDouble);
    if (!exhausted) {
      if (batch->decoder_target_tokens.size(0) != n || batch->decoder_target_tokens.size(1) != targets_length) {
        return absl::InternalError(
            absl::StrCat("inference evaluation: a batch of ", batch->decoder_target_tokens.size(0), " x ",
                         batch->decoder_target_tokens.size(1), " targets, want ", n, " x ", targets_length));
      }
      TY_ASSIGN_OR_RETURN(Predictions predicted, model->PredictBatchWithAux(*batch, options.decode));
      TY_ASSIGN_OR_RETURN(torch::Tensor target_score, model->ScoreBatch(*batch));
      const torch::Tensor p = predicted.tokens.to(torch::kCPU, torch::kLong);
      const int64_t plen = std::min<int64_t>(p.size(1), decode_length);
      tokens.slice(1, 0, plen).copy_(p.slice(1, 0, plen));
      tokens.slice(1, decode_length).copy_(batch->decoder_target_tokens.to(torch::kCPU, torch::kLong));
      scores.select(1, 0).copy_(predicted.scores.to(torch::kCPU, torch::kDouble));
      scores.select(1, 1).copy_(target_score.to(torch::kCPU, torch::kDouble));
    }
    std::vector<torch::Tensor> all_tokens, all_scores;
    TY_RETURN_IF_ERROR(collective->AllGather(tokens, &all_tokens));
    TY_RETURN_IF_ERROR(collective->AllGather(scores, &all_scores));
    if (collective->rank() != 0) continue;
    for (size_t r = 0; r < all_tokens.size(); ++r) {
      for (int64_t i = 0; i < n; ++i) {
        const torch::Tensor target = all_tokens[r][i].slice(0, decode_length);
        if (target.count_nonzero().item<int64_t>() == 0) continue;  // padding, not an example
        predictions.push_back(DecodeRow(vocabulary, all_tokens[r][i].slice(0, 0, decode_length)));
        targets.push_back(DecodeRow(vocabulary, target));
        aux["scores"].push_back(all_scores[r][i][0].item<double>());
        target_scores.push_back(all_scores[r][i][1].item<double>());
      }
    }
  }
  if (collective->rank() != 0) return MetricResults();
  if (targets.empty()) return absl::FailedPreconditionError("inference evaluation: the split has no examples");
  TY_ASSIGN_OR_RETURN(MetricResults metrics, ComputeMetrics(fns, targets, &predictions, &aux, &target_scores));
  metrics["examples"] = static_cast<double>(targets.size());
  return metrics;
}

}  // namespace trainyard
