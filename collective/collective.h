// The narrow collective-communication interface the trainer uses for data
// parallelism. Every rank of a group calls the same operations in the same
// order; each returns a Status (kDeadlineExceeded on timeout, kUnavailable or
// kAborted when a peer is gone).
//
// Backends: LocalCollective (world size 1) here; GlooCollective (CPU,
// across processes and hosts); FakeCollective (tests: failures and delays
// on demand).
//
// Thread-safety: one thread per rank drives a Collective.
#ifndef TRAINYARD_COLLECTIVE_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_COLLECTIVE_H_

#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

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
};

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
