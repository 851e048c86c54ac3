// A Collective for tests: the ranks of a FakeGroup are threads of one
// process that meet in memory (no sockets) and compute real reductions.
// Tests can make a rank's n-th operation fail with a chosen status, or be
// delayed, to exercise the callers' error paths; a rank that never arrives
// makes the others return kDeadlineExceeded after the group's timeout, or
// kAborted as soon as their collective is aborted.
//
// Thread-safety: one thread per rank; the group is shared.
#ifndef TRAINYARD_COLLECTIVE_FAKE_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_FAKE_COLLECTIVE_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective.h"

namespace trainyard {

class FakeGroup {
 public:
  FakeGroup(int world_size, absl::Duration timeout) : world_size_(world_size), timeout_(timeout) {}

  // The `op_index`-th operation (0-based, counted per rank) of `rank`
  // returns `status` without meeting the others.
  void FailOperation(int rank, int op_index, absl::Status status);
  // The `op_index`-th operation of `rank` first sleeps `delay`.
  void DelayOperation(int rank, int op_index, absl::Duration delay);

  int world_size() const { return world_size_; }

 private:
  friend class FakeCollective;
  // Deposits `rank`'s contribution to operation `op_index` and waits for
  // every rank's; returns all contributions in rank order.
  absl::StatusOr<std::vector<std::vector<torch::Tensor>>> Meet(int rank, int64_t op_index,
                                                               std::vector<torch::Tensor> mine, CollectiveWatch* watch);
  // Fault injection for (rank, op_index): a status to return, or a delay.
  absl::Status Inject(int rank, int64_t op_index);

  const int world_size_;
  const absl::Duration timeout_;
  std::mutex mu_;
  std::condition_variable arrived_;
  // op index -> contributions by rank (missing = not arrived).
  std::map<int64_t, std::map<int, std::vector<torch::Tensor>>> ops_;
  std::map<int64_t, int> collected_;  // op index -> ranks that have read
  std::map<std::pair<int, int64_t>, absl::Status> failures_;
  std::map<std::pair<int, int64_t>, absl::Duration> delays_;
};

class FakeCollective : public Collective {
 public:
  FakeCollective(std::shared_ptr<FakeGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override;
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override;
  absl::Status Barrier() override;
  void Abort(absl::string_view reason) override { watch_.Abort(reason); }
  CollectiveProgress Progress() const override { return watch_.Progress(); }
  int64_t operations() const { return next_op_; }

 private:
  CollectiveWatch watch_;
  std::shared_ptr<FakeGroup> group_;
  int rank_;
  int64_t next_op_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_FAKE_COLLECTIVE_H_
