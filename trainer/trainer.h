// The training loop of T5X's t5x.trainer, in C++: a Trainer drives a Model
// and an Optimizer over batches, with microbatched gradient accumulation and
// data parallelism through a Collective.
//
// One train step (world size W, M microbatches, this rank's batch b = B/W):
//   1. AccumulateGradsMicrobatched: split b into M microbatches; for each,
//      forward, loss normalised by the number of real target tokens of the
//      whole global batch (all-reduced first), backward. Gradients sum in
//      float32 in the parameters' .grad, so the sum over microbatches and
//      ranks is the full-batch gradient. Metrics merge.
//   2. The gradients are all-reduced (SUM) across ranks; reduce-scattered
//      when the optimizer is sharded (each rank gets its shard's sums).
//   3. ApplyGrads: the optimizer applies them with the step's learning rate.
// Dropout masks of step s, rank r, microbatch m come from a generator seeded
// with f(seed, s, r, m), so runs are reproducible and a resumed run sees the
// same masks.
//
// Metrics are merged over the steps of a Train call (one summary period) as
// T5X's metric kinds merge, and written by rank 0's MetricsManager
// ("train", and "training_eval/<name>" for Eval): the model's losses and
// accuracies as model/metrics.h says; learning_rate and every weight metric
// the mean over the period's steps; learning_rate/current the last step's.
//
// Thread-safety: one thread drives a Trainer.
#ifndef TRAINYARD_TRAINER_TRAINER_H_
#define TRAINYARD_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "collective/timed_collective.h"
#include "model/model.h"
#include "spec/actions.h"
#include "trainer/exact_sum.h"
#include "trainer/gradient_reducer.h"
#include "trainer/learning_rate.h"
#include "trainer/metrics_manager.h"
#include "trainer/optimizer.h"
#include "trainer/parameter_gatherer.h"

