// The narrow collective-communication interface the trainer uses for data
// parallelism. Every rank of a group calls the same operations in the same
// order; each returns a Status (kDeadlineExceeded on timeout, kUnavailable or
// kAborted when a peer is gone).
//
// Backends: LocalCollective (world size 1) here; GlooCollective (CPU,
// across processes and hosts); NcclCollective (CUDA); FakeCollective
// (tests: failures and delays on demand).
//
// Thread-safety: one thread per rank drives a Collective.
#ifndef TRAINYARD_COLLECTIVE_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_COLLECTIVE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace trainyard {

enum class ReduceOp { kSum, kMax, kMin };

// How far a collective has got, as a watchdog on another thread sees it
// (Collective::Progress).
struct CollectiveProgress {
  int64_t completed = 0;  // waits for an operation that ended (in any way)
  // A caller is blocked waiting for an operation now, and no operation has
  // ended for `stalled` (since the wait began or the last one ended,
  // whichever is later); zero when nothing is waited for.
  bool waiting = false;
  absl::Duration stalled = absl::ZeroDuration();
  bool aborted = false;
};

// The bookkeeping behind Progress and Abort, shared by the backends: each
// blocking wait is bracketed by a Waiting, and polls aborted() at least
// every kAbortPollInterval.
//
// Thread-safety: thread-safe.
class CollectiveWatch {
 public:
  static constexpr absl::Duration kAbortPollInterval = absl::Milliseconds(20);

  class Waiting {
   public:
    explicit Waiting(CollectiveWatch* watch);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    CollectiveWatch* const watch_;
  };

  CollectiveProgress Progress() const;
  // The first reason wins.
  void Abort(absl::string_view reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // kAborted: "<what>: the collective was aborted: <reason>".
  absl::Status AbortedError(absl::string_view what) const;

 private:
  static int64_t NowNanos();
  std::atomic<int64_t> waiters_{0};
  std::atomic<int64_t> completed_{0};
  std::atomic<int64_t> last_event_ns_{0};  // a wait began with none in progress, or one ended
  std::atomic<bool> aborted_{false};
  mutable Mutex mu_;
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

// A collective operation in flight (Collective::StartAllReduce).
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  // Blocks until the operation has finished, failed, or the collective's
  // timeout passed; its Status. Call once.
  virtual absl::Status Wait() = 0;
};

// A finished operation: what synchronous backends return.
class CompletedWork : public CollectiveWork {
 public:
  explicit CompletedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The collective the training state is sharded over
  // (data_parallel.sharding): this one, or with HSDP the rank's shard group
  // (hybrid_collective.h). Owned by this.
  virtual Collective* sharding_group() { return this; }
  // With HSDP, the ranks holding the same shard as this one in every shard
  // group (its replica set, rank = group index); null otherwise. Owned by
  // this.
  virtual Collective* replica_set() { return nullptr; }
  // In place: every tensor becomes the reduction over ranks.
  virtual absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) = 0;
  // Starts an in-place all-reduce of one contiguous tensor and returns
  // without waiting for it where the backend can (Gloo); the tensor must
  // not be touched until the work's Wait returns. Every rank starts its
  // operations in the same order. The default runs AllReduce to completion.
  virtual absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllReduce(torch::Tensor tensor, ReduceOp op) {
    std::vector<torch::Tensor> one = {std::move(tensor)};
    return std::unique_ptr<CollectiveWork>(new CompletedWork(AllReduce(one, op)));
  }
  // In place: every rank gets `root`'s tensors.
  virtual absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) = 0;
  // In place on the ranks in `receivers` only (distinct ranks other than
  // `root`): they get `root`'s tensors; every rank calls it with the same
  // arguments, and the others' tensors are left as they are. For state sent
  // to the ranks that lack it (a joiner) while the others hold it already.
  // kInvalidArgument for a root or receiver out of range. The default
  // broadcasts to every rank, into copies on the others; Gloo sends to the
  // receivers only.
  virtual absl::Status BroadcastTo(std::vector<torch::Tensor>& tensors, int root, const std::vector<int>& receivers);
  // Every rank's `input` (same shape and dtype on every rank), in rank
  // order, into `outputs` (resized to world_size).
  virtual absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) = 0;
  virtual absl::Status Barrier() = 0;

  // Thread-safe, from any thread (a watchdog, an RPC): ends the operation
  // a caller is blocked in, and every later one, with kAborted within
  // CollectiveWatch::kAbortPollInterval, rather than at the timeout, when a
  // peer is known to be gone or unreachable. The collective is not used
  // again afterwards (its connections may still be busy with the aborted
  // operation until its own timeout; the tensors it was given must not be
  // reused for anything that matters: the trainer's gradient buckets are
  // dropped with the group). LocalCollective never blocks: nothing to do.
  virtual void Abort(absl::string_view reason) { (void)reason; }
  // Thread-safe: whether a caller is blocked in an operation, and for how
  // long nothing has completed. LocalCollective: never waiting.
  virtual CollectiveProgress Progress() const { return {}; }

  // Reduce-scatter of a flat tensor: `input` (1-D, contiguous, the same size
  // and dtype on every rank) is cut into world_size() consecutive shards of
  // `counts[r]` elements (the same counts on every rank, summing to input's
  // size; shards may be uneven or empty). Rank r's `output` (1-D,
  // contiguous, counts[rank] elements) receives shard r reduced over the
  // ranks; it is either input's own shard r (in place: no copy, no extra
  // buffer) or does not overlap `input` at all. `input` is scratch: its
  // other contents are unspecified afterwards. kInvalidArgument for counts or sizes that do
  // not fit. The default all-reduces `input` and copies the shard (twice
  // the traffic of a ring reduce-scatter; Gloo and NCCL override it).
  virtual absl::Status ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                                     ReduceOp op);
  // All-gather of uneven shards: rank r's `input` (counts[r] elements) into
  // `output` (1-D, contiguous, the counts' sum) at offset counts[0] + ... +
  // counts[r-1], on every rank. The default pads every shard to the largest
  // and runs AllGather.
  virtual absl::Status AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output);
  // As above, returning without waiting where the backend can (Gloo: on the
  // collective's own thread, in the order started); the tensors must not be
  // touched until Wait returns. Every rank starts its operations in the
  // same order. The defaults run to completion.
  virtual absl::StatusOr<std::unique_ptr<CollectiveWork>> StartReduceScatter(torch::Tensor input,
                                                                             std::vector<int64_t> counts,
                                                                             torch::Tensor output, ReduceOp op) {
    return std::unique_ptr<CollectiveWork>(new CompletedWork(ReduceScatter(input, counts, output, op)));
  }
  virtual absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllGatherV(torch::Tensor input,
                                                                          std::vector<int64_t> counts,
                                                                          torch::Tensor output) {
    return std::unique_ptr<CollectiveWork>(new CompletedWork(AllGatherV(input, counts, output)));
  }
};

