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

namespace {

// Parameter indices grouped into buckets, in reverse registration order
// (the last layers' gradients come first): a bucket ends where the dtype or
// the device changes or where the next parameter would take it past
// `bucket_bytes`.
std::vector<std::vector<int>> PlanBuckets(const std::vector<torch::Tensor>& params, int64_t bucket_bytes) {
  std::vector<std::vector<int>> plan;
  std::vector<int> members;
  int64_t bytes = 0;
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const torch::Tensor& p = params[i];
    if (!members.empty()) {
      const torch::Tensor& first = params[members[0]];
      if (p.scalar_type() != first.scalar_type() || p.device() != first.device() ||
          bytes + static_cast<int64_t>(p.nbytes()) > bucket_bytes) {
        plan.push_back(std::move(members));
        members.clear();
        bytes = 0;
      }
    }
    members.push_back(i);
    bytes += static_cast<int64_t>(p.nbytes());
  }
  if (!members.empty()) plan.push_back(std::move(members));
  return plan;
}

}  // namespace

GradientReducer::GradientReducer(std::vector<torch::Tensor> params, Collective* collective, int64_t bucket_bytes,
                                 std::vector<size_t> shard_bounds, bool keep_only_shard, int max_in_flight,
                                 ExactSum* exact)
    : params_(std::move(params)),
      collective_(collective),
      shard_bounds_(std::move(shard_bounds)),
      keep_only_shard_(keep_only_shard && !shard_bounds_.empty()),
      max_in_flight_(std::max(max_in_flight, 1)),
      exact_(exact) {
  const int n = static_cast<int>(params_.size());
  const int world = collective_->world_size();
  TORCH_CHECK(shard_bounds_.empty() || (static_cast<int>(shard_bounds_.size()) == world + 1 &&
                                        shard_bounds_.front() == 0 && shard_bounds_.back() == params_.size() &&
                                        std::is_sorted(shard_bounds_.begin(), shard_bounds_.end())),
              "gradient reducer: shard bounds do not cover the parameters");
  bucket_of_.assign(n, -1);
  ready_.assign(n, 0);
  views_.resize(n);
  for (std::vector<int>& members : PlanBuckets(params_, bucket_bytes)) AddBucket(std::move(members));
  for (int i = 0; i < n; ++i) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(this, i)));
    accumulators_.push_back(std::move(acc));
  }
  Reset();
}

int GradientReducer::Owner(int i) const {
  return static_cast<int>(std::upper_bound(shard_bounds_.begin(), shard_bounds_.end(), static_cast<size_t>(i)) -
                          shard_bounds_.begin()) -
         1;
}

