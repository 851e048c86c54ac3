// Hybrid sharded data parallelism (HSDP; data_parallel.shard_group_size G
// of W ranks): the training state is sharded within groups of G
// consecutive ranks (ranks g G .. g G + G - 1 form group g) and replicated
// across the W / G groups. Rank r is rank r mod G of its group, and rank
// r / G of its replica set: the ranks at the same place in every group,
// which hold the same shard.
//
// HybridCollective is the job's collective then: every Collective
// operation spans all W ranks, and sharding_group() is a
// ShardGroupCollective, which the sharded state's parts (the sharded
// optimizer, the gradient reducer, the parameter gatherer) use in place of
// the job's collective: its rank and world size are the group's;
// ReduceScatter reduce-scatters within the group and then all-reduces the
// rank's shard over its replica set, so a gradient shard is summed over
// every rank of the job (the group's sums first, then the groups'); every
// other operation stays within the group (the replicas hold the same
// values: a parameter's all-gather, or an all-reduce of the shards' norms,
// needs no other group).
//
// Abort reaches all three collectives; Progress reports the one a caller
// waits in.
//
// Thread-safety: as the wrapped collectives.
#ifndef TRAINYARD_COLLECTIVE_HYBRID_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_HYBRID_COLLECTIVE_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collective/collective.h"

namespace trainyard {

// Where rank `rank` of `world_size` sits with groups of `group_size`:
// group index, rank within it, and the replica set (by its index: the
// place in the group) and rank within that.
struct HybridPlace {
  int group = 0;
  int group_rank = 0;
  int replica_rank = 0;  // = group
  int replica_set = 0;   // = group_rank
};
// kInvalidArgument unless 1 <= group_size, group_size divides world_size
// and 0 <= rank < world_size.
absl::StatusOr<HybridPlace> PlaceInHybrid(int rank, int world_size, int group_size);

class ShardGroupCollective : public Collective {
 public:
  // Neither is owned; both outlive this.
  ShardGroupCollective(Collective* group, Collective* replicas) : group_(group), replicas_(replicas) {}

  int rank() const override { return group_->rank(); }
  int world_size() const override { return group_->world_size(); }
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override {
    return group_->AllReduce(tensors, op);
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllReduce(torch::Tensor tensor, ReduceOp op) override {
    return group_->StartAllReduce(std::move(tensor), op);
  }
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override {
    return group_->Broadcast(tensors, root);
  }
  absl::Status BroadcastTo(std::vector<torch::Tensor>& tensors, int root, const std::vector<int>& receivers) override {
    return group_->BroadcastTo(tensors, root, receivers);
  }
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override {
    return group_->AllGather(input, outputs);
  }
  absl::Status Barrier() override { return group_->Barrier(); }
  void Abort(absl::string_view reason) override;
  CollectiveProgress Progress() const override;
  absl::Status ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                             ReduceOp op) override;
  absl::Status AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) override {
    return group_->AllGatherV(std::move(input), counts, std::move(output));
  }
  // The group's reduce-scatter starts at once; the replicas' all-reduce of
  // the shard when its work is waited for.
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartReduceScatter(torch::Tensor input, std::vector<int64_t> counts,
                                                                     torch::Tensor output, ReduceOp op) override;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllGatherV(torch::Tensor input, std::vector<int64_t> counts,
                                                                  torch::Tensor output) override {
    return group_->StartAllGatherV(std::move(input), std::move(counts), std::move(output));
  }

 private:
  Collective* const group_;
  Collective* const replicas_;
};

class HybridCollective : public Collective {
 public:
  // The three collectives of one rank, owned: `world` over every rank,
  // `group` over its shard group, `replicas` over its replica set.
  HybridCollective(std::unique_ptr<Collective> world, std::unique_ptr<Collective> group,
                   std::unique_ptr<Collective> replicas);

  Collective* sharding_group() override { return &sharding_; }
  Collective* replica_set() override { return replicas_.get(); }

  int rank() const override { return world_->rank(); }
  int world_size() const override { return world_->world_size(); }
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override {
    return world_->AllReduce(tensors, op);
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllReduce(torch::Tensor tensor, ReduceOp op) override {
    return world_->StartAllReduce(std::move(tensor), op);
  }
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override {
    return world_->Broadcast(tensors, root);
  }
  absl::Status BroadcastTo(std::vector<torch::Tensor>& tensors, int root, const std::vector<int>& receivers) override {
    return world_->BroadcastTo(tensors, root, receivers);
  }
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override {
    return world_->AllGather(input, outputs);
  }
  absl::Status Barrier() override { return world_->Barrier(); }
  void Abort(absl::string_view reason) override;
  CollectiveProgress Progress() const override;
  absl::Status ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                             ReduceOp op) override {
    return world_->ReduceScatter(std::move(input), counts, std::move(output), op);
  }
  absl::Status AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) override {
    return world_->AllGatherV(std::move(input), counts, std::move(output));
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartReduceScatter(torch::Tensor input, std::vector<int64_t> counts,
                                                                     torch::Tensor output, ReduceOp op) override {
    return world_->StartReduceScatter(std::move(input), std::move(counts), std::move(output), op);
  }
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllGatherV(torch::Tensor input, std::vector<int64_t> counts,
                                                                  torch::Tensor output) override {
    return world_->StartAllGatherV(std::move(input), std::move(counts), std::move(output));
  }

 private:
  std::unique_ptr<Collective> world_;
  std::unique_ptr<Collective> group_;
  std::unique_ptr<Collective> replicas_;
  ShardGroupCollective sharding_;
};

// Several collectives' progress as one: the completed waits summed; waiting
// if a caller waits in any, stalled as the longest; aborted if any is.
CollectiveProgress CombinedProgress(const std::vector<const Collective*>& collectives);

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_HYBRID_COLLECTIVE_H_