namespace trainyard {

// A source of batches (this rank's share of each global batch).
// Next returns kOutOfRange at the end of a finite iterator.
class BatchIterator {
 public:
  virtual ~BatchIterator() = default;
  virtual absl::StatusOr<T5Batch> Next() = 0;
  // Counts about the data since the last call (e.g. "data/truncated_examples",
  // "non_padding_fraction/targets"), added to the train summary.
  virtual std::map<std::string, double> TakeDataMetrics() { return {}; }
};

// Decides which per-parameter weight metrics to compute (T5X's
// WeightMetricsComputer): weight_rms/<p>, weight_gradient_rms/<p>,
// weight_gradient_norm, weight_update_rms/<p>,
// weight_update_divided_by_weight_rms/<p> (the rms over p's elements of
// (new - old) / old; elements whose old value is 0, where T5X's ratio is
// inf or NaN, are left out, and 0 when every one is), weight_max/<p>.
class WeightMetricsComputer {
 public:
  // old/new: parameters before and after the update; grad_squares: each
  // parameter's squared norm of its reduced gradient before clipping
  // (SquaredNorm), in the parameters' order.
  std::map<std::string, double> ComputeMetrics(const std::vector<double>& grad_squares, const NamedTensors& old_params,
                                               const NamedTensors& new_params) const;
};

struct TrainerOptions {
  int num_microbatches = 1;
  // Batches need not split into equal microbatches: microbatch i takes rows
  // [i b / m, (i + 1) b / m) (rounded down), and an empty one is skipped
  // (its stop agreement still runs, so every rank makes the same collective
  // calls). For ranks holding shares of different sizes of one global batch
  // (fault_tolerance ELASTIC).
  bool uneven_microbatches = false;
  LossOptions loss;
  uint64_t seed = 0;
  std::string summary_dir;  // empty: no event files
  bool compute_weight_metrics = false;
  // Set (by a signal handler, or to abort) to request a stop: Train returns
  // a preemption error at the next step boundary, or between two
  // microbatches (abandoning that step), at the same point on every rank
  // (the flag is MAX-all-reduced there when world size > 1).
  const std::atomic<bool>* preemption_requested = nullptr;
  // With more than one rank: all-reduce gradients in buckets of this size,
  // started from gradient-ready hooks during the last microbatch's backward
  // pass (trainer/gradient_reducer.h); false: one bucketed all-reduce after
  // backward.
  bool overlap_allreduce = true;
  int64_t allreduce_bucket_bytes = 4 << 20;
  // With a sharded optimizer: keep only this rank's shard of the gradients
  // (data_parallel.sharding GRADIENTS; trainer/gradient_reducer.h), every
  // microbatch's gradients reduce-scattered as its backward pass makes them.
  bool shard_gradients = false;
  // With a sharded optimizer and a model that announces its units
  // (Model::ParameterUnits): the updated parameters are all-gathered unit
  // by unit during the next step's forward pass, each unit just before its
  // first use with the next in flight (trainer/parameter_gatherer.h), and
  // whole again when Train returns (but for a failure: then at the next
  // Train's start); false, or with weight metrics (which
  // read the updated parameters at once): all-gathered after the update.
  bool overlap_allgather = true;
  // data_parallel.sharding PARAMETERS (ZeRO stage 3), with a sharded
  // optimizer, shard_gradients, more than one rank and a model that
  // announces its units: between steps this rank holds only its own
  // parameters; each training pass gathers every unit just before its use
  // in forward and again in backward, and releases it after
  // (trainer/parameter_gatherer.h). Train, ApplyGrads and CompileTrain
  // leave only this rank's parameters; Eval and CompileEval gather them
  // all first and release them after, as GatherParameters and
  // ReleaseParameters do for other readers; the others' parameters are
  // released when the trainer is made. Weight metrics are refused (they
  // read every parameter at once).
  bool shard_parameters = false;
  // Model FLOPs of one step over all ranks (3 x ForwardFlopsPerExample x
  // the global batch's rows) and one device's peak FLOP/s: the summary's
  // timing/model_flops, timing/model_flops_per_second(_per_core) and, with
  // a peak, timing/mfu; with a measured peak (a matrix-product probe),
  // timing/mfu_vs_measured_peak. 0: not reported.
  double model_flops_per_step = 0;
  double peak_flops_per_device = 0;
  double measured_peak_flops_per_device = 0;
  // Counts the time blocked in collective operations, for the compute
  // time of ChunkTiming: the collective given to the Trainer (and to a
  // sharded optimizer) should be this one, so every wait of a step is
  // counted. Null: the Trainer wraps its collective in a timer of its own
  // (an optimizer's operations then count as compute).
  const TimedCollective* collective_timer = nullptr;
  // The collective the sharded state's parts (gradient reducer, parameter
  // gatherer) use: the shard group with HSDP (collective/hybrid_collective.h,
  // also the sharded optimizer's). Null: the Trainer's collective.
  Collective* sharding_collective = nullptr;
  // Before each update, one more all-reduce over every rank (AgreeToUpdate),
  // after every gradient is reduced: a step either updates no rank's state
  // or (but for a peer lost within that one all-reduce) every rank's that
  // survives it. ELASTIC with hybrid sharding sets it: a step left half
  // done across shard groups would leave a shard at two steps, with no
  // copy of its newer state elsewhere.
  bool agree_before_update = false;
  // The step's gradient as the exact sum (trainer/exact_sum.h) of its
  // global microbatches' gradients, the same bits however the microbatches
  // are spread over ranks: each microbatch's gradients are turned into an
  // ExactSum's integers; the ranks sum the integers (and combine the
  // largest values seen, MAX); a step whose values reached their scale is
  // computed again with the scale they need. This rank's microbatch i is
  // global microbatch first_global_microbatch + i (its dropout is drawn
  // from that, not from the rank). With more than one rank the gradient
  // reducer does it bucket by bucket as backward produces them
  // (trainer/gradient_reducer.h): each bucket adds every pass to its
  // integer sums and the step's last pass all-reduces them (a sharded
  // optimizer's: reduce-scatters, and it reads its shard), overlapped with
  // that backward pass; with shard_gradients every pass's integers are
  // reduce-scattered and a rank holds its shard's sums only. One rank sums
  // in the ExactSum itself.
  bool exact_reduction = false;
  int64_t first_global_microbatch = 0;
  int64_t global_microbatches = 1;  // a step's, over every rank
  // exact_reduction: microbatch i is rows [i r, (i + 1) r) of this rank's
  // batch, r = microbatch_rows (0: as without it), empty past its end (a
  // rank's share of whole global microbatches under ELASTIC).
  int64_t microbatch_rows = 0;
};

// T5X's PreemptionError: the status Train returns when preemption was
// requested; the caller writes an emergency checkpoint.
absl::Status PreemptionError(int64_t step);
bool IsPreemptionError(const absl::Status& status);

class Trainer {
 public:
  // Where the last Train call's time went on this rank.
  struct ChunkTiming {
    int64_t steps = 0;
    // From the first step's start to the last step's parameters being
    // ready, before the summary.
    double wall_seconds = 0;
    // Blocked in collective operations (the gradients' reduction not
    // overlapped with backward, the parameters' gathers, the step
    // boundary's stop agreement): a fast rank's wait for a slow one.
    double collective_seconds = 0;
    // The rest: data, forward, backward, the optimizer's update. A rank
    // slower than the others shows here; its wall time does not (ranks in
    // lock-step finish together).
    double compute_seconds = 0;
  };

