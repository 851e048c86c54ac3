#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/status_macros.h"
#include "common/torch/device.h"
#include "trainer/rank_metrics.h"

namespace trainyard {
namespace {

constexpr char kPreemptionPayload[] = "type.trainyard/preemption";

constexpr char kCurrentLearningRate[] = "learning_rate/current";

// The scalars ApplyGrads gives each step (the learning rate, the weight
// metrics), summarised over a summary period as T5X's metric kinds do:
// learning_rate/current is the period's last value (clu's LastValue);
// learning_rate (clu's Average) and every weight metric (T5X's
// AveragePerStep) are the mean over the period's steps.
class PeriodScalars {
 public:
  void Add(const std::map<std::string, double>& step) {
    for (const auto& [name, value] : step) {
      Entry& e = entries_[name];
      e.last = value;
      e.sum += value;
      ++e.steps;
    }
  }
  std::map<std::string, double> Values() const {
    std::map<std::string, double> out;
    for (const auto& [name, e] : entries_) {
      out[name] = name == kCurrentLearningRate ? e.last : e.sum / static_cast<double>(e.steps);
    }
    return out;
  }

 private:
  struct Entry {
    double last = 0;
    double sum = 0;
    int64_t steps = 0;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace

absl::Status PreemptionError(int64_t step) {
  absl::Status status =
      absl::AbortedError(absl::StrCat("preempted: stopped after step ", step, "; write an emergency checkpoint"));
  status.SetPayload(kPreemptionPayload, absl::Cord(absl::StrCat(step)));
  return status;
}

bool IsPreemptionError(const absl::Status& status) { return status.GetPayload(kPreemptionPayload).has_value(); }

Trainer::Trainer(Model* model, Optimizer* optimizer, LearningRateCallable learning_rate, Collective* collective,
                 TrainerOptions options)
    : model_(model),
      optimizer_(optimizer),
      learning_rate_(std::move(learning_rate)),
      collective_(collective),
      options_(std::move(options)) {
  timer_ = options_.collective_timer;
  if (timer_ == nullptr) {
    own_timer_ = std::make_unique<TimedCollective>(collective_);
    collective_ = own_timer_.get();
    timer_ = own_timer_.get();
  }
  shards_ = options_.sharding_collective != nullptr ? options_.sharding_collective : collective_;
  for (const auto& item : model_->named_parameters()) params_.emplace_back(item.key(), item.value());
  if (!params_.empty()) device_ = params_[0].second.device();
  train_metrics_ =
      std::make_unique<MetricsManager>("train", options_.summary_dir, collective_->rank(), collective_->world_size());
  train_metrics_->set_peak_flops_per_core(options_.peak_flops_per_device);
  train_metrics_->set_measured_peak_flops_per_core(options_.measured_peak_flops_per_device);
  progress_.store(optimizer_->step());
  optimizer_->set_gradient_squares_wanted(options_.compute_weight_metrics);
  // A sharded optimizer reads only its shard's gradients: the buckets are
  // reduce-scattered, overlapped with backward or not.
  std::vector<size_t> shards = optimizer_->shard_bounds();
  sharded_ = !shards.empty();
  if (options_.exact_reduction) SetUpExactSum();
  const bool keep_only_shard = options_.shard_gradients && !shards.empty();
  // With more than one rank the exact sum is the reducer's (trainer_exact.cc).
  if ((options_.overlap_allreduce || !shards.empty() || exact_ != nullptr) && collective_->world_size() > 1) {
    std::vector<torch::Tensor> tensors;
    for (const auto& [name, p] : params_) tensors.push_back(p);
    reducer_ = std::make_unique<GradientReducer>(std::move(tensors), shards.empty() ? collective_ : shards_,
                                                 options_.allreduce_bucket_bytes, shards, keep_only_shard,
                                                 /*max_in_flight=*/2, exact_.get());
  }
  if (options_.shard_parameters) {
    // Refused here rather than run unsharded: the memory a user planned
    // for would not hold.
    std::string missing;
    if (!sharded_) missing = "a sharded optimizer";
    if (shards_->world_size() < 2) missing = "more than one rank";
    if (reducer_ == nullptr || !reducer_->keeps_only_shard()) missing = "shard_gradients";
    if (model_->ParameterUnits().empty()) missing = "a model that announces its parameter units";
    if (options_.compute_weight_metrics) missing = "no weight metrics (they read every parameter at once)";
    if (!missing.empty()) {
      gatherer_setup_ = absl::FailedPreconditionError(absl::StrCat("sharding PARAMETERS needs ", missing));
    }
  }
  const bool gather_units =
      sharded_ && options_.overlap_allgather && !options_.compute_weight_metrics && shards_->world_size() > 1;
  if (gatherer_setup_.ok() && (gather_units || options_.shard_parameters)) {
    std::vector<std::vector<size_t>> units = model_->ParameterUnits();
    if (!units.empty()) {
      // Buffers of units up to 4 gradient buckets (16 MiB by default: a
      // layer of the t5_1_1 presets up to base) are kept for reuse; a larger
      // unit's (the embedding, the logits) only for its gather.
      const int64_t keep = 4 * options_.allreduce_bucket_bytes / static_cast<int64_t>(params_[0].second.element_size());
      absl::StatusOr<std::unique_ptr<ParameterGatherer>> gatherer = ParameterGatherer::Create(
          params_, std::move(units), shards, shards_, /*prefetch=*/2, options_.shard_parameters, keep);
      if (gatherer.ok()) {
        gatherer_ = std::move(*gatherer);
        Model::UnitHooks hooks;
        ParameterGatherer* g = gatherer_.get();
        hooks.before = [g](int unit) { g->Before(unit); };
        if (options_.shard_parameters) {
          hooks.after = [g](int unit) { g->After(unit); };
          hooks.before_backward = [g](int unit) { g->BeforeBackward(unit); };
          // From now on this rank holds its own parameters only (every rank
          // built the model whole, from the same seed).
          g->ReleaseAll();
        }
        model_->SetUnitHooks(std::move(hooks));
      } else {
        gatherer_setup_ =
            absl::InternalError(absl::StrCat("the model's parameter units: ", gatherer.status().message()));
      }
    }
  }
}

void Trainer::ClearGrads() {
  ReleaseParameters();
  if (reducer_ != nullptr) {
    reducer_->Abandon();
    return;
  }
  for (auto& [name, p] : params_) p.mutable_grad() = torch::Tensor();
}

Trainer::~Trainer() {
  if (gatherer_ != nullptr) model_->SetUnitHooks({});
  Close().IgnoreError();
}

absl::Status Trainer::ForwardError(const absl::Status& status) const {
  if (gatherer_ != nullptr && !gatherer_->status().ok()) return gatherer_->status();
  return status;
}

absl::Status Trainer::Close() {
  absl::Status status = train_metrics_->Close();
  for (auto& [name, manager] : eval_metrics_) {
    absl::Status s = manager->Close();
    if (status.ok()) status = s;
  }
  return status;
}

absl::StatusOr<bool> Trainer::StopAgreed() {
  if (options_.preemption_requested == nullptr) return false;
  return AnyRank(collective_, options_.preemption_requested->load());
}

absl::StatusOr<Metrics> Trainer::AccumulateGradsMicrobatched(const T5Batch& batch, int64_t step,
                                                             double global_target_tokens) {
  const int64_t b = batch.batch_size();
  const int m = options_.num_microbatches;
  if (m < 1 || (b % m != 0 && !options_.uneven_microbatches)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", b, " examples does not split into ", m, " microbatches"));
  }
  LossOptions loss = options_.loss;
  if (loss.normalization == LossConfig::NUM_TARGET_TOKENS) {
    loss.loss_normalizing_factor = std::max(global_target_tokens, 1.0);
  }
  Metrics metrics;
  // Microbatch i is rows [first(i), first(i + 1)): b / m each when they
  // divide (uneven_microbatches otherwise).
  const int64_t rows = options_.microbatch_rows;
  auto first = [b, m, rows](int i) { return rows > 0 ? std::min(i * rows, b) : static_cast<int64_t>(i) * b / m; };
  int last = m - 1;  // the last microbatch with rows
  while (last > 0 && first(last + 1) == first(last)) --last;
  for (int i = 0; i < m; ++i) {
    if (i > 0) {
      // A stop request between microbatches (agreed across ranks) abandons
      // the step: its gradients are dropped and the parameters stay those
      // of the last completed step, so a long step need not finish before
      // an emergency checkpoint.
      TY_ASSIGN_OR_RETURN(bool stop, StopAgreed());
      if (stop) {
        ClearGrads();
        abandoned_steps_++;
        return PreemptionError(step);
      }
    }
    const int64_t size = first(i + 1) - first(i);
    // The exact sum's buckets add every pass; the step's last reduces them.
    if (exact_ != nullptr && reducer_ != nullptr) reducer_->SetPassReduces(i == m - 1);
    if (size == 0) {  // a share smaller than the microbatches (uneven_microbatches)
      TY_RETURN_IF_ERROR(ReduceNoGradients());
      continue;
    }
    if (parameters_sharded()) {
      // This pass's gathers: forward, then backward (ParameterGatherer).
      if (absl::Status s = gatherer_->BeginPass(); !s.ok()) {
        ClearGrads();
        return s;
      }
    }
    absl::StatusOr<LossOutput> out = model_->LossFn(batch.Slice(first(i), size), loss, DropoutGenerator(step, i));
    if (!out.ok()) {
      ClearGrads();
      return ForwardError(out.status());
    }
    // The last microbatch's backward pass starts the all-reduce of each
    // bucket of gradients as soon as it is complete; with only a shard of
    // the gradients kept, or an exact sum, every microbatch's does (and is
    // finished here).
    const bool each = reducer_ != nullptr && (reducer_->keeps_only_shard() || exact_ != nullptr);
    if (options_.overlap_allreduce && reducer_ != nullptr && (i == last || each)) reducer_->Arm();
    try {
      out->loss.backward();
    } catch (const std::exception& e) {
      // A parameter gatherer's hook that failed to gather (PARAMETERS)
      // throws its own exception type through autograd: the gatherer's
      // status, a collective failure, is the step's.
      const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
      const absl::Status status = ForwardError(
          torch_error != nullptr ? TorchErrorStatus("backward", *torch_error)  // out of memory: kResourceExhausted
                                 : absl::InternalError(absl::StrCat("backward: ", e.what())));
      ClearGrads();
      return status;
    }
    if (each) TY_RETURN_IF_ERROR(FinishPass());
    if (exact_ != nullptr) TY_RETURN_IF_ERROR(AddExactTerm(out->metrics));
    MergeMetrics(out->metrics, /*within_step=*/true, &metrics);
  }
  return metrics;
}

absl::Status Trainer::FinishPass() {
  const auto reduce_start = std::chrono::steady_clock::now();
  if (absl::Status s = reducer_->Finish(); !s.ok()) {
    ClearGrads();
    return s;
  }
  allreduce_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_start).count();
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, double>> Trainer::ApplyGrads(int64_t step) {
  return ApplyGradsAndGather(step, /*defer_gather=*/false);
}

absl::StatusOr<std::map<std::string, double>> Trainer::ApplyGradsAndGather(int64_t step, bool defer_gather) {
  const auto reduce_start = std::chrono::steady_clock::now();
  // The reducer's sums are final already: keeping only a shard, or exact.
  const bool shard_only = reducer_ != nullptr && (reducer_->keeps_only_shard() || exact_ != nullptr);
  if (reducer_ != nullptr && !shard_only) {
    // Waits for the buckets started during backward (and starts any left).
    absl::Status status = reducer_->Finish();
    if (!status.ok()) {
      reducer_->ZeroGrads();
      return status;
    }
  }
  // PARAMETERS: the backward passes are over, and whatever is still whole
  // (unit 0, units with parameters that got no gradient) would be stale
  // after the update: only this rank's parameters stay.
  ReleaseParameters();
  std::vector<torch::Tensor> grads;
  if (shard_only) {
    // Reduced microbatch by microbatch (AccumulateGrads): this rank's shard,
    // the other parameters' undefined (the optimizer reads only its own).
    grads = reducer_->ShardGradients();
  } else {
    for (auto& [name, p] : params_) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  }
  if (reducer_ == nullptr && exact_ == nullptr) TY_RETURN_IF_ERROR(collective_->AllReduce(grads, ReduceOp::kSum));
  if (options_.agree_before_update) {
    if (absl::Status s = AgreeToUpdate(); !s.ok()) {
      DropReducedGrads();
      return s;
    }
  }
  allreduce_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - reduce_start).count();
  const double lr = learning_rate_(step);
  NamedTensors old_params;
  std::vector<double> grad_squares;  // of the gradients before clipping
  if (options_.compute_weight_metrics) {
    for (const auto& [name, p] : params_) old_params.emplace_back(name, p.detach().clone());
    if (!sharded_) {
      for (const torch::Tensor& g : grads) grad_squares.push_back(SquaredNorm(g));
    }
  }
  const auto update_start = std::chrono::steady_clock::now();
  optimizer_->Apply(grads, lr);
  update_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - update_start).count();
  if (absl::Status s = SynchronizeUpdate(defer_gather); !s.ok()) {
    DropReducedGrads();
    return s;
  }
  std::map<std::string, double> metrics = {{"learning_rate", lr}, {kCurrentLearningRate, lr}};
  if (options_.compute_weight_metrics) {
    // A sharded optimizer summed every parameter's norm over the ranks (this
    // rank holds only its own shard's reduced gradients).
    if (sharded_) grad_squares = *optimizer_->gradient_squares();
    for (const auto& [k, v] : WeightMetricsComputer().ComputeMetrics(grad_squares, old_params, params_)) {
      metrics[k] = v;
    }
  }
  DropReducedGrads();
  return metrics;
}

void Trainer::DropReducedGrads() {
  if (reducer_ != nullptr) {
    reducer_->ZeroGrads();
  } else {
    for (auto& [name, p] : params_) p.mutable_grad() = torch::Tensor();
  }
}

absl::Status Trainer::AgreeToUpdate() {
  // Every rank's gradients are reduced before any rank changes its state:
  // a rank that fails here (a peer lost) has updated nothing, and a rank
  // that passes knows that every other rank reached this point too.
  std::vector<torch::Tensor> reached = {torch::ones({1}, torch::kFloat)};
  return collective_->AllReduce(reached, ReduceOp::kSum);
}

absl::Status Trainer::SynchronizeUpdate(bool defer_gather) {
  const auto gather_start = std::chrono::steady_clock::now();
  // A sharded optimizer updated this rank's shard: the ranks exchange them,
  // unit by unit during the next forward pass with a gatherer.
  absl::Status synchronized;
  if (gatherer_ != nullptr) {
    synchronized = optimizer_->TakeApplyError();
    // PARAMETERS: nothing to gather, the next passes do.
    if (synchronized.ok() && !parameters_sharded()) {
      synchronized = gatherer_->Start();
      if (synchronized.ok() && !defer_gather) synchronized = gatherer_->Finish();
    }
  } else {
    synchronized = optimizer_->Synchronize();
  }
  if (sharded_) {
    gather_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - gather_start).count();
  }
  return synchronized;
}

void Trainer::WriteTrainScalars(int64_t step, const std::map<std::string, double>& scalars) {
  train_metrics_->WriteScalars(step, scalars);
}

absl::StatusOr<std::map<std::string, double>> Trainer::Train(BatchIterator* batches, int64_t num_steps) {
  TY_RETURN_IF_ERROR(gatherer_setup_);
  if (gatherer_ == nullptr) return TrainSteps(batches, num_steps);
  if (parameters_sharded()) {
    // Each step leaves this rank's parameters only (a failed one too).
    absl::StatusOr<std::map<std::string, double>> result = TrainSteps(batches, num_steps);
    gatherer_->ReleaseAll();
    return result;
  }
  if (gatherer_->stale()) {
    // An earlier Train failed with gathers pending: each rank's own shard
    // is current, so one whole gather makes the parameters whole again.
    TY_RETURN_IF_ERROR(gatherer_->Start());
    TY_RETURN_IF_ERROR(gatherer_->Finish());
  }
  absl::StatusOr<std::map<std::string, double>> result = TrainSteps(batches, num_steps);
  if (gatherer_->pending()) {
    // Train returns whole parameters when it succeeds or stops (the
    // emergency checkpoint follows); another failure (the collective may
    // be broken) waits only for the gathers in flight, and the next Train
    // gathers everything first.
    if (result.ok() || IsPreemptionError(result.status())) {
      TY_RETURN_IF_ERROR(gatherer_->Finish());
    } else {
      gatherer_->Abandon();
    }
  }
  return result;
}

absl::StatusOr<std::map<std::string, double>> Trainer::TrainSteps(BatchIterator* batches, int64_t num_steps) {
  Metrics total;
  PeriodScalars applied;  // the learning rate and weight metrics of each step
  double seqs = 0, target_tokens = 0;
  allreduce_seconds_ = 0;
  update_seconds_ = 0;
  gather_seconds_ = 0;
  double data_seconds = 0;  // waiting for the iterator's batches
  train_metrics_->StartDurationTimer();
  const auto chunk_start = std::chrono::steady_clock::now();
  const double blocked_before = timer_->blocked_seconds();
  for (int64_t i = 0; i < num_steps; ++i) {
    const int64_t step = this->step();
    // Every rank stops after the same step: the flag is combined across
    // ranks (T5X's preemption sync point), so no rank is left waiting in the
    // next step's all-reduce.
    TY_ASSIGN_OR_RETURN(bool stop, StopAgreed());
    if (stop) return PreemptionError(step);
    const auto fetch_start = std::chrono::steady_clock::now();
    absl::StatusOr<T5Batch> batch = batches->Next();
    data_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - fetch_start).count();
    if (absl::IsOutOfRange(batch.status())) {
      return absl::FailedPreconditionError(absl::StrCat("the batch iterator ended at step ", step));
    }
    TY_RETURN_IF_ERROR(batch.status());
    std::vector<torch::Tensor> counts = {torch::tensor(
        {static_cast<double>(batch->batch_size()), batch->decoder_loss_weights.sum().item<double>()}, torch::kDouble)};
    TY_RETURN_IF_ERROR(collective_->AllReduce(counts, ReduceOp::kSum));
    const double tokens = counts[0][1].item<double>();
    TY_ASSIGN_OR_RETURN(Metrics step_metrics, exact_ ? AccumulateExactly(*batch, step, tokens)
                                                     : AccumulateGradsMicrobatched(*batch, step, tokens));
    absl::StatusOr<std::map<std::string, double>> step_scalars = ApplyGradsAndGather(step, /*defer_gather=*/true);
    TY_RETURN_IF_ERROR(step_scalars.status());
    applied.Add(*step_scalars);
    progress_.store(step + 1);
    MergeMetrics(step_metrics, /*within_step=*/false, &total);
    seqs += counts[0][0].item<double>();
    target_tokens += counts[0][1].item<double>();
  }
  if (gatherer_ != nullptr) {
    // The last step's parameters, before the summary (which times them);
    // PARAMETERS: the passes' gathers.
    if (!parameters_sharded()) TY_RETURN_IF_ERROR(gatherer_->Finish());
    gather_seconds_ += gatherer_->TakeWaitSeconds();
  }
  ChunkTiming timing;
  timing.steps = num_steps;
  timing.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - chunk_start).count();
  timing.collective_seconds = std::min(timer_->blocked_seconds() - blocked_before, timing.wall_seconds);
  timing.compute_seconds = timing.wall_seconds - timing.collective_seconds;
  TY_RETURN_IF_ERROR(CombineRankMetrics(num_steps, &total));
  std::map<std::string, double> summary = MetricValues(total);
  for (const auto& [k, v] : applied.Values()) summary[k] = v;
  summary["timing/seqs"] = seqs;
  summary["timing/target_tokens"] = target_tokens;
  if (options_.model_flops_per_step > 0) {
    summary["timing/model_flops"] = options_.model_flops_per_step * static_cast<double>(num_steps);
  }
  // This rank's time per step waiting for the gradients' reduction (what
  // is not overlapped with backward), in the optimizer's update, and (a
  // sharded optimizer) in the parameters' all-gather.
  const double steps = static_cast<double>(std::max<int64_t>(num_steps, 1));
  summary["timing/allreduce_seconds_per_step"] = allreduce_seconds_ / steps;
  summary["timing/optimizer_seconds_per_step"] = update_seconds_ / steps;
  summary["timing/data_seconds_per_step"] = data_seconds / steps;  // this rank waiting for batches
  if (sharded_) summary["timing/allgather_seconds_per_step"] = gather_seconds_ / steps;
  summary["timing/compute_seconds_per_step"] = timing.compute_seconds / steps;
  summary["timing/collective_seconds_per_step"] = timing.collective_seconds / steps;
  TY_RETURN_IF_ERROR(ComputeOverRanks(timing.compute_seconds / steps, &summary));
  last_chunk_timing_ = timing;
  for (const auto& [k, v] : batches->TakeDataMetrics()) summary[k] = v;
  if (train_compile_seconds_.has_value()) {
    summary["timing/compilation_seconds"] = *train_compile_seconds_;
    train_compile_seconds_.reset();
  }
  absl::optional<std::map<std::string, double>> written =
      train_metrics_->WriteMetricsSummary(summary, step(), num_steps);
  // Other ranks: the same all-reduced values, without rank 0's timings.
  return written.has_value() ? *written : summary;
}

