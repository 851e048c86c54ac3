#include "collective/timed_collective.h"

#include <chrono>
#include <utility>

namespace trainyard {
namespace {

// Adds the time from its making to its end to a counter.
class Stopwatch {
 public:
  explicit Stopwatch(std::atomic<int64_t>* counter) : counter_(counter), start_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    counter_->fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  std::atomic<int64_t>* counter_;
  std::chrono::steady_clock::time_point start_;
};

// A work whose Wait counts as blocked time.
class TimedWork : public CollectiveWork {
 public:
  TimedWork(std::unique_ptr<CollectiveWork> inner, std::shared_ptr<std::atomic<int64_t>> counter)
      : inner_(std::move(inner)), counter_(std::move(counter)) {}
  absl::Status Wait() override {
    Stopwatch watch(counter_.get());
    return inner_->Wait();
  }

 private:
  std::unique_ptr<CollectiveWork> inner_;
  std::shared_ptr<std::atomic<int64_t>> counter_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CollectiveWork>> TimedCollective::Timed(
    absl::StatusOr<std::unique_ptr<CollectiveWork>> work) const {
  if (!work.ok()) return work.status();
  return std::unique_ptr<CollectiveWork>(new TimedWork(std::move(*work), blocked_ns_));
}

absl::Status TimedCollective::AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) {
  Stopwatch watch(blocked_ns_.get());
  return inner_->AllReduce(tensors, op);
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> TimedCollective::StartAllReduce(torch::Tensor tensor, ReduceOp op) {
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work;
  {
    Stopwatch watch(blocked_ns_.get());
    work = inner_->StartAllReduce(std::move(tensor), op);
  }
  return Timed(std::move(work));
}

absl::Status TimedCollective::Broadcast(std::vector<torch::Tensor>& tensors, int root) {
  Stopwatch watch(blocked_ns_.get());
  return inner_->Broadcast(tensors, root);
}

absl::Status TimedCollective::BroadcastTo(std::vector<torch::Tensor>& tensors, int root,
                                          const std::vector<int>& receivers) {
  Stopwatch watch(blocked_ns_.get());
  return inner_->BroadcastTo(tensors, root, receivers);
}

absl::Status TimedCollective::AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) {
  Stopwatch watch(blocked_ns_.get());
  return inner_->AllGather(input, outputs);
}

absl::Status TimedCollective::Barrier() {
  Stopwatch watch(blocked_ns_.get());
  return inner_->Barrier();
}

absl::Status TimedCollective::ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts,
                                            torch::Tensor output, ReduceOp op) {
  Stopwatch watch(blocked_ns_.get());
  return inner_->ReduceScatter(std::move(input), counts, std::move(output), op);
}

absl::Status TimedCollective::AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts,
                                         torch::Tensor output) {
  Stopwatch watch(blocked_ns_.get());
  return inner_->AllGatherV(std::move(input), counts, std::move(output));
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> TimedCollective::StartReduceScatter(torch::Tensor input,
                                                                                    std::vector<int64_t> counts,
                                                                                    torch::Tensor output, ReduceOp op) {
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work;
  {
    Stopwatch watch(blocked_ns_.get());
    work = inner_->StartReduceScatter(std::move(input), std::move(counts), std::move(output), op);
  }
  return Timed(std::move(work));
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> TimedCollective::StartAllGatherV(torch::Tensor input,
                                                                                 std::vector<int64_t> counts,
                                                                                 torch::Tensor output) {
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work;
  {
    Stopwatch watch(blocked_ns_.get());
    work = inner_->StartAllGatherV(std::move(input), std::move(counts), std::move(output));
  }
  return Timed(std::move(work));
}

}  // namespace trainyard