// The checks every backend's ReduceScatter/AllGatherV make: counts for
// each of `world_size` ranks, none negative, summing to `total`; 1-D
// contiguous tensors of the sizes the operation needs on `rank`.
absl::Status CheckReduceScatter(const torch::Tensor& input, const std::vector<int64_t>& counts,
                                const torch::Tensor& output, int rank, int world_size);
absl::Status CheckAllGatherV(const torch::Tensor& input, const std::vector<int64_t>& counts,
                             const torch::Tensor& output, int rank, int world_size);
// The checks of BroadcastTo: root and receivers in [0, world_size),
// receivers distinct and other than root.
absl::Status CheckBroadcastTo(int root, const std::vector<int>& receivers, int world_size);
// Element offsets of the shards: offsets[r] = counts[0] + ... + counts[r-1].
std::vector<int64_t> ShardOffsets(const std::vector<int64_t>& counts);

// A collective's failure as a live rank reports it: kUnavailable and
// kDeadlineExceeded become kAborted ("collective failed (a peer left or
// stalled): ..."), since they are a consequence of a peer dying or
// stalling, not a reason to blame this rank's transport; other errors are
// returned as they are. The coordinator blames the rank whose error is not
// kAborted.
absl::Status CollectiveFailure(const absl::Status& s);

// World size 1: every operation is the identity.
class LocalCollective : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduce(std::vector<torch::Tensor>&, ReduceOp) override { return absl::OkStatus(); }
  absl::Status Broadcast(std::vector<torch::Tensor>&, int root) override {
    return root == 0 ? absl::OkStatus() : absl::InvalidArgumentError("broadcast root out of range");
  }
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override {
    *outputs = {input.clone()};
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
};

// A group's place without its connections: rank and world size only; every
// operation fails with kFailedPrecondition. A job built ahead of joining
// its group (WorkerCore's StartJob with `prepare`) is built on it, and
// moves to the group once it forms.
class UnconnectedCollective : public Collective {
 public:
  UnconnectedCollective(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(std::vector<torch::Tensor>&, ReduceOp) override { return NotConnected(); }
  absl::Status Broadcast(std::vector<torch::Tensor>&, int) override { return NotConnected(); }
  absl::Status AllGather(const torch::Tensor&, std::vector<torch::Tensor>*) override { return NotConnected(); }
  absl::Status Barrier() override { return NotConnected(); }

 private:
  static absl::Status NotConnected() {
    return absl::FailedPreconditionError("this rank is not connected to its group yet");
  }
  int rank_;
  int world_size_;
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_COLLECTIVE_H_
