#include "collective/hybrid_collective.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

// The group's reduce-scatter, then (when waited for) the shard's all-reduce
// over the replica set.
class ThenAllReduce : public CollectiveWork {
 public:
  ThenAllReduce(std::unique_ptr<CollectiveWork> first, Collective* replicas, torch::Tensor output, ReduceOp op)
      : first_(std::move(first)), replicas_(replicas), output_(std::move(output)), op_(op) {}
  absl::Status Wait() override {
    if (absl::Status s = first_->Wait(); !s.ok()) return s;
    std::vector<torch::Tensor> shard = {output_};
    return replicas_->AllReduce(shard, op_);
  }

 private:
  std::unique_ptr<CollectiveWork> first_;
  Collective* replicas_;
  torch::Tensor output_;
  ReduceOp op_;
};

}  // namespace

absl::StatusOr<HybridPlace> PlaceInHybrid(int rank, int world_size, int group_size) {
  if (group_size < 1 || world_size < 1 || world_size % group_size != 0 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("shard groups of ", group_size, " ranks for rank ", rank, " of ",
                                                   world_size, ": the group size must divide the world size"));
  }
  HybridPlace p;
  p.group = rank / group_size;
  p.group_rank = rank % group_size;
  p.replica_rank = p.group;
  p.replica_set = p.group_rank;
  return p;
}

void ShardGroupCollective::Abort(absl::string_view reason) {
  group_->Abort(reason);
  replicas_->Abort(reason);
}

CollectiveProgress ShardGroupCollective::Progress() const { return CombinedProgress({group_, replicas_}); }

absl::Status ShardGroupCollective::ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts,
                                                 torch::Tensor output, ReduceOp op) {
  if (absl::Status s = group_->ReduceScatter(std::move(input), counts, output, op); !s.ok()) return s;
  std::vector<torch::Tensor> shard = {std::move(output)};
  return replicas_->AllReduce(shard, op);
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> ShardGroupCollective::StartReduceScatter(torch::Tensor input,
                                                                                         std::vector<int64_t> counts,
                                                                                         torch::Tensor output,
                                                                                         ReduceOp op) {
  absl::StatusOr<std::unique_ptr<CollectiveWork>> first =
      group_->StartReduceScatter(std::move(input), std::move(counts), output, op);
  if (!first.ok()) return first.status();
  return std::unique_ptr<CollectiveWork>(new ThenAllReduce(std::move(*first), replicas_, std::move(output), op));
}

HybridCollective::HybridCollective(std::unique_ptr<Collective> world, std::unique_ptr<Collective> group,
                                   std::unique_ptr<Collective> replicas)
    : world_(std::move(world)),
      group_(std::move(group)),
      replicas_(std::move(replicas)),
      sharding_(group_.get(), replicas_.get()) {}

void HybridCollective::Abort(absl::string_view reason) {
  world_->Abort(reason);
  sharding_.Abort(reason);
}

CollectiveProgress HybridCollective::Progress() const {
  return CombinedProgress({world_.get(), group_.get(), replicas_.get()});
}

CollectiveProgress CombinedProgress(const std::vector<const Collective*>& collectives) {
  CollectiveProgress out;
  for (const Collective* c : collectives) {
    const CollectiveProgress p = c->Progress();
    out.completed += p.completed;
    out.aborted = out.aborted || p.aborted;
    if (p.waiting && (!out.waiting || p.stalled > out.stalled)) {
      out.waiting = true;
      out.stalled = p.stalled;
    }
  }
  return out;
}

}  // namespace trainyard
