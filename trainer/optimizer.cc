#include "trainer/optimizer.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "spec/jobspec_validator.h"
#include "trainer/update_kernels.h"

namespace trainyard {
namespace {

torch::Tensor Rms(const torch::Tensor& t) { return t.pow(2).mean().sqrt(); }

// A state slot of one parameter.
struct Slot {
  std::string name;
  torch::Tensor* tensor;
};

class OptimizerBase : public Optimizer {
 public:
  explicit OptimizerBase(const NamedTensors& params, double max_grad_norm)
      : params_(params), max_grad_norm_(max_grad_norm) {}

  void Apply(const std::vector<torch::Tensor>& grads, double learning_rate) override {
    torch::NoGradGuard no_grad;
    if (max_grad_norm_ > 0) ClipByGlobalNorm(grads, max_grad_norm_);
    if (!ApplyAll(grads, learning_rate)) {
      for (size_t i = 0; i < params_.size(); ++i) {
        Update(i, params_[i].second, grads[i].to(torch::kFloat), learning_rate);
      }
    }
    ++step_;
  }

  std::map<std::string, torch::Tensor> State() const override {
    std::map<std::string, torch::Tensor> state;
    for (const Slot& slot : const_cast<OptimizerBase*>(this)->Slots()) {
      state[slot.name] = *slot.tensor;
    }
    state["step"] = torch::tensor(step_, torch::kLong);
    return state;
  }

  absl::Status LoadState(const std::map<std::string, torch::Tensor>& state) override {
    auto step = state.find("step");
    if (step == state.end()) return absl::InvalidArgumentError("optimizer state: \"step\" is missing");
    std::vector<Slot> slots = Slots();
    for (const Slot& slot : slots) {
      auto it = state.find(slot.name);
      if (it == state.end()) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer state: \"", slot.name, "\" is missing"));
      }
      if (it->second.sizes() != slot.tensor->sizes()) {
        return absl::InvalidArgumentError(absl::StrCat("optimizer state: \"", slot.name, "\" has the wrong shape"));
      }
    }
    torch::NoGradGuard no_grad;
    for (const Slot& slot : slots) slot.tensor->copy_(state.at(slot.name));
    step_ = step->second.item<int64_t>();
    return absl::OkStatus();
  }

 protected:
  virtual void Update(size_t i, torch::Tensor& param, const torch::Tensor& grad, double lr) = 0;
  // Updates every parameter at once where a subclass can (true), else the
  // per-parameter Update runs.
  virtual bool ApplyAll(const std::vector<torch::Tensor>& grads, double lr) {
    (void)grads;
    (void)lr;
    return false;
  }
  virtual std::vector<Slot> Slots() = 0;

  NamedTensors params_;
  double max_grad_norm_;
};

class AdafactorOptimizer : public OptimizerBase {
  // A parameter's second-moment statistics: factored (v_row reduced over d0,
  // the largest dimension; v_col over d1, the next) or whole (v); m with
  // beta1.
  struct State {
    bool factored = false;
    int64_t d0 = 0, d1 = 0;
    torch::Tensor v_row, v_col, v, m;
  };

 public:
  AdafactorOptimizer(const Adafactor& c, const NamedTensors& params, double max_grad_norm)
      : OptimizerBase(params, max_grad_norm), config_(c) {
    for (const auto& [name, p] : params_) {
      State s;
      const auto options = p.options().dtype(torch::kFloat).requires_grad(false);
      if (p.dim() >= 2) {
        // The two largest dimensions (ties: the earlier one counts smaller).
        std::vector<int64_t> order(p.dim());
        std::iota(order.begin(), order.end(), 0);
        const torch::Tensor& param = p;  // (a lambda cannot capture a structured binding before C++20)
        std::stable_sort(order.begin(), order.end(),
                         [&param](int64_t a, int64_t b) { return param.size(a) < param.size(b); });
        const int64_t d1 = order[order.size() - 2], d0 = order.back();
        if (p.size(d1) >= c.min_dim_size_to_factor()) {
          s.factored = true;
          s.d0 = d0;
          s.d1 = d1;
          std::vector<int64_t> row = p.sizes().vec(), col = p.sizes().vec();
          row.erase(row.begin() + d0);
          col.erase(col.begin() + d1);
          s.v_row = torch::zeros(row, options);
          s.v_col = torch::zeros(col, options);
        }
      }
      if (!s.factored) s.v = torch::zeros(p.sizes(), options);
      if (c.has_beta1()) s.m = torch::zeros(p.sizes(), options);
      state_.push_back(std::move(s));
    }
  }