  Trainer(Model* model, Optimizer* optimizer, LearningRateCallable learning_rate, Collective* collective,
          TrainerOptions options);
  ~Trainer();

  // Runs `num_steps` train steps from `step()`; returns the train summary
  // (other ranks than 0 get the same all-reduced metrics without rank 0's
  // timing/ values; data/ values are each rank's). kInvalidArgument if a batch does
  // not split into the microbatches. The summary's
  // timing/compute_seconds_per_step and timing/collective_seconds_per_step
  // are this rank's (ChunkTiming per step);
  // timing/compute_seconds_per_step_{min,median,max} and
  // timing/slowest_compute_rank are over all ranks (one small all-gather).
  absl::StatusOr<std::map<std::string, double>> Train(BatchIterator* batches, int64_t num_steps);
  // Rank 0: `scalars` to the train summary's event file at `step` (figures
  // from outside the trainer, e.g. the job's goodput); others: nothing.
  void WriteTrainScalars(int64_t step, const std::map<std::string, double>& scalars);

  // Evaluates every named iterator to its end; returns metrics by task name
  // and writes them under training_eval/<name>. The ranks' i-th batches
  // make the i-th global batch, and the metrics are T5X's over the global
  // batches whatever the number of ranks (trainer/rank_metrics.h): each
  // loss is normalised by the global batch's factor, and every metric's
  // numerator and denominator are summed over the ranks. Ranks may hold
  // different numbers of batches. A stop request (preemption_requested) on
  // any rank ends it on every rank between batches with the
  // PreemptionError, agreed by one small all-reduce per batch.
  absl::StatusOr<MetricsByTask> Eval(const std::map<std::string, BatchIterator*>& batches);

  // One step's gradients into the parameters' .grad (not reduced across
  // ranks) and its metrics. `global_target_tokens`: real target tokens of the
  // whole global batch.
  absl::StatusOr<Metrics> AccumulateGradsMicrobatched(const T5Batch& batch, int64_t step, double global_target_tokens);
  // Reduces gradients across ranks, applies them, clears them; returns the
  // step's learning-rate (and weight) metrics.
  // The parameters are whole on return (Train instead leaves a sharded
  // optimizer's all-gather to the next step's forward pass), but for
  // shard_parameters: this rank's only.
  absl::StatusOr<std::map<std::string, double>> ApplyGrads(int64_t step);

  // Warms up a train step for the shapes of `batch` (this rank's share of
  // a global batch; its contents may be dummies): the forward and backward
  // pass of one microbatch, whose gradients are dropped, so that the first
  // timed step does not pay for first calls (allocations, kernel choice,
  // on a GPU the libraries' initialisation). T5X's compile_train. The
  // parameters, the optimizer state, the step and every random stream stay
  // as they were (dropout masks are drawn from a generator of their own).
  // No stop agreement; PARAMETERS: the pass gathers every unit as a step's
  // does, so every rank calls it at the same point. Cached per shape:
  // returns the seconds spent, 0 when cached. The next train summary
  // carries them as timing/compilation_seconds (this rank's).
  absl::StatusOr<double> CompileTrain(const T5Batch& batch);
  // The eval step of each named task for its batch's shapes (T5X's
  // compile_eval): every parameter gathered (PARAMETERS), one forward pass
  // per shape not warmed up yet. Returns each task's seconds (a shape
  // another task warmed up costs only the lookup); the task's next
  // training_eval summary carries them as timing/compilation_seconds.
  absl::StatusOr<std::map<std::string, double>> CompileEval(const std::map<std::string, T5Batch>& batches);

