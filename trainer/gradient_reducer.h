// Data-parallel gradient all-reduce overlapped with the backward pass.
//
// The parameters' gradients live in a few flat buckets: every parameter's
// .grad() is a view into its bucket, so autograd accumulates into the
// buckets in place (microbatches included) and a bucket is all-reduced as
// one tensor without packing or copying back. Buckets hold parameters in
// reverse order of registration (roughly the order backward produces their
// gradients) up to `bucket_bytes` each, one dtype and device per bucket.
//
// During the backward pass of a step's last microbatch (Arm), a hook on
// each parameter's gradient accumulator marks it ready; once every
// parameter of a bucket is ready the bucket's all-reduce is started, while
// backward goes on computing earlier layers' gradients. Buckets are started
// strictly in index order on every rank (a bucket that fills early waits
// for its predecessors), so ranks always issue the same operations in the
// same order. Finish starts what is left (parameters that got no gradient
// in this step contribute their zeros) and waits for everything; the time
// it blocks is the exposed, not overlapped, communication.
//
// With shards (a sharded optimizer's: rank r updates parameters
// [shard_bounds[r], shard_bounds[r + 1])), each bucket is reduce-scattered
// instead: inside a bucket the parameters lie in ascending order, so each
// rank's members are one contiguous run and every rank receives the sums of
// its own parameters' gradients only, half the traffic of an all-reduce
// (ring algorithms). After Finish the other parameters' grads are
// unspecified.
//
// keep_only_shard (data_parallel.sharding GRADIENTS, ZeRO stage 2): the
// rank keeps only its shard of the gradients. No bucket is allocated
// between backward passes and the parameters' grads stay undefined:
// autograd makes each gradient, and once a bucket's members are all ready
// they are copied into a bucket allocated then, their grads are dropped and
// the bucket is reduce-scattered; when it completes, the sums received are
// added to this rank's shard (kept, counts[rank] elements per bucket) and
// the bucket is freed. At most `max_in_flight` buckets exist at once
// (starting one more first waits for the oldest), so a backward pass holds
// the gradients of a few buckets, not the model's. Every backward pass
// (microbatch) is reduced this way, Finish after each: with M microbatches,
// M reduce-scatters per step, the sums taken over ranks per microbatch and
// then over microbatches. ShardGradients() is what the optimizer reads.
//
// With an ExactSum (data_parallel.reproducible, trainer/exact_sum.h) the
// sums are exact: as a bucket starts, its gradients are turned into the
// sum's fixed-point integers and dropped, so integer sums are what is
// reduced, the same bits however the microbatches were spread over the
// ranks. With keep_only_shard every pass's integers are reduce-scattered
// and the shard holds the integer sums. Otherwise each bucket holds the
// step's integer sums (8 bytes per element), every pass adds to them, and
// only a pass marked SetPassReduces(true) (the step's last) all-reduces
// (or reduce-scatters) them as its buckets start, overlapped with that
// backward pass. ShardGradients() turns the sums into float32. The caller
// sets the sum's scales before a step's first pass (ExactSum::SetScales)
// and, after its last, combines the exponents observed (a MAX over every
// rank) to decide whether the step must be computed again (Overflowed).
//
// Code that replaces or clears a parameter's .grad() does no harm: the
// next Arm, Finish or ZeroGrads puts the view back, keeping the value.
//
// Thread-safety: hooks run on the thread that runs backward; all calls come
// from one thread per rank.
#ifndef TRAINYARD_TRAINER_GRADIENT_REDUCER_H_
#define TRAINYARD_TRAINER_GRADIENT_REDUCER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/csrc/autograd/function.h>
#include <torch/types.h>

#include "absl/status/status.h"
#include "collective/collective.h"
#include "trainer/exact_sum.h"