 protected:
  void Update(size_t i, torch::Tensor& param, const torch::Tensor& grad, double lr) override {
    State& s = state_[i];
    const double decay = 1.0 - std::pow(static_cast<double>(step_ + 1), -config_.decay_rate());
    if (s.factored && fused_updates_ && param.dim() == 2 && param.is_contiguous() && grad.is_contiguous() &&
        !config_.has_beta1() && param.scalar_type() == torch::kFloat && grad.scalar_type() == torch::kFloat &&
        param.device().is_cpu()) {
      FusedFactoredUpdate(s, param, grad, decay, lr);
      return;
    }
    const torch::Tensor grad_sqr = grad.pow(2) + config_.epsilon1();
    torch::Tensor u;
    if (s.factored) {
      s.v_row.mul_(decay).add_(grad_sqr.mean(s.d0), 1.0 - decay);
      s.v_col.mul_(decay).add_(grad_sqr.mean(s.d1), 1.0 - decay);
      const int64_t reduced_d1 = s.d1 > s.d0 ? s.d1 - 1 : s.d1;
      const torch::Tensor row_factor = (s.v_row / s.v_row.mean(reduced_d1, true)).rsqrt();
      const torch::Tensor col_factor = s.v_col.rsqrt();
      u = grad * row_factor.unsqueeze(s.d0) * col_factor.unsqueeze(s.d1);
    } else {
      s.v.mul_(decay).add_(grad_sqr, 1.0 - decay);
      u = grad * s.v.rsqrt();
    }
    if (config_.clipping_threshold() > 0) {
      u = u / torch::clamp_min(Rms(u) / config_.clipping_threshold(), 1.0);
    }
    u = u * lr;
    if (config_.multiply_by_parameter_scale()) {
      u = u * torch::clamp_min(Rms(param), config_.epsilon2());
    }
    if (config_.has_beta1()) {
      s.m.mul_(config_.beta1()).add_(u, 1.0 - config_.beta1());
      u = s.m;
    }
    if (config_.weight_decay_rate() > 0) u = u + config_.weight_decay_rate() * param;
    param.sub_(u);
  }

  // The factored update of a contiguous 2-D float parameter [R, C], in three
  // passes over the elements (trainer/update_kernels.h) instead of a
  // temporary per tensor operation:
  //   1. the row and column means of g^2 + eps1 and the sum of p^2;
  //   2. the sum of u^2, u = g * row factor * column factor (only when the
  //      update is clipped);
  //   3. the update, scaled by the clipping and the parameter scale.
  // The rows go in fixed blocks of kRowBlock (each block's sums added in
  // block order), so the result does not depend on the thread count. The
  // sums are double where the tensor formula sums in float, so the two
  // agree to float rounding, not bit for bit (//trainer:optimizer_test).
  void FusedFactoredUpdate(State& s, torch::Tensor& param, const torch::Tensor& grad, double decay, double lr) {
    constexpr int64_t kRowBlock = 64;
    const int64_t rows = param.size(0), cols = param.size(1);
    const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    const float* g = grad.data_ptr<float>();
    float* p = param.data_ptr<float>();
    const float eps1 = static_cast<float>(config_.epsilon1());

    // Pass 1.
    // Each block's sum from `block_sum(b, begin, end)` (blocks in parallel),
    // added in block order.
    auto sum_over_blocks = [&](const auto& block_sum) {
      std::vector<double> sums(blocks);
      at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t begin = b * kRowBlock;
          sums[b] = block_sum(b, begin, std::min(rows, begin + kRowBlock));
        }
      });
      double total = 0;
      for (double x : sums) total += x;
      return total;
    };
    std::vector<double> row_sums(rows), block_cols(blocks * cols, 0.0);
    const double p2 = sum_over_blocks([&](int64_t b, int64_t begin, int64_t end) {
      return FactoredMomentsRows(g, p, eps1, cols, begin, end, row_sums.data(), &block_cols[b * cols]);
    });
    for (int64_t b = 1; b < blocks; ++b) {
      for (int64_t j = 0; j < cols; ++j) block_cols[j] += block_cols[b * cols + j];
    }
    const auto options = torch::TensorOptions().dtype(torch::kFloat);
    torch::Tensor row_mean = torch::empty({rows}, options), col_mean = torch::empty({cols}, options);
    float* rm = row_mean.data_ptr<float>();
    float* cm = col_mean.data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i) rm[i] = static_cast<float>(row_sums[i] / static_cast<double>(cols));
    for (int64_t j = 0; j < cols; ++j) cm[j] = static_cast<float>(block_cols[j] / static_cast<double>(rows));

    // The second-moment factors (small tensors): v_row is reduced over d0,
    // the larger dimension, v_col over d1.
    const bool d0_is_cols = s.d0 == 1;
    s.v_row.mul_(decay).add_(d0_is_cols ? row_mean : col_mean, 1.0 - decay);
    s.v_col.mul_(decay).add_(d0_is_cols ? col_mean : row_mean, 1.0 - decay);
    const torch::Tensor row_factor = (s.v_row / s.v_row.mean()).rsqrt();
    const torch::Tensor col_factor = s.v_col.rsqrt();
    const torch::Tensor per_row = (d0_is_cols ? row_factor : col_factor).contiguous();  // [R]
    const torch::Tensor per_col = (d0_is_cols ? col_factor : row_factor).contiguous();  // [C]
    const float* r = per_row.data_ptr<float>();
    const float* c = per_col.data_ptr<float>();

    const double n = static_cast<double>(rows * cols);
    double scale = lr;
    if (config_.clipping_threshold() > 0) {
      // Pass 2.
      const double u2 = sum_over_blocks([&](int64_t /*b*/, int64_t begin, int64_t end) {
        return FactoredUpdateSquaresRows(g, r, c, cols, begin, end);
      });
      scale /= std::max(std::sqrt(u2 / n) / config_.clipping_threshold(), 1.0);
    }
    if (config_.multiply_by_parameter_scale()) {
      scale *= std::max(std::sqrt(p2 / n), static_cast<double>(config_.epsilon2()));
    }
    const float k = static_cast<float>(scale);
    const float weight_decay = static_cast<float>(config_.weight_decay_rate());
    // Pass 3.
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      FactoredUpdateRows(g, r, c, k, weight_decay, p, cols, begin, end);
    });
  }

  std::vector<Slot> Slots() override {
    std::vector<Slot> slots;
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& name = params_[i].first;
      State& s = state_[i];
      if (s.factored) {
        slots.push_back({name + "/v_row", &s.v_row});
        slots.push_back({name + "/v_col", &s.v_col});
      } else {
        slots.push_back({name + "/v", &s.v});
      }
      if (s.m.defined()) slots.push_back({name + "/m", &s.m});
    }
    return slots;
  }

 private:
  Adafactor config_;
  std::vector<State> state_;
};

