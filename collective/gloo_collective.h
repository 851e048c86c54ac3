// The Collective over Gloo (CPU tensors), through LibTorch's c10d
// ProcessGroupGloo. Ranks rendezvous through a c10d::Store (an in-memory
// HashStore for ranks in one process; a store reachable by every process
// across hosts).
//
// Every operation waits at most the timeout given at creation; a peer that
// never arrives gives kDeadlineExceeded, a broken connection kUnavailable.
// Thread-safety: one thread per rank.
#ifndef TRAINYARD_COLLECTIVE_GLOO_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_GLOO_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective.h"

namespace trainyard {

// Where ranks rendezvous (wraps a c10d::Store; see gloo_collective.cc).
struct GlooStore;

class GlooCollective : public Collective {
 public:
  // Joins the group: blocks until all `world_size` ranks have joined through
  // `store` or `timeout` passes. `hostname` is the address this rank's
  // connections use (e.g. "127.0.0.1").
  static absl::StatusOr<std::unique_ptr<GlooCollective>> Create(
      int rank, int world_size, std::shared_ptr<GlooStore> store, const std::string& hostname,
      absl::Duration timeout);

  ~GlooCollective() override;
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override;
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  absl::Status Barrier() override;

  // An in-memory store for ranks in one process (tests, and several ranks
  // of one host in one process).
  static std::shared_ptr<GlooStore> NewInProcessStore();

 private:
  GlooCollective() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_GLOO_COLLECTIVE_H_
