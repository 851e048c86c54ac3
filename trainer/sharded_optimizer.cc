#include "trainer/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace trainyard {

std::vector<size_t> ShardBoundaries(const NamedTensors& params, int world_size) {
  int64_t total = 0;
  for (const auto& [name, p] : params) total += p.numel();
  std::vector<size_t> bounds = {0};
  int64_t so_far = 0;
  size_t i = 0;
  for (int r = 0; r < world_size; ++r) {
    // Rank r takes parameters until its share of the elements is reached
    // (the last rank takes the rest).
    const int64_t goal = r == world_size - 1 ? total : total * (r + 1) / world_size;
    while (i < params.size() && (so_far < goal || r == world_size - 1)) {
      so_far += params[i].second.numel();
      ++i;
    }
    bounds.push_back(i);
  }
  return bounds;
}

namespace {

// Flat views of tensors, end to end: a range [offset, offset + n) of their
// concatenation read into or written from a flat tensor of n elements.
class FlatViews {
 public:
  void Add(torch::Tensor flat) {
    starts_.push_back(total_);
    total_ += flat.numel();
    views_.push_back(std::move(flat));
  }
  void Write(int64_t offset, const torch::Tensor& src) {
    Walk(offset, src.numel(), [&](torch::Tensor view, int64_t done) { view.copy_(src.narrow(0, done, view.numel())); });
  }
  void Read(int64_t offset, torch::Tensor dst) {
    Walk(offset, dst.numel(), [&](torch::Tensor view, int64_t done) { dst.narrow(0, done, view.numel()).copy_(view); });
  }

 private:
  // Calls f(part of a view, elements of the range before it) for each view
  // the range touches, in order.
  template <typename F>
  void Walk(int64_t offset, int64_t n, F f) {
    if (views_.empty() || n == 0) return;
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin() - 1;
    for (int64_t done = 0; done < n && i < views_.size(); ++i) {
      const int64_t at = offset + done - starts_[i];
      const int64_t take = std::min(views_[i].numel() - at, n - done);
      if (take <= 0) continue;
      f(views_[i].narrow(0, at, take), done);
      done += take;
    }
  }