class AdamWOptimizer : public OptimizerBase {
 public:
  AdamWOptimizer(const AdamW& c, const NamedTensors& params, double max_grad_norm)
      : OptimizerBase(params, max_grad_norm), config_(c) {
    for (const auto& [name, p] : params_) {
      const auto options = p.options().dtype(torch::kFloat).requires_grad(false);
      m_.push_back(torch::zeros(p.sizes(), options));
      v_.push_back(torch::zeros(p.sizes(), options));
    }
  }

 protected:
  // On a GPU with LibTorch 2.x: LibTorch's fused multi-tensor AdamW kernel
  // (a few launches for all parameters instead of ~10 per parameter). Same
  // update: bias-corrected moments, eps outside the square root, decoupled
  // weight decay p * (1 - lr * wd).
  bool ApplyAll(const std::vector<torch::Tensor>& grads, double lr) override {
#if TORCH_VERSION_MAJOR >= 2
    if (!fused_updates_ || params_.empty()) return false;
    const torch::Device device = params_[0].second.device();
    if (!device.is_cuda()) return false;
    std::vector<torch::Tensor> params, g;
    for (size_t i = 0; i < params_.size(); ++i) {
      const torch::Tensor& p = params_[i].second;
      if (p.device() != device || p.scalar_type() != torch::kFloat || grads[i].device() != device) return false;
      params.push_back(p);
      g.push_back(grads[i].to(torch::kFloat));
    }
    if (steps_.empty()) {
      for (size_t i = 0; i < params_.size(); ++i) {
        steps_.push_back(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device)));
      }
    }
    for (torch::Tensor& s : steps_) s.fill_(static_cast<double>(step_));  // the kernel counts this step
    at::_fused_adamw_(params, g, m_, v_, /*max_exp_avg_sqs=*/{}, steps_, lr, config_.beta1(), config_.beta2(),
                      config_.weight_decay(), config_.epsilon(), /*amsgrad=*/false, /*maximize=*/false);
    return true;
#else
    (void)grads;
    (void)lr;
    return false;