namespace trainyard {

class GradientReducer {
 public:
  // `params` are leaf tensors that require grad; their grads are replaced by
  // zeroed views into the buckets. `shard_bounds`: empty (all-reduce) or
  // world_size + 1 ascending parameter indices from 0 to params.size()
  // (reduce-scatter). `exact` (not owned; it outlives the reducer): sum
  // exactly; its tensors are `params`, in order.
  GradientReducer(std::vector<torch::Tensor> params, Collective* collective, int64_t bucket_bytes,
                  std::vector<size_t> shard_bounds = {}, bool keep_only_shard = false, int max_in_flight = 2,
                  ExactSum* exact = nullptr);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // The next backward pass is a step's last: start buckets as they fill.
  void Arm();
  // keep_only_shard: the next backward pass is a warm-up whose gradients
  // are dropped as autograd makes them (nothing is sent, and the model's
  // gradients never exist at once); Abandon or ZeroGrads after it.
  void ArmToDiscard();
  // With an ExactSum and without keep_only_shard: whether the next passes
  // reduce their buckets (a step's last) or only add to them (true until
  // set).
  void SetPassReduces(bool reduces);
  // Disarms, starts the buckets not yet started, waits for all. After OK,
  // every grad (with shards: every grad of this rank's shard) holds the sum
  // over ranks; keep_only_shard: the backward pass's sums were added to the
  // shard, and every grad is undefined.
  absl::Status Finish();
  // Disarms and waits for anything started (errors dropped), then zeroes
  // the gradients: a step abandoned or failed part-way.
  void Abandon();
  // Zeroes every bucket (the gradients of the next step start from zero).
  void ZeroGrads();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Parameter indices (into the constructor's list) of each bucket.
  std::vector<std::vector<int>> bucket_members() const;
  // Buckets started from hooks during backward in the last Finish (the rest
  // were started by Finish itself).
  int started_during_backward() const { return started_during_backward_; }
  bool reduce_scatters() const { return !shard_bounds_.empty(); }
  bool keeps_only_shard() const { return keep_only_shard_; }
  // keep_only_shard: every parameter's gradient as the optimizer reads it
  // after the last Finish, views of this rank's shard for its own
  // parameters and undefined tensors for the others'. Valid until the next
  // ZeroGrads or Abandon. With an ExactSum: the integer sums as float32
  // (new tensors), every parameter's when the buckets are all-reduced.
  std::vector<torch::Tensor> ShardGradients() const;
  // keep_only_shard: the most buckets that existed at once in the last
  // backward pass.
  int peak_buckets() const { return peak_buckets_; }
  // The most gradient elements that autograd had made but whose bucket had
  // not started yet, in the last armed backward pass: what the strict start
  // order held back (with keep_only_shard, memory held beyond the buckets).
  int64_t peak_waiting_elements() const { return peak_waiting_; }

 private:
  struct Bucket {
    torch::Tensor buffer;
    std::vector<int> members;
    int pending = 0;  // members not yet ready in this backward pass
    std::unique_ptr<CollectiveWork> work;
    bool started = false;
    // Reduce-scatter: each rank's elements of the buffer (in rank order),
    // and where this rank's sums land (its own run of the buffer, in place;
    // keep_only_shard: the shard, or a temporary added to it).
    std::vector<int64_t> counts;
    int64_t own_offset = 0;
    torch::Tensor received;
    std::vector<int> layout;       // members in ascending order: the buffer's
    std::vector<int64_t> offsets;  // of each member of `layout` in the buffer
    torch::Tensor owned;           // keep_only_shard: this rank's summed gradients (int64 with exact_);
                                   // exact_ otherwise: the whole bucket's integer sums
  };
  class ReadyHook;

  // The rank whose shard holds parameter i.
  int Owner(int i) const;
  // Adds the bucket of parameters `members`: its layout, and its buffer
  // with every member's grad a view into it, or with keep_only_shard this
  // rank's shard of it (the grads left undefined).
  void AddBucket(std::vector<int> members);
  void MarkReady(int param);
  void StartReadyBuckets();
  void StartBucket(Bucket& bucket);
  // keep_only_shard: waits for the oldest started bucket, adds what it
  // received to the shard and frees it.
  void CompleteOldest();
  void Reset();
  // Points every parameter's grad back at its bucket slot if something
  // replaced or cleared it (its value is kept).
  void AttachViews();

  std::vector<torch::Tensor> params_;
  Collective* collective_;
  std::vector<size_t> shard_bounds_;
  bool keep_only_shard_ = false;
  int max_in_flight_ = 2;
  ExactSum* exact_ = nullptr;  // the sums are its integers
  bool pass_reduces_ = true;   // exact_ without keep_only_shard: SetPassReduces
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;        // parameter index -> bucket index
  std::vector<torch::Tensor> views_;  // parameter index -> its slot of its bucket, shaped like it
  std::vector<char> ready_;           // parameter index -> ready in this pass
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they own the hooks
  std::vector<uintptr_t> hook_keys_;
  bool armed_ = false;
  bool discarding_ = false;  // ArmToDiscard
  int next_bucket_ = 0;      // the first bucket not yet started
  int next_complete_ = 0;    // keep_only_shard: the first bucket not yet completed
  int peak_buckets_ = 0;
  int64_t waiting_ = 0;          // ready elements of buckets not yet started
  int64_t peak_waiting_ = 0;     // the most of waiting_ since Arm
  bool shard_empty_ = true;      // keep_only_shard: nothing summed into the shard since ZeroGrads
  absl::Status complete_error_;  // keep_only_shard: the first failed bucket's
  int started_during_backward_ = 0;
  absl::Status start_error_;  // the first failure to start a bucket
};

}  // namespace trainyard

#endif  // TRAINYARD_TRAINER_GRADIENT_REDUCER_H_