  // Runs `actions` (those of one ActionMode) on the metrics at the current
  // step; true, with the reasons of every action that asked to halt (joined
  // by "; "), if any does. Every action runs, so each keeps its history.
  bool RunActions(const std::vector<std::unique_ptr<BaseAction>>& actions, const MetricsByTask& metrics,
                  std::string* reason);

  int64_t step() const { return optimizer_->step(); }
  // exact_reduction: each parameter's scale exponent for the next step's
  // exact sum, by name (empty without it). A checkpoint keeps them
  // (TrainSnapshot::exact_sum_exponents): a run resumed with them sums at
  // the scales the uninterrupted run would; one resumed without them
  // computes its first step twice to find them, and its sums may round
  // differently.
  std::map<std::string, int> ExactSumExponents() const;
  // Takes them: kFailedPrecondition without exact_reduction;
  // kInvalidArgument naming a parameter that is missing or unknown, or an
  // exponent outside [kExactSumMinExponent, kExactSumMaxExponent].
  absl::Status RestoreExactSumExponents(const std::map<std::string, int>& exponents);
  // The last completed step, readable from any thread while Train runs
  // (progress reports).
  int64_t progress() const { return progress_.load(); }
  // Steps abandoned between microbatches by a stop request (their batches
  // were taken from the iterator but not trained on).
  int64_t abandoned_steps() const { return abandoned_steps_; }
  // The last successful Train call's timing on this rank.
  const ChunkTiming& last_chunk_timing() const { return last_chunk_timing_; }
  // Every parameter whole on this rank (with shard_parameters; nothing
  // otherwise), until the next training pass releases the others' again.
  // A collective: every rank calls it at the same point.
  absl::Status GatherParameters();
  // Frees the others' parameters again (with shard_parameters; nothing
  // otherwise). Local: no collective.
  void ReleaseParameters();
  // shard_parameters is in effect: between steps this rank holds only its
  // own parameters.
  bool parameters_sharded() const { return gatherer_ != nullptr && gatherer_->shard_parameters(); }
  // Why shard_parameters (or the unit-by-unit gather) was refused; OK if
  // it was not.
  const absl::Status& gatherer_setup() const { return gatherer_setup_; }
  // The unit-by-unit gatherer (its memory counters), if there is one.
  ParameterGatherer* gatherer() { return gatherer_.get(); }
  // Joins the metric writers; the first write error, if any.
  absl::Status Close();