#endif
  }

  void Update(size_t i, torch::Tensor& param, const torch::Tensor& grad, double lr) override {
    const double b1 = config_.beta1(), b2 = config_.beta2();
    if (fused_updates_ && param.is_contiguous() && grad.is_contiguous() && param.scalar_type() == torch::kFloat &&
        param.device().is_cpu() && grad.device().is_cpu()) {
      FusedUpdate(i, param, grad, lr);
      return;
    }
    m_[i].mul_(b1).add_(grad, 1.0 - b1);
    v_[i].mul_(b2).addcmul_(grad, grad, 1.0 - b2);
    const double t = static_cast<double>(step_ + 1);
    const torch::Tensor m_hat = m_[i] / (1.0 - std::pow(b1, t));
    const torch::Tensor v_hat = v_[i] / (1.0 - std::pow(b2, t));
    torch::Tensor u = m_hat / (v_hat.sqrt() + config_.epsilon());
    if (config_.weight_decay() > 0) u = u + config_.weight_decay() * param;
    param.sub_(u * lr);
  }

  // The same update in one pass over each element (parameter, gradient and
  // both moments read once, written once), with no temporaries: the
  // tensor-op version makes about ten passes and as many temporaries.
  void FusedUpdate(size_t i, torch::Tensor& param, const torch::Tensor& grad, double lr) {
    const double b1 = config_.beta1(), b2 = config_.beta2();
    const double t = static_cast<double>(step_ + 1);
    AdamWConstants c;
    c.keep1 = static_cast<float>(b1);
    c.add1 = static_cast<float>(1.0 - b1);
    c.keep2 = static_cast<float>(b2);
    c.add2 = static_cast<float>(1.0 - b2);
    c.correct1 = static_cast<float>(1.0 - std::pow(b1, t));
    c.correct2 = static_cast<float>(1.0 - std::pow(b2, t));
    c.eps = static_cast<float>(config_.epsilon());
    c.decay = static_cast<float>(config_.weight_decay());
    c.rate = static_cast<float>(lr);
    float* p = param.data_ptr<float>();
    const float* g = grad.data_ptr<float>();
    float* m = m_[i].data_ptr<float>();
    float* v = v_[i].data_ptr<float>();
    // Vectorised, the same bits as the scalar loop (trainer/update_kernels.h).
    at::parallel_for(0, param.numel(), 1 << 14,
                     [&](int64_t begin, int64_t end) { AdamWRange(c, p, g, m, v, begin, end); });
  }

  std::vector<Slot> Slots() override {
    std::vector<Slot> slots;
    for (size_t i = 0; i < params_.size(); ++i) {
      slots.push_back({params_[i].first + "/m", &m_[i]});
      slots.push_back({params_[i].first + "/v", &v_[i]});
    }
    return slots;
  }

 private:
  AdamW config_;
  std::vector<torch::Tensor> m_, v_;
  std::vector<torch::Tensor> steps_;  // the fused GPU kernel's step counters
};

Adafactor WithDefaults(Adafactor a) {
  FillAdafactorDefaults(&a);
  return a;
}

AdamW WithDefaults(AdamW a) {
  FillAdamWDefaults(&a);
  return a;
}

}  // namespace

double SquaredNorm(const torch::Tensor& grad) { return grad.to(torch::kDouble).pow(2).sum().item<double>(); }

double ClipByGlobalNorm(const std::vector<torch::Tensor>& grads, double max_norm) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (const torch::Tensor& g : grads) sum += SquaredNorm(g);
  const double norm = std::sqrt(sum);
  if (norm > max_norm) {
    for (const torch::Tensor& g : grads) g.mul_(max_norm / norm);
  }
  return norm;
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerConfig& config, const NamedTensors& params) {
  if (!(config.max_grad_norm() >= 0)) {
    return absl::InvalidArgumentError("optimizer.max_grad_norm must be >= 0");
  }
  if (config.has_adamw()) {
    const AdamW a = WithDefaults(config.adamw());
    if (!(a.beta1() >= 0 && a.beta1() < 1) || !(a.beta2() >= 0 && a.beta2() < 1) || !(a.epsilon() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer.adamw: ", a.ShortDebugString()));
    }
    return std::unique_ptr<Optimizer>(new AdamWOptimizer(a, params, config.max_grad_norm()));
  }
  const Adafactor a = WithDefaults(config.adafactor());
  if (!(a.decay_rate() > 0 && a.decay_rate() <= 1) || !(a.epsilon1() > 0) || !(a.clipping_threshold() >= 0) ||
      a.min_dim_size_to_factor() < 1 || (a.has_beta1() && !(a.beta1() >= 0 && a.beta1() < 1))) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.adafactor: ", a.ShortDebugString()));
  }
  return std::unique_ptr<Optimizer>(new AdafactorOptimizer(a, params, config.max_grad_norm()));
}

}  // namespace trainyard
