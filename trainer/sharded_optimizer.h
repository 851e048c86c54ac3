// ZeRO stage 1 (data_parallel.sharding: OPTIMIZER): the parameters are
// divided among the ranks in whole parameters, contiguous in the model's
// order and balanced by element count; each rank keeps the optimizer state
// of its shard only and updates only its shard, then the ranks all-gather
// the updated parameters (one AllGatherV of a flat buffer, which the
// contiguous shards make the parameters in order).
//
// Apply reads only this rank's gradients (shard_bounds(): the trainer
// reduce-scatters them). Clipping by the global norm (and the weight
// metrics, when wanted) needs every parameter's squared norm: each rank
// computes its own, the ranks sum the
// vector (the others' entries are zero, and x + 0 is exact), and the norm
// is summed in parameter order as the unsharded optimizer does. With the
// same sums of gradients the arithmetic is NONE's, so the parameters are
// the same bit for bit. Adafactor's factored statistics belong to one
// parameter and so stay whole on its owner.
//
// Apply's collective (the squared norms) cannot return a status: when it
// fails, Apply updates nothing and the next Synchronize (or TakeApplyError,
// when the trainer gathers the parameters itself unit by unit during the
// next forward pass: trainer/parameter_gatherer.h) returns the error.
//
// State() is this rank's shard (its slots and the step), which each rank
// writes into the checkpoint itself (trainer/train_checkpoint.h, version
// 3); GatherState() the whole state on rank 0, as NONE's optimizer would
// hold it (for comparisons); LoadState takes a whole state, as a
// checkpoint of any world size and sharding reads back, and keeps this
// rank's slots. Both all-gathers go in rounds (of 1 Mi elements per rank by
// default), so the memory they add is a few rounds'.
//
// Thread-safety: one thread drives it; every rank calls Apply and
// Synchronize (and GatherState) in the same order.
#ifndef TRAINYARD_TRAINER_SHARDED_OPTIMIZER_H_
#define TRAINYARD_TRAINER_SHARDED_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "trainer/optimizer.h"

namespace trainyard {

// The first parameter of each rank's shard (size world_size + 1, the last
// entry = params.size()): contiguous runs of whole parameters, rank r's
// ending once the elements so far reach (r + 1) / W of the total.
std::vector<size_t> ShardBoundaries(const NamedTensors& params, int world_size);

class ShardedOptimizer : public Optimizer {
 public:
  // `collective` is not owned and outlives the optimizer. The all-gathers
  // go in rounds of at most `round_elements` per rank (the extra memory
  // they need: W rounds, not the model).
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(const OptimizerConfig& config,
                                                                  const NamedTensors& params, Collective* collective,
                                                                  int64_t round_elements = int64_t{1} << 20);

  // Clips this rank's gradients by the global norm (max_grad_norm) and
  // updates its shard. `grads` has every parameter's; only this rank's
  // shard's are read (and scaled in place).
  void Apply(const std::vector<torch::Tensor>& grads, double learning_rate) override;
  // All-gathers the updated parameters (or returns Apply's error).
  absl::Status Synchronize() override;
  absl::Status TakeApplyError() override { return std::exchange(apply_error_, absl::OkStatus()); }
  std::map<std::string, torch::Tensor> State() const override;
  absl::Status LoadState(const std::map<std::string, torch::Tensor>& state) override;
  // Rank 0: the whole state (what checkpoints hold); other ranks: their
  // State(). Every rank calls it.
  absl::StatusOr<std::map<std::string, torch::Tensor>> GatherState() override;
  std::vector<size_t> shard_bounds() const override { return bounds_; }
  const std::vector<double>* gradient_squares() const override { return &squares_; }
  void set_gradient_squares_wanted(bool on) override { squares_wanted_ = on; }
  absl::Status MoveTo(Collective* next) override;

  // Parameters [begin, end) of the model's list are this rank's.
  size_t shard_begin() const { return bounds_[collective_->rank()]; }
  size_t shard_end() const { return bounds_[collective_->rank() + 1]; }

 private:
  ShardedOptimizer() = default;
  // squares_ from this rank's gradients and the others' (a collective);
  // false (apply_error_ set) if that fails.
  bool ReduceSquares(const std::vector<torch::Tensor>& grads);

  NamedTensors params_;                // all of them, in order
  std::vector<size_t> bounds_;         // ShardBoundaries
  std::vector<int64_t> param_counts_;  // elements of each rank's shard
  std::unique_ptr<Optimizer> local_;   // over this rank's shard
  double max_grad_norm_ = 0;
  int64_t round_elements_ = 1 << 20;
  Collective* collective_ = nullptr;
  int local_rank_ = 0;  // collective_->rank() when made: local_'s shard
  // Every rank's slots, in its local optimizer's State() order: names and
  // shapes (the same on every rank), for GatherState.
  struct SlotLayout {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<std::vector<SlotLayout>> slots_;
  torch::Tensor gathered_;       // a round of parameters, reused
  std::vector<double> squares_;  // the last Apply's squared gradient norms, every parameter's
  absl::Status apply_error_;     // the last Apply's, for Synchronize
  bool squares_wanted_ = false;  // computed without clipping too (weight metrics)
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_SHARDED_OPTIMIZER_H_
