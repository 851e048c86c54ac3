#include "trainer/gradient_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <utility>

namespace trainyard {

// Runs after autograd has accumulated a parameter's gradient.
class GradientReducer::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradientReducer* reducer, int param) : reducer_(reducer), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    reducer_->MarkReady(param_);
    return outputs;
  }

 private:
  GradientReducer* reducer_;
  int param_;
};

GradientReducer::GradientReducer(std::vector<torch::Tensor> params, Collective* collective, int64_t bucket_bytes,
                                 std::vector<size_t> shard_bounds)
    : params_(std::move(params)), collective_(collective), shard_bounds_(std::move(shard_bounds)) {
  const int n = static_cast<int>(params_.size());
  const int world = collective_->world_size();
  TORCH_CHECK(shard_bounds_.empty() || (static_cast<int>(shard_bounds_.size()) == world + 1 &&
                                        shard_bounds_.front() == 0 && shard_bounds_.back() == params_.size() &&
                                        std::is_sorted(shard_bounds_.begin(), shard_bounds_.end())),
              "gradient reducer: shard bounds do not cover the parameters");
  // The rank whose shard holds parameter i.
  auto owner = [&](int i) {
    return static_cast<int>(std::upper_bound(shard_bounds_.begin(), shard_bounds_.end(), static_cast<size_t>(i)) -
                            shard_bounds_.begin()) -
           1;
  };
  bucket_of_.assign(n, -1);
  ready_.assign(n, 0);
  // Reverse registration order: the last layers' gradients come first.
  std::vector<int> members;
  int64_t bytes = 0;
  views_.resize(n);
  auto close = [&] {
    if (members.empty()) return;
    Bucket b;
    int64_t numel = 0;
    for (int i : members) numel += params_[i].numel();
    b.buffer = torch::zeros({numel}, params_[members[0]].options().requires_grad(false));
    // Laid out in ascending order: each rank's members are contiguous, in
    // rank order, as a reduce-scatter cuts the buffer.
    std::vector<int> layout = members;
    std::sort(layout.begin(), layout.end());
    if (!shard_bounds_.empty()) {
      b.counts.assign(world, 0);
      for (int i : layout) b.counts[owner(i)] += params_[i].numel();
      b.own_offset = ShardOffsets(b.counts)[collective_->rank()];
      b.received = torch::empty({b.counts[collective_->rank()]}, b.buffer.options());
    }
    int64_t offset = 0;
    for (int i : layout) {
      torch::Tensor& p = params_[i];
      views_[i] = b.buffer.narrow(0, offset, p.numel()).view(p.sizes());
      p.mutable_grad() = views_[i];
      offset += p.numel();
      bucket_of_[i] = static_cast<int>(buckets_.size());
    }
    b.members = std::move(members);
    members.clear();
    bytes = 0;
    buckets_.push_back(std::move(b));
  };
  for (int i = n - 1; i >= 0; --i) {
    const torch::Tensor& p = params_[i];
    if (!members.empty()) {
      const torch::Tensor& first = params_[members[0]];
      if (p.scalar_type() != first.scalar_type() || p.device() != first.device() ||
          bytes + static_cast<int64_t>(p.nbytes()) > bucket_bytes) {
        close();
      }
    }
    members.push_back(i);
    bytes += static_cast<int64_t>(p.nbytes());
  }
  close();
  for (int i = 0; i < n; ++i) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(this, i)));
    accumulators_.push_back(std::move(acc));
  }
  Reset();
}

GradientReducer::~GradientReducer() {
  Abandon();
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

std::vector<std::vector<int>> GradientReducer::bucket_members() const {
  std::vector<std::vector<int>> out;
  for (const Bucket& b : buckets_) out.push_back(b.members);
  return out;
}

void GradientReducer::Reset() {
  armed_ = false;
  next_bucket_ = 0;
  start_error_ = absl::OkStatus();
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.members.size());
    b.work.reset();
    b.started = false;
  }
}

void GradientReducer::AttachViews() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& view = views_[i];
    const torch::Tensor& grad = params_[i].grad();
    if (grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes()) continue;
    // Someone replaced or cleared the gradient: keep its value, in place.
    if (grad.defined()) {
      view.copy_(grad);
    } else {
      view.zero_();
    }
    params_[i].mutable_grad() = view;
  }
}

void GradientReducer::Arm() {
  Reset();
  AttachViews();
  started_during_backward_ = 0;
  armed_ = true;
}

void GradientReducer::MarkReady(int param) {
  if (!armed_ || ready_[param]) return;
  ready_[param] = 1;
  Bucket& b = buckets_[bucket_of_[param]];
  if (--b.pending == 0) {
    const int before = next_bucket_;
    StartReadyBuckets();
    started_during_backward_ += next_bucket_ - before;
  }
}

void GradientReducer::StartReadyBuckets() {
  while (next_bucket_ < static_cast<int>(buckets_.size()) && buckets_[next_bucket_].pending == 0) {
    StartBucket(buckets_[next_bucket_++]);
  }
}

void GradientReducer::StartBucket(Bucket& bucket) {
  bucket.started = true;
  if (!start_error_.ok()) return;  // the step fails anyway: do not start more
  absl::StatusOr<std::unique_ptr<CollectiveWork>> work =
      shard_bounds_.empty()
          ? collective_->StartAllReduce(bucket.buffer, ReduceOp::kSum)
          : collective_->StartReduceScatter(bucket.buffer, bucket.counts, bucket.received, ReduceOp::kSum);
  if (!work.ok()) {
    start_error_ = work.status();
    return;
  }
  bucket.work = std::move(*work);
}

absl::Status GradientReducer::Finish() {
  armed_ = false;
  AttachViews();
  while (next_bucket_ < static_cast<int>(buckets_.size())) StartBucket(buckets_[next_bucket_++]);
  absl::Status status = start_error_;
  for (Bucket& b : buckets_) {
    if (b.work == nullptr) continue;
    absl::Status s = b.work->Wait();
    b.work.reset();
    if (status.ok()) status = s;
  }
  if (status.ok() && !shard_bounds_.empty()) {
    for (Bucket& b : buckets_) b.buffer.narrow(0, b.own_offset, b.received.numel()).copy_(b.received);
  }
  Reset();
  return status;
}

void GradientReducer::Abandon() {
  armed_ = false;
  for (Bucket& b : buckets_) {
    if (b.work != nullptr) b.work->Wait().IgnoreError();
  }
  Reset();
  ZeroGrads();
}

void GradientReducer::ZeroGrads() {
  AttachViews();
  for (Bucket& b : buckets_) b.buffer.zero_();
}

}  // namespace trainyard
