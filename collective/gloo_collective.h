// The Collective over Gloo (CPU tensors), through LibTorch's c10d
// ProcessGroupGloo. Ranks rendezvous through a Store (collective/store.h):
// an InMemoryStore for ranks in one process, the coordinator-backed store
// across processes and hosts.
//
// All-reduce is bucketed: the tensors of each dtype are packed, in order,
// into flat buffers of at most `bucket_bytes`; a contiguous tensor of at
// least that size is reduced in place in bucket-sized pieces. All buckets
// are issued at once and then waited for, so that Gloo's threads overlap
// transfers with reductions.
//
// Every operation waits at most the timeout given at creation; a peer that
// never arrives gives kDeadlineExceeded, a broken connection kUnavailable,
// an Abort (from any thread) kAborted at once.
// Thread-safety: one thread per rank.
#ifndef TRAINYARD_COLLECTIVE_GLOO_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_GLOO_COLLECTIVE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective.h"
#include "collective/store.h"

namespace trainyard {

struct GlooOptions {
  // The address this rank's connections use (e.g. "127.0.0.1", or the
  // host's address on the cluster network).
  std::string hostname = "127.0.0.1";
  absl::Duration timeout = absl::Seconds(60);
  int64_t bucket_bytes = 25 << 20;
};

class GlooCollective : public Collective {
 public:
  // Joins the group: blocks until all `world_size` ranks have joined through
  // `store` or the timeout passes.
  static absl::StatusOr<std::unique_ptr<GlooCollective>> Create(int rank, int world_size, std::shared_ptr<Store> store,
                                                                const GlooOptions& options);
  static absl::StatusOr<std::unique_ptr<GlooCollective>> Create(int rank, int world_size, std::shared_ptr<Store> store,
                                                                const std::string& hostname, absl::Duration timeout) {
    GlooOptions options;
    options.hostname = hostname;
    options.timeout = timeout;
    return Create(rank, world_size, std::move(store), options);
  }

  ~GlooCollective() override;
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override;
  // Asynchronous: issued to Gloo's threads; Wait observes the timeout.
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllReduce(torch::Tensor tensor, ReduceOp op) override;
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  // Point to point from the root to each receiver in turn, on this
  // collective's own thread (as the rings below); the others only count
  // the operation.
  absl::Status BroadcastTo(std::vector<torch::Tensor>& tensors, int root, const std::vector<int>& receivers) override;
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override;
  absl::Status Barrier() override;
  // Every wait polls the abort every CollectiveWatch::kAbortPollInterval.
  void Abort(absl::string_view reason) override;
  CollectiveProgress Progress() const override;
  // Rings over point-to-point transfers (c10d's Gloo has no reduce-scatter
  // nor uneven all-gather): W - 1 steps, each rank sending one shard to the
  // next rank while receiving one from the previous, so each sends (W-1)/W
  // of the data once. They run on this collective's own thread, one after
  // another in the order started; a step's transfers share the operation's
  // deadline (the timeout from its start).
  absl::Status ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                             ReduceOp op) override;
  absl::Status AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) override;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartReduceScatter(torch::Tensor input, std::vector<int64_t> counts,
                                                                     torch::Tensor output, ReduceOp op) override;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllGatherV(torch::Tensor input, std::vector<int64_t> counts,
                                                                  torch::Tensor output) override;

  // An in-memory store for ranks in one process.
  static std::shared_ptr<Store> NewInProcessStore();

 private:
  GlooCollective() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_GLOO_COLLECTIVE_H_