 private:
  at::Generator DropoutGenerator(int64_t step, int microbatch) const;
  // The stop request, combined across ranks (MAX) when world size > 1.
  absl::StatusOr<bool> StopAgreed();
  void ClearGrads();
  absl::StatusOr<std::map<std::string, double>> TrainSteps(BatchIterator* batches, int64_t num_steps);
  // ApplyGrads; with `defer_gather` and a gatherer, the other ranks'
  // parameters are left to the next forward pass (ParameterGatherer).
  absl::StatusOr<std::map<std::string, double>> ApplyGradsAndGather(int64_t step, bool defer_gather);
  // TrainerOptions::agree_before_update's all-reduce.
  absl::Status AgreeToUpdate();
  // After the update: a sharded optimizer's shards exchanged (started only,
  // with `defer_gather` and a gatherer), or its error.
  absl::Status SynchronizeUpdate(bool defer_gather);
  // The reduced gradients go (after an update, or a failure before it).
  void DropReducedGrads();
  // A failed forward pass's status: the gatherer's, when it failed in it.
  absl::Status ForwardError(const absl::Status& status) const;
  // exact_reduction (trainer_exact.cc): a step's sum started with the
  // current scales; this microbatch's gradients added (and cleared, also
  // on a failure); the
  // ranks' sums combined into the parameters' gradients, false (nothing
  // written) when a value reached its scale: the step is computed again,
  // with the scales now set from what the ranks saw.
  void SetUpExactSum();
  at::Generator ExactDropoutGenerator(int64_t step, int microbatch) const;
  absl::Status StartExactSum();
  // After a pass's backward, when each pass is reduced (sharded gradients,
  // or an exact sum over ranks): the reducer's Finish, timed; on a failure
  // the gradients go.
  absl::Status FinishPass();
  // A microbatch this rank has no rows of: with an exact sum over ranks,
  // an empty pass (every rank reduces at the same passes); else nothing.
  absl::Status ReduceNoGradients();
  absl::Status AddExactTerm(const Metrics& metrics);
  absl::StatusOr<bool> CombineExactSums();
  // The chunk's metrics over every rank: the microbatches' (kept by
  // AddExactTerm) gathered and added in global order (step, then global
  // microbatch), so their bits do not depend on the number of ranks.
  absl::Status CombineExactMetrics(int64_t steps, Metrics* total);
  // One eval batch's metrics as pieces of global batch `step`: whole, or
  // with exact_reduction unit by unit (microbatch_rows rows each, the same
  // forward passes on any number of ranks).
  absl::Status EvalBatch(const T5Batch& batch, const LossOptions& loss, int64_t step,
                         std::vector<std::pair<int64_t, Metrics>>* pieces);
  // The eval pieces of `steps` global batches become every rank's metrics:
  // in global order with exact_reduction (CombineMetricPiecesInOrder),
  // else merged and AllReduceMetrics.
  absl::Status CombineEvalPieces(int64_t steps, const std::vector<std::pair<int64_t, Metrics>>& pieces, Metrics* total);
  // This rank's chunk metrics `total` become every rank's: exactly
  // (CombineExactMetrics) with exact_reduction, else AllReduceMetrics.
  absl::Status CombineRankMetrics(int64_t steps, Metrics* total);
  // AccumulateGradsMicrobatched into the exact sum, combined over the
  // ranks into the gradients (computed twice when a value reached its
  // scale).
  absl::StatusOr<Metrics> AccumulateExactly(const T5Batch& batch, int64_t step, double global_target_tokens);
  // Every rank's compute seconds per step into the summary: min, median,
  // max and the slowest rank (a collective).
  absl::Status ComputeOverRanks(double compute_per_step, std::map<std::string, double>* summary);

  Model* model_;
  Optimizer* optimizer_;
  LearningRateCallable learning_rate_;
  Collective* collective_;  // through own_timer_ when options_ has no timer
  Collective* shards_;      // options_.sharding_collective, else collective_
  TrainerOptions options_;
  std::unique_ptr<TimedCollective> own_timer_;
  const TimedCollective* timer_ = nullptr;
  ChunkTiming last_chunk_timing_;
  NamedTensors params_;
  torch::Device device_ = torch::kCPU;  // the parameters' (dropout masks are drawn there)
  std::unique_ptr<MetricsManager> train_metrics_;
  std::map<std::string, std::unique_ptr<MetricsManager>> eval_metrics_;
  std::set<std::string> compiled_;  // shape keys already warmed up
  // Warm-up seconds for the next train summary, and for each eval task's.
  std::optional<double> train_compile_seconds_;
  std::map<std::string, double> eval_compile_seconds_;
  std::atomic<int64_t> progress_{0};
  int64_t abandoned_steps_ = 0;
  // In this Train call: waiting for the gradients' reduction after
  // backward, the optimizer's update (with a sharded optimizer, of this
  // rank's shard and the global norm), and a sharded optimizer's parameter
  // all-gather.
  double allreduce_seconds_ = 0;
  double update_seconds_ = 0;
  double gather_seconds_ = 0;
  // world_size > 1 with overlap_allreduce or a sharded optimizer
  std::unique_ptr<GradientReducer> reducer_;
  bool sharded_ = false;  // the optimizer updates only this rank's shard
  // overlap_allgather with a sharded optimizer; gatherer_setup_ is
  // Create's error (returned by Train).
  std::unique_ptr<ParameterGatherer> gatherer_;
  absl::Status gatherer_setup_;
  // exact_reduction: the step's sum, and each parameter's scale exponent
  // (from the last step's largest values, ExactSum::NextExponents).
  std::unique_ptr<ExactSum> exact_;
  std::vector<int> exact_exponents_;
  std::vector<Metrics> exact_metric_terms_;  // this chunk's microbatches', in order
  int64_t exact_terms_per_step_ = 0;         // this rank's microbatches with rows
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_TRAINER_H_
