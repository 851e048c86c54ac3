// The parameters' all-gathers of sharded data parallelism, unit by unit
// (Model::ParameterUnits), overlapped with the forward and backward passes.
//
// Two modes:
//
// OPTIMIZER and GRADIENTS sharding (data_parallel.overlap_allgather): after
// a step's update each rank holds its own shard of the parameters updated
// and the others' stale. Start() marks every unit stale and starts the
// all-gathers of the first `prefetch` units; the forward pass calls Before(u)
// (the model's `before` hook) before it first reads unit u, which waits for
// the gathers of units up to u, copies them into the parameters, and starts
// the next units' so that `prefetch` are in flight: the transfer of unit
// u + 1 overlaps the computation of unit u. Finish() gathers whatever is
// left (the end of a Train call, a stop).
//
// PARAMETERS sharding (shard_parameters, ZeRO stage 3): between steps a
// rank holds only its own parameters; the memory of every other parameter
// is released (model/parameter_storage.h: the tensors, their views and what
// autograd saved of them stay the same objects). Each training pass (one
// microbatch's forward and backward) is scheduled by BeginPass:
//   forward:  the units not whole, ascending, each gathered in Before(u)
//             and released in After(u) once the forward pass has last read
//             it, but for unit 0 (the embedding, read again by the logits
//             and by backward) and the last unit (backward reads it next);
//   backward: units n-2 down to 1, each gathered again in BeforeBackward(u)
//             (the model's `before_backward` hook, called before backward
//             computes anything of unit u) and released once autograd has
//             accumulated the gradients of all of its parameters (a hook on
//             each parameter's gradient accumulator).
// With `prefetch` gathers in flight along that schedule, the next unit's
// transfer overlaps this unit's computation in both directions. Unit 0 and
// any unit some of whose parameters got no gradient stay whole until
// ReleaseAll, which the trainer calls once the step's last backward pass
// is done (before the update: a whole copy would be stale after it).
// GatherAll makes everything whole (evaluation, decoding, checkpoints);
// the next training pass releases it again.
//
// A unit's gather is one AllGatherV: rank r contributes the unit's
// parameters in its shard (whole parameters, ShardBoundaries), in the
// model's order, so the gathered buffer holds the unit's parameters in
// order. Every rank builds the same schedule (the passes run the same units
// in the same order on every rank), so the ranks issue identical sequences
// of gathers whatever order the calls come in. The gathered values are the
// owner's bits: training is the same bit for bit as with whole parameters.
// Gathered values are written through Tensor::data(), which does not bump
// the version counter that autograd checks for the tensors it saved.
//
// Memory: `prefetch` units' buffers (send and receive), kept and reused
// for units of at most `keep_elements`; a larger unit's (an embedding, the
// logits' projection) are allocated for its gather and freed when it
// completes, so they are never held between steps. In PARAMETERS mode also
// the units whole at once (peak_gathered_elements()).
//
// Errors: the first failure is kept. Before and BeforeBackward cannot
// return it (they run inside the passes): they throw, which ends the pass,
// and the caller reads status(). After a failure no further gather starts;
// OPTIMIZER mode's parameters stay stale (stale()).
//
// Thread-safety: one thread (the trainer's) drives it, and its gradient
// hooks run on the thread of the backward pass; every rank makes the same
// calls in the same order.
#ifndef TRAINYARD_TRAINER_PARAMETER_GATHERER_H_
#define TRAINYARD_TRAINER_PARAMETER_GATHERER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "trainer/optimizer.h"

namespace trainyard {

class ParameterGatherer {
 public:
  // `params`: the model's, in order; `units`: indices into params, each
  // parameter in exactly one unit (kInvalidArgument otherwise); `bounds`:
  // the shards (ShardBoundaries, world_size + 1 entries). `collective` is
  // not owned and outlives the gatherer. prefetch >= 1. shard_parameters:
  // PARAMETERS mode (the parameters must require grad and not share
  // storage); the parameters are whole until the first ReleaseAll.
  // keep_elements: the largest unit whose buffers are kept for reuse.
  static absl::StatusOr<std::unique_ptr<ParameterGatherer>> Create(NamedTensors params,
                                                                   std::vector<std::vector<size_t>> units,
                                                                   std::vector<size_t> bounds, Collective* collective,
                                                                   int prefetch = 2, bool shard_parameters = false,
                                                                   int64_t keep_elements = int64_t{1} << 20);
  ~ParameterGatherer();
  ParameterGatherer(const ParameterGatherer&) = delete;
  ParameterGatherer& operator=(const ParameterGatherer&) = delete;

  // OPTIMIZER mode. Every unit stale; the first units' gathers start. Call
  // after this rank's shard was updated, with nothing pending (Finish
  // first).
  absl::Status Start();
  // Every unit scheduled before unit u's forward use is whole on return
  // (nothing when u is not scheduled). On failure: throws
  // std::runtime_error (status() says why).
  void Before(int u);
  // Every scheduled unit whole; the first error, if any.
  absl::Status Finish();
  // Waits for the gathers in flight and starts no other: OPTIMIZER mode's
  // parameters stay stale (an attempt that failed) until a Start and
  // Finish; PARAMETERS mode's units not gathered stay released.
  void Abandon();