void GradientReducer::AddBucket(std::vector<int> members) {
  Bucket b;
  const auto options = params_[members[0]].options().requires_grad(false);
  // Laid out in ascending order: each rank's members are contiguous, in
  // rank order, as a reduce-scatter cuts the buffer.
  b.layout = members;
  std::sort(b.layout.begin(), b.layout.end());
  int64_t numel = 0;
  for (int i : b.layout) {
    b.offsets.push_back(numel);
    numel += params_[i].numel();
  }
  if (!shard_bounds_.empty()) {
    b.counts.assign(collective_->world_size(), 0);
    for (int i : b.layout) b.counts[Owner(i)] += params_[i].numel();
    b.own_offset = ShardOffsets(b.counts)[collective_->rank()];
  }
  if (keep_only_shard_) {
    // Only the shard lives between passes; the grads stay undefined.
    b.owned = torch::zeros({b.counts[collective_->rank()]}, exact_ ? options.dtype(torch::kLong) : options);
    for (size_t k = 0; k < b.layout.size(); ++k) {
      const int i = b.layout[k];
      if (Owner(i) == collective_->rank()) {
        views_[i] = b.owned.narrow(0, b.offsets[k] - b.own_offset, params_[i].numel()).view(params_[i].sizes());
      }
      params_[i].mutable_grad() = torch::Tensor();
      bucket_of_[i] = static_cast<int>(buckets_.size());
    }
  } else if (exact_) {
    // The step's integer sums of the whole bucket; the grads stay undefined
    // (each pass's are added as its bucket starts, then dropped).
    b.owned = torch::zeros({numel}, options.dtype(torch::kLong));
    if (!shard_bounds_.empty()) b.received = b.owned.narrow(0, b.own_offset, b.counts[collective_->rank()]);
    for (size_t k = 0; k < b.layout.size(); ++k) {
      const int i = b.layout[k];
      views_[i] = b.owned.narrow(0, b.offsets[k], params_[i].numel()).view(params_[i].sizes());
      params_[i].mutable_grad() = torch::Tensor();
      bucket_of_[i] = static_cast<int>(buckets_.size());
    }
  } else {
    b.buffer = torch::zeros({numel}, options);
    // Reduce-scattered in place: this rank's run of the buffer is where
    // its parameters' grads are.
    if (!shard_bounds_.empty()) b.received = b.buffer.narrow(0, b.own_offset, b.counts[collective_->rank()]);
    for (size_t k = 0; k < b.layout.size(); ++k) {
      const int i = b.layout[k];
      torch::Tensor& p = params_[i];
      views_[i] = b.buffer.narrow(0, b.offsets[k], p.numel()).view(p.sizes());
      p.mutable_grad() = views_[i];
      bucket_of_[i] = static_cast<int>(buckets_.size());
    }
  }
  b.members = std::move(members);
  buckets_.push_back(std::move(b));
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
  discarding_ = false;
  next_bucket_ = 0;
  next_complete_ = 0;
  start_error_ = absl::OkStatus();
  complete_error_ = absl::OkStatus();
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.members.size());
    b.work.reset();
    b.started = false;
  }
}

void GradientReducer::AttachViews() {
  if (keep_only_shard_ || exact_) return;  // the grads are autograd's until their bucket starts
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
  peak_buckets_ = 0;
  waiting_ = 0;
  peak_waiting_ = 0;
  armed_ = true;
}

std::vector<torch::Tensor> GradientReducer::ShardGradients() const {
  std::vector<torch::Tensor> out(params_.size());
  if (!keep_only_shard_ && !exact_) return out;
  const int rank = collective_->rank();
  const bool all = shard_bounds_.empty();  // exact all-reduce: every parameter's
  for (size_t i = all ? 0 : shard_bounds_[rank]; i < (all ? params_.size() : shard_bounds_[rank + 1]); ++i) {
    out[i] = exact_ ? exact_->TensorToFloat(i, views_[i]).to(params_[i].device(), params_[i].scalar_type()) : views_[i];
  }
  return out;
}

void GradientReducer::ArmToDiscard() {
  Reset();
  discarding_ = keep_only_shard_ || exact_;
}

void GradientReducer::SetPassReduces(bool reduces) { pass_reduces_ = reduces; }

void GradientReducer::MarkReady(int param) {
  if (discarding_) {
    params_[param].mutable_grad() = torch::Tensor();
    return;
  }
  if (!armed_ || ready_[param]) return;
  ready_[param] = 1;
  waiting_ += params_[param].numel();
  Bucket& b = buckets_[bucket_of_[param]];
  if (--b.pending == 0) {
    const int before = next_bucket_;
    StartReadyBuckets();
    started_during_backward_ += next_bucket_ - before;
  }
  peak_waiting_ = std::max(peak_waiting_, waiting_);
}

void GradientReducer::StartReadyBuckets() {
  while (next_bucket_ < static_cast<int>(buckets_.size()) && buckets_[next_bucket_].pending == 0) {
    StartBucket(buckets_[next_bucket_++]);
  }
}

