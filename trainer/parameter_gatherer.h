// The parameters' all-gather of a sharded optimizer (data_parallel.sharding
// OPTIMIZER and GRADIENTS), unit by unit and overlapped with the next
// step's forward pass (data_parallel.overlap_allgather).
//
// After a step's update each rank holds its own shard of the parameters
// updated and the others' stale. Start() marks every unit stale and starts
// the all-gathers of the first `prefetch` units; the forward pass calls
// Before(u) (the model's hook, Model::ParameterUnits) before it first reads
// unit u, which waits for the gathers of units up to u, copies them into
// the parameters, and starts the next units' so that `prefetch` are in
// flight: the transfer of unit u + 1 overlaps the computation of unit u.
// Finish() gathers whatever is left (the end of a Train call, a stop).
//
// A unit's gather is one AllGatherV: rank r contributes the unit's
// parameters in its shard (whole parameters, ShardBoundaries), in the
// model's order, so the gathered buffer holds the unit's parameters in
// order. Every rank starts the units' gathers in unit order, whatever
// order Before is called in, so the ranks issue identical sequences. The
// values copied are those the synchronous all-gather
// (ShardedOptimizer::Synchronize) writes: training is the same bit for bit.
//
// Memory: `prefetch` units' buffers (send and receive), reused; at most the
// largest units', not the model's.
//
// Errors: the first failure is kept. Before cannot return it (it runs
// inside the forward pass): it throws, which ends the pass, and the caller
// reads status(). After a failure no further gather starts and the
// parameters stay stale (stale()).
//
// Thread-safety: one thread (the trainer's) drives it; every rank calls
// Start and Finish at the same points.
#ifndef TRAINYARD_TRAINER_PARAMETER_GATHERER_H_
#define TRAINYARD_TRAINER_PARAMETER_GATHERER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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
  // not owned and outlives the gatherer. prefetch >= 1.
  static absl::StatusOr<std::unique_ptr<ParameterGatherer>> Create(NamedTensors params,
                                                                   std::vector<std::vector<size_t>> units,
                                                                   std::vector<size_t> bounds, Collective* collective,
                                                                   int prefetch = 2);
  ~ParameterGatherer();

  // Every unit stale; the first units' gathers start. Call after this
  // rank's shard was updated, with nothing pending (Finish first).
  absl::Status Start();
  // Units 0..u are whole on return. On failure: throws std::runtime_error
  // (status() says why).
  void Before(int u);
  // Every unit whole; the first error, if any.
  absl::Status Finish();
  // Waits for the gathers in flight and starts no other: the parameters
  // stay stale (an attempt that failed) until a Start and Finish.
  void Abandon();

  bool pending() const { return done_ < units_.size(); }
  // A failure or Abandon left parameters that no gather will complete.
  bool stale() const { return stale_; }
  absl::Status status() const { return error_; }
  // Seconds Before and Finish took (waiting for gathers, starting the
  // next, copying into the parameters: what the forward pass was held up),
  // since the last call.
  double TakeWaitSeconds();
  size_t num_units() const { return units_.size(); }

 private:
  struct Unit {
    std::vector<size_t> params;   // ascending (so rank-major: shards are contiguous)
    std::vector<int64_t> counts;  // elements each rank contributes
    int64_t total = 0;
  };
  struct Slot {
    torch::Tensor send, receive;
    std::unique_ptr<CollectiveWork> work;
  };
  ParameterGatherer() = default;
  // Starts the next unit's gather (started_ < units).
  absl::Status StartNext();
  // Waits for unit done_'s gather and copies it into the parameters.
  absl::Status CompleteNext();
  absl::Status Advance(size_t last);
  void Fail(absl::Status status);

  NamedTensors params_;
  std::vector<Unit> units_;
  std::vector<size_t> bounds_;
  Collective* collective_ = nullptr;
  std::vector<Slot> slots_;  // unit k uses slot k % prefetch
  size_t started_ = 0, done_ = 0;
  bool stale_ = false;
  absl::Status error_;
  double wait_seconds_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_PARAMETER_GATHERER_H_