  // PARAMETERS mode. A training pass (forward and backward) starts: its
  // gathers are scheduled (above) and the first ones started. Gathers left
  // from an unfinished pass are abandoned first.
  absl::Status BeginPass();
  // The forward pass has last read unit u: released (in a training pass,
  // but for units 0 and n-1). Outside a pass, nothing.
  void After(int u);
  // Unit u is whole on return (it is scheduled in backward for 1 <= u <=
  // n-2). Throws as Before does.
  void BeforeBackward(int u);
  // Waits for the gathers in flight and releases every parameter this rank
  // does not own; ends the pass. Local: no collective.
  void ReleaseAll();
  // Every unit whole (one gather per unit that is not); every rank calls
  // it at the same point.
  absl::Status GatherAll();

  bool pending() const { return done_ < schedule_.size(); }
  // OPTIMIZER mode: a failure or Abandon left parameters that no gather
  // will complete.
  bool stale() const { return stale_; }
  absl::Status status() const { return error_; }
  // Seconds Before, BeforeBackward, Finish and GatherAll took (waiting for
  // gathers, starting the next, copying into the parameters: what the
  // passes were held up), since the last call.
  double TakeWaitSeconds();
  size_t num_units() const { return units_.size(); }
  bool shard_parameters() const { return shard_parameters_; }
  // Whether every parameter of unit u is present (PARAMETERS mode: not
  // released).
  bool whole(int u) const { return whole_[u]; }
  // PARAMETERS mode: elements of parameters this rank does not own that
  // hold memory now, and the most since the last TakePeakGatheredElements.
  int64_t gathered_elements() const { return gathered_elements_; }
  int64_t TakePeakGatheredElements();
  // Elements of the parameters this rank does not own.
  int64_t others_elements() const { return others_elements_; }
  // Elements of the send and receive buffers held now.
  int64_t buffer_elements() const;

 private:
  struct Unit {
    std::vector<size_t> params;   // ascending (so rank-major: shards are contiguous)
    std::vector<int64_t> counts;  // elements each rank contributes
    int64_t total = 0;
    int64_t others = 0;  // elements of the parameters other ranks own
  };
  struct Slot {
    torch::Tensor send, receive;
    std::unique_ptr<CollectiveWork> work;
    bool transient = false;  // the buffers are this gather's only (a large unit)
  };
  class ReadyHook;
  ParameterGatherer() = default;
  // Create's steps. The units from `units`, each parameter checked (in
  // range, in one unit only, contiguous, of one dtype; in PARAMETERS mode
  // requiring grad, with a storage of its own), with the elements each rank
  // contributes.
  absl::Status AddUnits(const NamedTensors& params, std::vector<std::vector<size_t>> units);
  // Parameters whose memory was released before Create (allowed in
  // PARAMETERS mode for other ranks' parameters only) count as not
  // gathered, and then no unit is whole.
  absl::Status CountReleasedParameters();
  bool Mine(size_t i) const;
  // A schedule of units to gather, in order; forward_at_/backward_at_ say
  // where each unit's forward and backward entries are (-1: none).
  void Schedule(std::vector<int> forward, std::vector<int> backward);
  // Starts the first `prefetch` gathers of a new schedule.
  absl::Status StartFirst();
  // Starts the next scheduled unit's gather (started_ < schedule).
  absl::Status StartNext();
  // Waits for schedule entry done_'s gather and copies it into the
  // parameters.
  absl::Status CompleteNext();
  // Completes the schedule up to entry `last`.
  absl::Status Advance(size_t last);
  void AdvanceOrThrow(int entry);
  void ThrowIfReleased(int u) const;
  void Fail(absl::Status status);
  // PARAMETERS mode: frees the memory of unit u's parameters of other
  // ranks.
  void Release(int u);
  void GradientReady(size_t param);

  NamedTensors params_;
  std::vector<Unit> units_;
  std::vector<int> unit_of_;  // parameter index -> its unit
  std::vector<size_t> bounds_;
  Collective* collective_ = nullptr;
  bool shard_parameters_ = false;
  int64_t keep_elements_ = 0;
  std::vector<Slot> slots_;  // schedule entry k uses slot k % prefetch
  std::vector<int> schedule_;
  std::vector<int> forward_at_, backward_at_;
  size_t started_ = 0, done_ = 0;
  std::vector<char> whole_;        // unit -> every parameter present (and, OPTIMIZER mode, current)
  std::vector<size_t> nbytes_;     // parameter -> its storage's bytes (to restore)
  std::vector<int> ready_;         // unit -> gradients accumulated in this pass
  bool in_pass_ = false;           // between BeginPass and ReleaseAll
  int64_t gathered_elements_ = 0;  // others' elements present
  int64_t peak_gathered_ = 0;
  int64_t others_elements_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they own the hooks
  std::vector<uintptr_t> hook_keys_;
  bool stale_ = false;
  absl::Status error_;
  double wait_seconds_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_PARAMETER_GATHERER_H_
