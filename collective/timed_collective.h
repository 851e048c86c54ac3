// A Collective that forwards every operation to another and counts the time
// its caller spends blocked in them: in a synchronous call, in starting an
// asynchronous one, and in waiting for its work. A rank's compute time is
// then its wall time less this: the time a fast rank spends waiting for a
// slow one in all-reduce is collective time, not compute (the straggler
// view: Trainer::ChunkTiming).
//
// Thread-safety: as the wrapped collective; the counter may be read from
// any thread.
#ifndef TRAINYARD_COLLECTIVE_TIMED_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_TIMED_COLLECTIVE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "collective/collective.h"

namespace trainyard {

class TimedCollective : public Collective {
 public:
  // `inner` is not owned and must outlive this.
  explicit TimedCollective(Collective* inner) : inner_(inner) {}
  // Counting into `shared`'s counter: the time blocked in either is one
  // figure (a job's collective and its shard group under HSDP).
  TimedCollective(Collective* inner, const TimedCollective& shared) : inner_(inner), blocked_ns_(shared.blocked_ns_) {}

  // Seconds blocked in this collective's operations since it was made.
  double blocked_seconds() const { return static_cast<double>(blocked_ns_->load()) * 1e-9; }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllReduce(torch::Tensor tensor, ReduceOp op) override;
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  absl::Status BroadcastTo(std::vector<torch::Tensor>& tensors, int root, const std::vector<int>& receivers) override;
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override;
  absl::Status Barrier() override;
  void Abort(absl::string_view reason) override { inner_->Abort(reason); }
  CollectiveProgress Progress() const override { return inner_->Progress(); }
  absl::Status ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                             ReduceOp op) override;
  absl::Status AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) override;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartReduceScatter(torch::Tensor input, std::vector<int64_t> counts,
                                                                     torch::Tensor output, ReduceOp op) override;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> StartAllGatherV(torch::Tensor input, std::vector<int64_t> counts,
                                                                  torch::Tensor output) override;

 private:
  // Shared with the works handed out, which may outlive this.
  using Counter = std::shared_ptr<std::atomic<int64_t>>;
  absl::StatusOr<std::unique_ptr<CollectiveWork>> Timed(absl::StatusOr<std::unique_ptr<CollectiveWork>> work) const;

  Collective* const inner_;
  Counter blocked_ns_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_TIMED_COLLECTIVE_H_