  std::vector<torch::Tensor> views_;
  std::vector<int64_t> starts_;
  int64_t total_ = 0;
};

// Rank r's part of round k: elements [k * per_round, ...) of its flat
// shard of counts[r] elements, at most per_round of them.
std::vector<int64_t> RoundCounts(const std::vector<int64_t>& counts, int64_t round, int64_t per_round) {
  std::vector<int64_t> out;
  for (int64_t c : counts) out.push_back(std::clamp<int64_t>(c - round * per_round, 0, per_round));
  return out;
}

int64_t Rounds(const std::vector<int64_t>& counts, int64_t per_round) {
  const int64_t largest = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  return (largest + per_round - 1) / per_round;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(const OptimizerConfig& config,
                                                                           const NamedTensors& params,
                                                                           Collective* collective,
                                                                           int64_t round_elements) {
  if (round_elements < 1) return absl::InvalidArgumentError("sharded optimizer: round_elements must be positive");
  std::unique_ptr<ShardedOptimizer> s(new ShardedOptimizer);
  s->round_elements_ = round_elements;
  s->params_ = params;
  s->collective_ = collective;
  const int world = collective->world_size();
  s->bounds_ = ShardBoundaries(params, world);
  s->max_grad_norm_ = config.max_grad_norm();
  // The clipping needs every gradient: done here, not by the shards'.
  OptimizerConfig local = config;
  local.set_max_grad_norm(0);
  for (const auto& [name, p] : params) {
    if (p.scalar_type() != torch::kFloat) {
      return absl::InvalidArgumentError(
          absl::StrCat("sharded optimizer: parameter ", name, " is not float32 (master weights are)"));
    }
  }
  // Every rank's slot layout, from an optimizer over its shard (made one at
  // a time: at most this rank's and one other shard's state at once).
  for (int r = 0; r < world; ++r) {
    NamedTensors shard(params.begin() + static_cast<std::ptrdiff_t>(s->bounds_[r]),
                       params.begin() + static_cast<std::ptrdiff_t>(s->bounds_[r + 1]));
    int64_t count = 0;
    for (const auto& [name, p] : shard) count += p.numel();
    s->param_counts_.push_back(count);
    TY_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, CreateOptimizer(local, shard));
    std::vector<SlotLayout> layout;
    for (const auto& [name, t] : opt->State()) {
      if (name == "step") continue;
      if (t.scalar_type() != torch::kFloat) {
        return absl::InternalError(absl::StrCat("sharded optimizer: state ", name, " is not float32"));
      }
      layout.push_back({name, t.sizes().vec()});
    }
    s->slots_.push_back(std::move(layout));
    if (r == collective->rank()) s->local_ = std::move(opt);
  }
  s->local_rank_ = collective->rank();
  return s;
}

void ShardedOptimizer::Apply(const std::vector<torch::Tensor>& grads, double learning_rate) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> mine(grads.begin() + static_cast<std::ptrdiff_t>(shard_begin()),
                                        grads.begin() + static_cast<std::ptrdiff_t>(shard_end()));
  squares_.clear();
  apply_error_ = absl::OkStatus();
  if (max_grad_norm_ > 0 || squares_wanted_) {
    if (!ReduceSquares(grads)) return;
  }
  if (max_grad_norm_ > 0) {
    // ClipByGlobalNorm's arithmetic: the sum in parameter order.
    double sum = 0;
    for (double x : squares_) sum += x;
    const double norm = std::sqrt(sum);
    if (norm > max_grad_norm_) {
      for (const torch::Tensor& g : mine) g.mul_(max_grad_norm_ / norm);
    }
  }
  local_->Apply(mine, learning_rate);
  step_ = local_->step();
}

absl::Status ShardedOptimizer::MoveTo(Collective* next) {
  // (The previous collective may be gone: its place is in bounds_ and
  // local_rank_.)
  const int world = static_cast<int>(bounds_.size()) - 1;
  if (next->rank() != local_rank_ || next->world_size() != world) {
    return absl::FailedPreconditionError(absl::StrCat("sharded optimizer: moving from rank ", local_rank_, " of ",
                                                      world, " to rank ", next->rank(), " of ", next->world_size(),
                                                      " would move the shards; a regroup keeps every shard in place"));
  }
  collective_ = next;
  apply_error_ = absl::OkStatus();
  return absl::OkStatus();
}

bool ShardedOptimizer::ReduceSquares(const std::vector<torch::Tensor>& grads) {
  // Every parameter's squared norm: this rank's computed here, the others'
  // summed in from their owners (zeros elsewhere).
  torch::Tensor squares = torch::zeros({static_cast<int64_t>(params_.size())}, torch::kDouble);
  for (size_t i = shard_begin(); i < shard_end(); ++i) squares[static_cast<int64_t>(i)] = SquaredNorm(grads[i]);
  std::vector<torch::Tensor> all = {squares};
  apply_error_ = collective_->AllReduce(all, ReduceOp::kSum);
  if (!apply_error_.ok()) return false;
  const double* s = squares.data_ptr<double>();
  squares_.assign(s, s + squares.numel());
  return true;
}

