#include "collective/fake_collective.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace trainyard {

void FakeGroup::FailOperation(int rank, int op_index, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_[{rank, op_index}] = std::move(status);
}

void FakeGroup::DelayOperation(int rank, int op_index, absl::Duration delay) {
  std::lock_guard<std::mutex> lock(mu_);
  delays_[{rank, op_index}] = delay;
}

absl::Status FakeGroup::Inject(int rank, int64_t op_index) {
  absl::Duration delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto f = failures_.find({rank, op_index});
    if (f != failures_.end()) return f->second;
    auto d = delays_.find({rank, op_index});
    if (d != delays_.end()) delay = d->second;
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<torch::Tensor>>> FakeGroup::Meet(int rank, int64_t op_index,
                                                                        std::vector<torch::Tensor> mine,
                                                                        CollectiveWatch* watch) {
  CollectiveWatch::Waiting waiting(watch);
  std::unique_lock<std::mutex> lock(mu_);
  ops_[op_index][rank] = std::move(mine);
  arrived_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout_);
  const auto poll = absl::ToChronoMilliseconds(CollectiveWatch::kAbortPollInterval);
  while (static_cast<int>(ops_[op_index].size()) < world_size_) {
    if (watch->aborted()) return watch->AbortedError(absl::StrCat("fake collective operation ", op_index));
    arrived_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + poll));
    if (std::chrono::steady_clock::now() >= deadline && static_cast<int>(ops_[op_index].size()) < world_size_) {
      return absl::DeadlineExceededError(absl::StrCat("fake collective operation ", op_index, ": only ",
                                                      ops_[op_index].size(), " of ", world_size_,
                                                      " ranks arrived within ", absl::FormatDuration(timeout_)));
    }
  }
  std::vector<std::vector<torch::Tensor>> all;
  for (auto& [r, tensors] : ops_[op_index]) all.push_back(tensors);
  if (++collected_[op_index] == world_size_) {
    ops_.erase(op_index);
    collected_.erase(op_index);
  }
  return all;
}

absl::Status FakeCollective::AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) {
  const int64_t index = next_op_++;
  if (absl::Status s = group_->Inject(rank_, index); !s.ok()) return s;
  std::vector<torch::Tensor> mine;
  for (const auto& t : tensors) mine.push_back(t.clone());
  auto all = group_->Meet(rank_, index, std::move(mine), &watch_);
  if (!all.ok()) return all.status();
  for (size_t i = 0; i < tensors.size(); ++i) {
    torch::Tensor acc = (*all)[0][i].clone();
    for (size_t r = 1; r < all->size(); ++r) {
      const torch::Tensor& x = (*all)[r][i];
      acc = op == ReduceOp::kSum ? acc + x : op == ReduceOp::kMax ? torch::maximum(acc, x) : torch::minimum(acc, x);
    }
    tensors[i].copy_(acc);
  }
  return absl::OkStatus();
}

absl::Status FakeCollective::Broadcast(std::vector<torch::Tensor>& tensors, int root) {
  if (root < 0 || root >= world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " out of range"));
  }
  const int64_t index = next_op_++;
  if (absl::Status s = group_->Inject(rank_, index); !s.ok()) return s;
  std::vector<torch::Tensor> mine;
  for (const auto& t : tensors) mine.push_back(t.clone());
  auto all = group_->Meet(rank_, index, std::move(mine), &watch_);
  if (!all.ok()) return all.status();
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_((*all)[root][i]);
  return absl::OkStatus();
}

absl::Status FakeCollective::AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) {
  const int64_t index = next_op_++;
  if (absl::Status s = group_->Inject(rank_, index); !s.ok()) return s;
  auto all = group_->Meet(rank_, index, {input.clone()}, &watch_);
  if (!all.ok()) return all.status();
  outputs->clear();
  for (auto& v : *all) outputs->push_back(v[0]);
  return absl::OkStatus();
}

absl::Status FakeCollective::Barrier() {
  const int64_t index = next_op_++;
  if (absl::Status s = group_->Inject(rank_, index); !s.ok()) return s;
  return group_->Meet(rank_, index, {}, &watch_).status();
}

}  // namespace trainyard