void GradientReducer::StartBucket(Bucket& bucket) {
  bucket.started = true;
  for (int i : bucket.members) {
    if (ready_[i]) waiting_ -= params_[i].numel();
  }
  if (!start_error_.ok()) return;  // the step fails anyway: do not start more
  if (keep_only_shard_) {
    while (next_bucket_ - 1 - next_complete_ >= max_in_flight_) CompleteOldest();
    // The members' gradients into a bucket of their own, freed as they go.
    int64_t numel = 0;
    for (int i : bucket.layout) numel += params_[i].numel();
    const auto options = params_[bucket.layout[0]].options().requires_grad(false);
    // Exact: the integers of the gradients (zeros, then each added).
    bucket.buffer = exact_ ? torch::zeros({numel}, options.dtype(torch::kLong)) : torch::empty({numel}, options);
    for (size_t k = 0; k < bucket.layout.size(); ++k) {
      torch::Tensor& p = params_[bucket.layout[k]];
      torch::Tensor slot = bucket.buffer.narrow(0, bucket.offsets[k], p.numel());
      if (exact_ && p.grad().defined()) {
        absl::Status added = exact_->AddTensor(static_cast<size_t>(bucket.layout[k]), p.grad(), slot);
        if (!added.ok() && start_error_.ok()) start_error_ = added;
      } else if (p.grad().defined()) {
        slot.copy_(p.grad().reshape({-1}));
      } else if (!exact_) {
        slot.zero_();  // no gradient in this pass: zeros
      }
      p.mutable_grad() = torch::Tensor();
    }
    if (!start_error_.ok()) return;
    // In place; CompleteOldest moves the sums into the shard.
    bucket.received = bucket.buffer.narrow(0, bucket.own_offset, bucket.owned.numel());
    peak_buckets_ = std::max(peak_buckets_, next_bucket_ - next_complete_);
  } else if (exact_) {
    // This pass's gradients added to the step's integer sums.
    for (size_t k = 0; k < bucket.layout.size(); ++k) {
      const int i = bucket.layout[k];
      torch::Tensor& p = params_[i];
      if (p.grad().defined() && start_error_.ok()) {
        absl::Status added = exact_->AddTensor(static_cast<size_t>(i), p.grad(), views_[i]);
        if (!added.ok()) start_error_ = added;
      }
      p.mutable_grad() = torch::Tensor();
    }
    if (!start_error_.ok() || !pass_reduces_) return;
    bucket.buffer = bucket.owned;  // reduced in place
  }
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

void GradientReducer::CompleteOldest() {
  Bucket& b = buckets_[next_complete_++];
  if (b.work != nullptr) {
    absl::Status s = b.work->Wait();
    b.work.reset();
    if (complete_error_.ok()) complete_error_ = s;
  }
  if (complete_error_.ok() && start_error_.ok()) {
    if (shard_empty_) {
      b.owned.copy_(b.received);  // the first pass since ZeroGrads
    } else {
      b.owned.add_(b.received);
    }
  }
  b.buffer = torch::Tensor();
  b.received = torch::Tensor();
}

absl::Status GradientReducer::Finish() {
  armed_ = false;
  if (keep_only_shard_) {
    while (next_bucket_ < static_cast<int>(buckets_.size())) StartBucket(buckets_[next_bucket_++]);
    while (next_complete_ < static_cast<int>(buckets_.size())) CompleteOldest();
    absl::Status status = start_error_.ok() ? complete_error_ : start_error_;
    shard_empty_ = false;
    Reset();
    return status;
  }
  AttachViews();
  while (next_bucket_ < static_cast<int>(buckets_.size())) StartBucket(buckets_[next_bucket_++]);
  absl::Status status = start_error_;
  for (Bucket& b : buckets_) {
    if (b.work == nullptr) continue;
    absl::Status s = b.work->Wait();
    b.work.reset();
    if (status.ok()) status = s;
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
  if (keep_only_shard_) {
    for (Bucket& b : buckets_) {
      b.owned.zero_();
      b.buffer = torch::Tensor();
      b.received = torch::Tensor();
    }
    for (torch::Tensor& p : params_) p.mutable_grad() = torch::Tensor();
    shard_empty_ = true;
    return;
  }
  if (exact_) {
    for (Bucket& b : buckets_) {
      b.owned.zero_();
      b.buffer = torch::Tensor();
    }
    for (torch::Tensor& p : params_) p.mutable_grad() = torch::Tensor();
    return;
  }
  AttachViews();
  for (Bucket& b : buckets_) b.buffer.zero_();
}

}  // namespace trainyard