absl::Status ShardedOptimizer::Synchronize() {
  torch::NoGradGuard no_grad;
  if (!apply_error_.ok()) return std::exchange(apply_error_, absl::OkStatus());
  if (params_.empty()) return absl::OkStatus();
  const int rank = collective_->rank(), world = collective_->world_size();
  const auto options = params_[0].second.options();
  // Every parameter as a flat view, in order; rank r's shard starts at
  // starts[r] of their concatenation.
  FlatViews all, own;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor flat = params_[i].second.view({-1});
    all.Add(flat);
    if (i >= shard_begin() && i < shard_end()) own.Add(flat);
  }
  std::vector<int64_t> starts = {0};
  for (int64_t c : param_counts_) starts.push_back(starts.back() + c);
  // In rounds of at most round_elements_ per rank: the extra memory is W
  // rounds' worth, not the model's.
  const int64_t rounds = Rounds(param_counts_, round_elements_);
  torch::Tensor send = torch::empty({round_elements_}, options);
  for (int64_t k = 0; k < rounds; ++k) {
    const std::vector<int64_t> counts = RoundCounts(param_counts_, k, round_elements_);
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    // This rank's part of the round, copied out of its parameters.
    torch::Tensor mine = send.narrow(0, 0, counts[rank]);
    own.Read(k * round_elements_, mine);
    if (!gathered_.defined() || gathered_.numel() < total) gathered_ = torch::empty({total}, options);
    torch::Tensor out = gathered_.narrow(0, 0, total);
    TY_RETURN_IF_ERROR(collective_->AllGatherV(mine, counts, out));
    int64_t offset = 0;
    for (int r = 0; r < world; ++r) {
      if (r != rank && counts[r] > 0) all.Write(starts[r] + k * round_elements_, out.narrow(0, offset, counts[r]));
      offset += counts[r];
    }
  }
  return absl::OkStatus();
}

std::map<std::string, torch::Tensor> ShardedOptimizer::State() const { return local_->State(); }

absl::Status ShardedOptimizer::LoadState(const std::map<std::string, torch::Tensor>& state) {
  TY_RETURN_IF_ERROR(local_->LoadState(state));
  step_ = local_->step();
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ShardedOptimizer::GatherState() {
  torch::NoGradGuard no_grad;
  const int rank = collective_->rank(), world = collective_->world_size();
  std::map<std::string, torch::Tensor> own = local_->State();
  const auto options = params_.empty() ? torch::TensorOptions().dtype(torch::kFloat) : params_[0].second.options();
  std::vector<int64_t> counts;
  for (const auto& layout : slots_) {
    int64_t n = 0;
    for (const SlotLayout& slot : layout) {
      int64_t e = 1;
      for (int64_t d : slot.shape) e *= d;
      n += e;
    }
    counts.push_back(n);
  }
  // This rank's slots end to end (the order of its layout).
  FlatViews mine_flat;
  for (const SlotLayout& slot : slots_[rank]) mine_flat.Add(own.at(slot.name).contiguous().view({-1}));
  // Rank 0 assembles every slot; the others pass theirs on, round by round.
  std::map<std::string, torch::Tensor> state;
  std::vector<FlatViews> targets(world);
  if (rank == 0) {
    for (int r = 0; r < world; ++r) {
      for (const SlotLayout& slot : slots_[r]) {
        torch::Tensor t = torch::empty(slot.shape, options);
        targets[r].Add(t.view({-1}));
        state[slot.name] = t;
      }
    }
  }
  const int64_t rounds = Rounds(counts, round_elements_);
  torch::Tensor send = torch::empty({round_elements_}, options);
  for (int64_t k = 0; k < rounds; ++k) {
    const std::vector<int64_t> part = RoundCounts(counts, k, round_elements_);
    int64_t total = 0;
    for (int64_t c : part) total += c;
    torch::Tensor mine = send.narrow(0, 0, part[rank]);
    mine_flat.Read(k * round_elements_, mine);
    torch::Tensor out = torch::empty({total}, options);
    TY_RETURN_IF_ERROR(collective_->AllGatherV(mine, part, out));
    if (rank != 0) continue;
    int64_t offset = 0;
    for (int r = 0; r < world; ++r) {
      if (part[r] > 0) targets[r].Write(k * round_elements_, out.narrow(0, offset, part[r]));
      offset += part[r];
    }
  }
  if (rank != 0) return own;
  state["step"] = torch::tensor(step_, torch::kLong);
  return state;
}

}  // namespace trainyard
