#include "trainer/sharded_optimizer.h"

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

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(const OptimizerConfig& config,
                                                                           const NamedTensors& params,
                                                                           Collective* collective) {
  std::unique_ptr<ShardedOptimizer> s(new ShardedOptimizer);
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
  return s;
}

void ShardedOptimizer::Apply(const std::vector<torch::Tensor>& grads, double learning_rate) {
  torch::NoGradGuard no_grad;
  if (max_grad_norm_ > 0) ClipByGlobalNorm(grads, max_grad_norm_);
  const std::vector<torch::Tensor> mine(grads.begin() + static_cast<std::ptrdiff_t>(shard_begin()),
                                        grads.begin() + static_cast<std::ptrdiff_t>(shard_end()));
  local_->Apply(mine, learning_rate);
  step_ = local_->step();
}

absl::Status ShardedOptimizer::Synchronize() {
  torch::NoGradGuard no_grad;
  if (params_.empty()) return absl::OkStatus();
  const auto options = params_[0].second.options();
  std::vector<torch::Tensor> flat;
  for (size_t i = shard_begin(); i < shard_end(); ++i) flat.push_back(params_[i].second.reshape({-1}));
  torch::Tensor mine = flat.empty() ? torch::empty({0}, options) : torch::cat(flat);
  int64_t total = 0;
  for (int64_t c : param_counts_) total += c;
  if (!gathered_.defined() || gathered_.numel() != total) gathered_ = torch::empty({total}, options);
  TY_RETURN_IF_ERROR(collective_->AllGatherV(mine, param_counts_, gathered_));
  int64_t offset = 0;
  for (auto& [name, p] : params_) {
    const int64_t n = p.numel();
    p.copy_(gathered_.narrow(0, offset, n).view(p.sizes()));
    offset += n;
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
  const int rank = collective_->rank();
  std::map<std::string, torch::Tensor> own = local_->State();
  const auto options = params_.empty() ? torch::TensorOptions().dtype(torch::kFloat) : params_[0].second.options();
  std::vector<torch::Tensor> flat;
  for (const SlotLayout& slot : slots_[rank]) flat.push_back(own.at(slot.name).reshape({-1}).to(options));
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
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  torch::Tensor mine = flat.empty() ? torch::empty({0}, options) : torch::cat(flat);
  torch::Tensor all = torch::empty({total}, options);
  TY_RETURN_IF_ERROR(collective_->AllGatherV(mine, counts, all));
  std::map<std::string, torch::Tensor> state;
  int64_t offset = 0;
  for (const auto& layout : slots_) {
    for (const SlotLayout& slot : layout) {
      int64_t e = 1;
      for (int64_t d : slot.shape) e *= d;
      state[slot.name] = all.narrow(0, offset, e).view(slot.shape).clone();
      offset += e;
    }
  }
  state["step"] = torch::tensor(step_, torch::kLong);
  return state;
}

}  // namespace trainyard
