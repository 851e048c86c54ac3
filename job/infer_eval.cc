#include "job/infer_eval.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/status_macros.h"
#include "job/components.h"
#include "job/distributed_decode.h"
#include "trainer/task_batches.h"

namespace trainyard {

DecodeOptions DecodeOptionsFromConfig(const InferenceConfig& config, uint64_t seed) {
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
  decode.seed = config.has_seed() ? static_cast<uint64_t>(config.seed()) : seed;
  return decode;
}

DecodeOptions DecodeOptionsFromSpec(const JobSpec& spec) {
  DecodeOptions decode = DecodeOptionsFromConfig(spec.inference(), static_cast<uint64_t>(spec.seed()));
  decode.compute_dtype = ComputeDtype(spec);
  return decode;
}

std::vector<uint64_t> StridedRowKeys(int64_t b, int64_t rows, int64_t batch_rows, int rank, int world) {
  std::vector<uint64_t> keys;
  for (int64_t i = 0; i < batch_rows; ++i) keys.push_back(static_cast<uint64_t>((b * rows + i) * world + rank));
  return keys;
}

absl::StatusOr<InferenceConfig> InferenceConfigFromDecodeOptions(const DecodeOptions& decode) {
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  if (decode.max_decode_length > kMaxInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode.max_decode_length: ", decode.max_decode_length, "; a job spec holds at most 2^31 - 1"));
  }
  InferenceConfig config;
  config.set_max_decode_length(static_cast<int32_t>(decode.max_decode_length));
  switch (decode.method) {
    case DecodeOptions::Method::kGreedy:
      config.set_method(InferenceConfig::GREEDY);
      break;
    case DecodeOptions::Method::kBeam:
      config.set_method(InferenceConfig::BEAM);
      config.set_beam_size(decode.beam_size);
      config.set_alpha(static_cast<float>(decode.alpha));
      break;
    case DecodeOptions::Method::kSample:
      if (decode.top_k > kMaxInt32) {
        return absl::InvalidArgumentError(
            absl::StrCat("decode.top_k: ", decode.top_k, "; a job spec holds at most 2^31 - 1"));
      }
      if (decode.seed > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("decode.seed: ", decode.seed, "; a job spec holds at most 2^63 - 1"));
      }
      config.set_method(InferenceConfig::SAMPLE);
      config.set_temperature(static_cast<float>(decode.temperature));
      config.set_top_k(static_cast<int32_t>(decode.top_k));
      config.set_top_p(static_cast<float>(decode.top_p));
      config.set_seed(static_cast<int64_t>(decode.seed));
      break;
  }
  return config;
}

absl::StatusOr<std::vector<MetricFn>> InferEvalMetricFns(const Task& task) {
  std::vector<std::string> names = task.metric_fns;
  if (std::find(names.begin(), names.end(), "mean_log_likelihood") == names.end()) {
    names.push_back("mean_log_likelihood");
  }
  return BuiltinMetricFns(names, absl::StrCat("task ", task.name));
}

absl::StatusOr<MetricResults> InferEval(Model* model, BatchIterator* batches, const Vocabulary& vocabulary,
                                        const std::vector<MetricFn>& fns, const InferEvalOptions& options,
                                        Collective* collective) {
  DistributedDecodeOptions decode;
  decode.predict = true;
  decode.score = true;
  decode.decode = options.decode;
  decode.targets_length = options.targets_length;
  decode.rows_per_rank = options.rows;
  std::vector<std::string> targets, predictions;
  std::vector<double> target_scores;
  AuxValues aux;
  for (int64_t b = 0;; ++b) {
    absl::StatusOr<T5Batch> batch = batches->Next();
    const bool exhausted = absl::IsOutOfRange(batch.status());
    if (!exhausted) TY_RETURN_IF_ERROR(batch.status());
    const bool stop = options.preempted != nullptr && options.preempted->load();
    TY_ASSIGN_OR_RETURN(std::vector<bool> any, AnyRank(collective, {stop, !exhausted}));
    if (any[0]) return PreemptionError(options.step);
    if (!any[1]) break;
    if (!exhausted) {
      decode.decode.row_keys =
          StridedRowKeys(b, options.rows, batch->batch_size(), collective->rank(), collective->world_size());
    }
    TY_ASSIGN_OR_RETURN(DecodedRows rows, DecodeAndGather(model, exhausted ? nullptr : &*batch, decode, collective));
    if (collective->rank() != 0) continue;
    for (int64_t i = 0; i < rows.size(); ++i) {
      // A row without a target is the iterator's padding of a short last
      // batch, not an example.
      if (rows.targets[i].count_nonzero().item<int64_t>() == 0) continue;
      predictions.push_back(DecodeRow(vocabulary, rows.predictions[i]));
      targets.push_back(DecodeRow(vocabulary, rows.targets[i]));
      aux["scores"].push_back(rows.prediction_scores[i].item<double>());
      target_scores.push_back(rows.target_scores[i].item<double>());
    }
  }
  if (collective->rank() != 0) return MetricResults();
  if (targets.empty()) return absl::FailedPreconditionError("inference evaluation: the split has no examples");
  TY_ASSIGN_OR_RETURN(MetricResults metrics, ComputeMetrics(fns, targets, &predictions, &aux, &target_scores));
  metrics["examples"] = static_cast<double>(targets.size());
  return metrics;
}

}  // namespace trainyard
