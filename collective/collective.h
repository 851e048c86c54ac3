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

#include <memory>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard {

enum class ReduceOp { kSum, kMax, kMin };

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
  // Every rank's `input` (same shape and dtype on every rank), in rank
  // order, into `outputs` (resized to world_size).
  virtual absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) = 0;
  virtual absl::Status Barrier() = 0;

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

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_COLLECTIVE_H_