absl::Status Trainer::ComputeOverRanks(double compute_per_step, std::map<std::string, double>* summary) {
  std::vector<double> each = {compute_per_step};
  if (collective_->world_size() > 1) {
    std::vector<torch::Tensor> all;
    TY_RETURN_IF_ERROR(collective_->AllGather(torch::tensor({compute_per_step}, torch::kDouble), &all));
    each.clear();
    for (const torch::Tensor& t : all) each.push_back(t.item<double>());
  }
  const auto slowest = std::max_element(each.begin(), each.end());
  (*summary)["timing/slowest_compute_rank"] = static_cast<double>(slowest - each.begin());
  (*summary)["timing/compute_seconds_per_step_max"] = *slowest;
  (*summary)["timing/compute_seconds_per_step_min"] = *std::min_element(each.begin(), each.end());
  std::sort(each.begin(), each.end());
  const size_t n = each.size();
  (*summary)["timing/compute_seconds_per_step_median"] = n % 2 == 1 ? each[n / 2] : (each[n / 2 - 1] + each[n / 2]) / 2;
  return absl::OkStatus();
}

absl::Status Trainer::GatherParameters() {
  if (!parameters_sharded()) return absl::OkStatus();
  absl::Status s = gatherer_->GatherAll();
  gather_seconds_ += gatherer_->TakeWaitSeconds();
  return s;
}

void Trainer::ReleaseParameters() {
  if (parameters_sharded()) gatherer_->ReleaseAll();
}

bool Trainer::RunActions(const std::vector<std::unique_ptr<BaseAction>>& actions, const MetricsByTask& metrics,
                         std::string* reason) {
  ActionsOutcome outcome;
  RunEveryAction(actions, step(), metrics, &outcome);
  if (outcome.halt && reason != nullptr) *reason = outcome.reason();
  return outcome.halt;
}

}  // namespace trainyard
