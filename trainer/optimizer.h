// Optimizers over a model's named parameters, with their state as named
// tensors (so it is part of the train state and of checkpoints).
//
//  - Adafactor (Shazeer & Stern 2018) with T5X's defaults, step for step the
//    composition of optax.adafactor: factored second moments for parameters
//    whose two largest dimensions are >= min_dim_size_to_factor (decay
//    1 - (t+1)^-decay_rate, epsilon1 added to squared gradients), update
//    clipping by RMS (clipping_threshold), scaling by the learning rate and by
//    max(RMS(param), epsilon2), optional momentum beta1 (no bias
//    correction), then weight_decay_rate * param added to the update.
//  - AdamW (as optax.adamw): bias-corrected moments, decoupled weight decay
//    scaled by the learning rate.
// Before either, the gradients' global norm can be clipped (max_grad_norm).
//
// Thread-safety: not thread-safe; one thread drives an optimizer.
#ifndef TRAINYARD_TRAINER_OPTIMIZER_H_
#define TRAINYARD_TRAINER_OPTIMIZER_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace trainyard {

class Collective;  // collective/collective.h (MoveTo)

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // One update of every parameter from its gradient (same order as the
  // parameters given at creation), in place, without autograd.
  virtual void Apply(const std::vector<torch::Tensor>& grads, double learning_rate) = 0;

  // Updates applied so far.
  int64_t step() const { return step_; }
  // The one-pass (fused) updates of contiguous float32 CPU parameters are on
  // by default; off, every parameter takes the tensor-op update (references
  // and tests).
  void set_fused_updates(bool on) { fused_updates_ = on; }
  // "<param>/<slot>" -> tensor, plus "step".
  virtual std::map<std::string, torch::Tensor> State() const = 0;
  // Restores State(); kInvalidArgument naming a missing or mis-shaped slot.
  virtual absl::Status LoadState(const std::map<std::string, torch::Tensor>& state) = 0;

  // For optimizers whose ranks each update a shard of the parameters
  // (trainer/sharded_optimizer.h): every rank calls Synchronize after
  // Apply, and the ranks exchange the updated parameters; GatherState is
  // the whole state on rank 0, a collective every rank calls (checkpoints
  // are written by every rank instead, trainer/train_checkpoint.h). Others
  // have nothing to exchange: State().
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
  // Synchronize without the exchange, for a caller that all-gathers the
  // parameters itself (trainer/parameter_gatherer.h): Apply's error, if any.
  virtual absl::Status TakeApplyError() { return absl::OkStatus(); }
  virtual absl::StatusOr<std::map<std::string, torch::Tensor>> GatherState() { return State(); }
  // A sharded optimizer's shards: world_size + 1 parameter indices, rank r
  // updating [bounds[r], bounds[r + 1]), whose Apply reads only this rank's
  // gradients (the others' may hold anything, so the gradients need only be
  // reduce-scattered). Empty: Apply reads every gradient.
  virtual std::vector<size_t> shard_bounds() const { return {}; }
  // After Apply: each parameter's squared gradient norm over the whole
  // model (before clipping), where Apply had to compute them with the other
  // ranks (a sharded optimizer's, once asked to with
  // set_gradient_squares_wanted: it computes them itself only to clip);
  // nullptr: compute them from the gradients.
  virtual const std::vector<double>* gradient_squares() const { return nullptr; }
  virtual void set_gradient_squares_wanted(bool) {}
  // ELASTIC: the ranks regrouped, and a sharded optimizer exchanges on
  // `next` from now on (not owned; outlives the optimizer or the next
  // MoveTo). Its shards stay where they are: kFailedPrecondition unless
  // this rank has the same rank among the same number as before. Others
  // exchange nothing: OK.
  virtual absl::Status MoveTo(Collective* /*next*/) { return absl::OkStatus(); }

 protected:
  int64_t step_ = 0;
  bool fused_updates_ = true;
};

// kInvalidArgument for an out-of-range hyper-parameter.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config, const NamedTensors& params);

// Scales `grads` in place so their global L2 norm is at most `max_norm`;
// returns the norm before clipping.
double ClipByGlobalNorm(const std::vector<torch::Tensor>& grads, double max_norm);
// The squared L2 norm of a gradient, summed in float64: the terms of the
// global norm (summed in parameter order).
double SquaredNorm(const torch::Tensor& grad);

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_OPTIMIZER_H_
