// Trainer's evaluation: every rank's batches evaluated and their metrics
// combined over the ranks (exactly, in global order, with exact_reduction).
#include <algorithm>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "trainer/rank_metrics.h"
#include "trainer/trainer.h"

namespace trainyard {
namespace {

// One step of an evaluation, agreed by every rank in one SUM all-reduce.
struct EvalStep {
  bool stop = false;         // some rank was asked to stop
  bool any_batch = false;    // some rank still has a batch
  double target_tokens = 0;  // real target tokens of the ranks' batches
};

absl::StatusOr<EvalStep> AgreeOnEvalStep(Collective* collective, bool stop, const T5Batch* batch) {
  const double tokens = batch != nullptr && batch->decoder_loss_weights.defined()
                            ? batch->decoder_loss_weights.sum().item<double>()
                            : 0.0;
  std::vector<torch::Tensor> sums = {
      torch::tensor({stop ? 1.0 : 0.0, batch != nullptr ? 1.0 : 0.0, tokens}, torch::kDouble)};
  if (collective->world_size() > 1) TY_RETURN_IF_ERROR(collective->AllReduce(sums, ReduceOp::kSum));
  EvalStep step;
  step.stop = sums[0][0].item<double>() > 0;
  step.any_batch = sums[0][1].item<double>() > 0;
  step.target_tokens = sums[0][2].item<double>();
  return step;
}

// Frees the other ranks' parameters (PARAMETERS) when it goes out of scope.
struct ReleaseOnExit {
  Trainer* trainer;
  ~ReleaseOnExit() { trainer->ReleaseParameters(); }
};

}  // namespace

absl::StatusOr<MetricsByTask> Trainer::Eval(const std::map<std::string, BatchIterator*>& batches) {
  TY_RETURN_IF_ERROR(GatherParameters());
  ReleaseOnExit release{this};
  MetricsByTask out;
  for (const auto& [name, it] : batches) {
    // Step s's global batch is every rank's s-th batch; its metrics are
    // T5X's on that batch (trainer/rank_metrics.h).
    Metrics total;
    int64_t steps = 0;
    std::vector<std::pair<int64_t, Metrics>> pieces;  // this rank's, by global batch
    while (true) {
      // Every rank takes its next batch (shards may differ by one batch),
      // then the ranks agree in one small all-reduce whether any was asked
      // to stop (all stop together, before the metrics' all-reduce),
      // whether any still has a batch (all leave the loop together) and on
      // the global batch's real target tokens.
      absl::StatusOr<T5Batch> batch = it->Next();
      const bool exhausted = absl::IsOutOfRange(batch.status());
      if (!exhausted) TY_RETURN_IF_ERROR(batch.status());
      const bool stop = options_.preemption_requested != nullptr && options_.preemption_requested->load();
      TY_ASSIGN_OR_RETURN(EvalStep agreed, AgreeOnEvalStep(collective_, stop, exhausted ? nullptr : &*batch));
      if (agreed.stop) return PreemptionError(step());  // eval iterators are per call: nothing to rewind
      if (!agreed.any_batch) break;
      ++steps;
      if (exhausted) continue;
      // As in training: each rank's loss is its tokens' loss over the
      // global batch's real target tokens, so that the ranks' losses sum
      // to the global batch's.
      LossOptions loss = options_.loss;
      if (loss.normalization == LossConfig::NUM_TARGET_TOKENS) {
        loss.loss_normalizing_factor = std::max(agreed.target_tokens, 1.0);
      }
      TY_RETURN_IF_ERROR(EvalBatch(*batch, loss, steps - 1, &pieces));
    }
    TY_RETURN_IF_ERROR(CombineEvalPieces(steps, pieces, &total));
    auto& manager = eval_metrics_[name];
    if (manager == nullptr) {
      manager = std::make_unique<MetricsManager>("training_eval/" + name, options_.summary_dir, collective_->rank(),
                                                 collective_->world_size());
    }
    std::map<std::string, double> values = MetricValues(total);
    if (auto it = eval_compile_seconds_.find(name); it != eval_compile_seconds_.end()) {
      values["timing/compilation_seconds"] = it->second;
      eval_compile_seconds_.erase(it);
    }
    manager->WriteScalars(step(), values);
    out[name] = std::move(values);
  }
  return out;
}

absl::Status Trainer::EvalBatch(const T5Batch& batch, const LossOptions& loss, int64_t step,
                                std::vector<std::pair<int64_t, Metrics>>* pieces) {
  const int64_t b = batch.batch_size();
  const int64_t unit = exact_ != nullptr && options_.microbatch_rows > 0 ? options_.microbatch_rows : b;
  for (int64_t first = 0; first < b; first += unit) {
    const int64_t rows = std::min(unit, b - first);
    TY_ASSIGN_OR_RETURN(Metrics m, model_->EvalFn(rows == b ? batch : batch.Slice(first, rows), loss));
    pieces->emplace_back(step, std::move(m));
  }
  return absl::OkStatus();
}

absl::Status Trainer::CombineEvalPieces(int64_t steps, const std::vector<std::pair<int64_t, Metrics>>& pieces,
                                        Metrics* total) {
  if (exact_ != nullptr) return CombineMetricPiecesInOrder(collective_, steps, pieces, total);
  total->clear();
  for (const auto& [step, m] : pieces) MergeMetrics(m, /*within_step=*/false, total);
  return AllReduceMetrics(collective_, steps, total);
}

}  // namespace trainyard
