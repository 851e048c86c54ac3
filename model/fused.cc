#include "model/fused.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/autograd.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "model/fused_kernels.h"

namespace trainyard {
namespace fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

std::atomic<bool> g_enabled{true};

// Rows per partial sum of RmsNorm's scale gradient: the blocks, not the
// threads, fix the summation order.
constexpr int64_t kRowsPerBlock = 64;

// ---- RMS norm ----

void RmsNormForward(const torch::Tensor& x, const torch::Tensor& scale, double epsilon, torch::Tensor* y,
                    torch::Tensor* rstd) {
  const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
  *y = torch::empty_like(x);
  const auto acc_type = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  *rstd = torch::empty({rows}, x.options().dtype(acc_type));
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    switch (x.scalar_type()) {
      case torch::kFloat:
        internal::RmsNormForwardF(x.data_ptr<float>(), scale.data_ptr<float>(), static_cast<float>(epsilon), begin, end,
                                  d, y->data_ptr<float>(), rstd->data_ptr<float>());
        break;
      case torch::kBFloat16:
        internal::RmsNormForwardBf(x.data_ptr<c10::BFloat16>(), scale.data_ptr<float>(), static_cast<float>(epsilon),
                                   begin, end, d, y->data_ptr<c10::BFloat16>(), rstd->data_ptr<float>());
        break;
      default:
        internal::RmsNormForwardD(x.data_ptr<double>(), scale.data_ptr<double>(), epsilon, begin, end, d,
                                  y->data_ptr<double>(), rstd->data_ptr<double>());
    }
  });
}

void RmsNormBackward(const torch::Tensor& x, const torch::Tensor& g, const torch::Tensor& scale,
                     const torch::Tensor& rstd, bool want_dx, bool want_dscale, torch::Tensor* dx,
                     torch::Tensor* dscale) {
  const int64_t d = x.size(-1), rows = x.numel() / std::max<int64_t>(d, 1);
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (want_dx) *dx = torch::empty_like(x);
  torch::Tensor parts;
  if (want_dscale) parts = torch::zeros({std::max<int64_t>(blocks, 1), d}, scale.options());
  at::parallel_for(0, blocks, 1, [&](int64_t block_begin, int64_t block_end) {
    for (int64_t block = block_begin; block < block_end; ++block) {
      const int64_t begin = block * kRowsPerBlock, end = std::min(rows, begin + kRowsPerBlock);
      switch (x.scalar_type()) {
        case torch::kFloat:
          internal::RmsNormBackwardF(x.data_ptr<float>(), g.data_ptr<float>(), scale.data_ptr<float>(),
                                     rstd.data_ptr<float>(), begin, end, d, want_dx ? dx->data_ptr<float>() : nullptr,
                                     want_dscale ? parts.data_ptr<float>() + block * d : nullptr);
          break;
        case torch::kBFloat16:
          internal::RmsNormBackwardBf(x.data_ptr<c10::BFloat16>(), g.data_ptr<c10::BFloat16>(), scale.data_ptr<float>(),
                                      rstd.data_ptr<float>(), begin, end, d,
                                      want_dx ? dx->data_ptr<c10::BFloat16>() : nullptr,
                                      want_dscale ? parts.data_ptr<float>() + block * d : nullptr);
          break;
        default:
          internal::RmsNormBackwardD(x.data_ptr<double>(), g.data_ptr<double>(), scale.data_ptr<double>(),
                                     rstd.data_ptr<double>(), begin, end, d, want_dx ? dx->data_ptr<double>() : nullptr,
                                     want_dscale ? parts.data_ptr<double>() + block * d : nullptr);
      }
    }
  });
  if (want_dscale) {
    // Blocks summed in order, one after the other: a fixed order.
    *dscale = parts[0].clone();
    for (int64_t b = 1; b < blocks; ++b) dscale->add_(parts[b]);
  }
}

class RmsNormFunction : public Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& scale_in,
                               double epsilon) {
    const torch::Tensor x = x_in.contiguous();
    const torch::Tensor scale = scale_in.contiguous();
    torch::Tensor y, rstd;
    RmsNormForward(x, scale, epsilon, &y, &rstd);
    ctx->save_for_backward({x, scale, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    torch::Tensor dx, dscale;
    RmsNormBackward(saved[0], grads[0].contiguous(), saved[1], saved[2], ctx->needs_input_grad(0),
                    ctx->needs_input_grad(1), &dx, &dscale);
    return {dx, dscale, torch::Tensor()};
  }
};

// ---- Gated GELU ----

constexpr int64_t kElementGrain = 32768;

class GatedGeluFunction : public Function<GatedGeluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a_in, const torch::Tensor& b_in) {
    const torch::Tensor a = a_in.contiguous(), b = b_in.contiguous();
    torch::Tensor y = torch::empty_like(a);
    at::parallel_for(0, a.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      switch (a.scalar_type()) {
        case torch::kFloat:
          internal::GatedGeluForwardF(a.data_ptr<float>(), b.data_ptr<float>(), begin, end, y.data_ptr<float>());
          break;
        case torch::kBFloat16:
          internal::GatedGeluForwardBf(a.data_ptr<c10::BFloat16>(), b.data_ptr<c10::BFloat16>(), begin, end,
                                       y.data_ptr<c10::BFloat16>());
          break;
        default:
          internal::GatedGeluForwardD(a.data_ptr<double>(), b.data_ptr<double>(), begin, end, y.data_ptr<double>());
      }
    });
    ctx->save_for_backward({a, b});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &a = saved[0], &b = saved[1];
    const torch::Tensor g = grads[0].contiguous();
    torch::Tensor da = torch::empty_like(a), db = torch::empty_like(b);
    at::parallel_for(0, a.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      switch (a.scalar_type()) {
        case torch::kFloat:
          internal::GatedGeluBackwardF(a.data_ptr<float>(), b.data_ptr<float>(), g.data_ptr<float>(), begin, end,
                                       da.data_ptr<float>(), db.data_ptr<float>());
          break;
        case torch::kBFloat16:
          internal::GatedGeluBackwardBf(a.data_ptr<c10::BFloat16>(), b.data_ptr<c10::BFloat16>(),
                                        g.data_ptr<c10::BFloat16>(), begin, end, da.data_ptr<c10::BFloat16>(),
                                        db.data_ptr<c10::BFloat16>());
          break;
        default:
          internal::GatedGeluBackwardD(a.data_ptr<double>(), b.data_ptr<double>(), g.data_ptr<double>(), begin, end,
                                       da.data_ptr<double>(), db.data_ptr<double>());
      }
    });
    return {ctx->needs_input_grad(0) ? da : torch::Tensor(), ctx->needs_input_grad(1) ? db : torch::Tensor()};
  }
};

// ---- Cross-entropy with z-loss ----

struct SmoothedTarget {
  double confidence = 1.0;  // weight on the target
  double low = 0.0;         // weight on every other class
  double entropy = 0.0;     // of that distribution
};

SmoothedTarget Smoothing(double label_smoothing, int64_t vocab) {
  SmoothedTarget s;
  if (label_smoothing > 0.0) {
    s.confidence = 1.0 - label_smoothing;
    s.low = label_smoothing / static_cast<double>(vocab - 1);
    s.entropy = -(s.confidence * std::log(s.confidence) + (vocab - 1) * s.low * std::log(s.low + 1e-20));
  }
  return s;
}

int64_t RowGrain(int64_t vocab) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(vocab, 1)); }

class CrossEntropyFunction : public Function<CrossEntropyFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits_in, const torch::Tensor& targets_in,
                               double z_loss, double label_smoothing) {
    const torch::Tensor logits = logits_in.contiguous();
    const torch::Tensor targets = targets_in.contiguous();
    const int64_t n = logits.size(0), v = logits.size(1);
    const SmoothedTarget smooth = Smoothing(label_smoothing, v);
    torch::Tensor loss = torch::empty({n}, logits.options());
    torch::Tensor log_z = torch::empty({n}, logits.options());
    torch::Tensor argmax = torch::empty({n}, logits.options().dtype(torch::kLong));
    at::parallel_for(0, n, RowGrain(v), [&](int64_t begin, int64_t end) {
      if (logits.scalar_type() == torch::kFloat) {
        internal::CrossEntropyForwardF(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), begin, end, v, z_loss,
                                       smooth.confidence, smooth.low, smooth.entropy, loss.data_ptr<float>(),
                                       log_z.data_ptr<float>(), argmax.data_ptr<int64_t>());
      } else {
        internal::CrossEntropyForwardD(logits.data_ptr<double>(), targets.data_ptr<int64_t>(), begin, end, v, z_loss,
                                       smooth.confidence, smooth.low, smooth.entropy, loss.data_ptr<double>(),
                                       log_z.data_ptr<double>(), argmax.data_ptr<int64_t>());
      }
    });
    ctx->save_for_backward({logits, targets, log_z});
    ctx->saved_data["z_loss"] = z_loss;
    ctx->saved_data["confidence"] = smooth.confidence;
    ctx->saved_data["low"] = smooth.low;
    ctx->mark_non_differentiable({log_z, argmax});
    return {loss, log_z, argmax};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &log_z = saved[2];
    const torch::Tensor g = grads[0].contiguous();
    const double z_loss = ctx->saved_data["z_loss"].toDouble();
    const double confidence = ctx->saved_data["confidence"].toDouble();
    const double low = ctx->saved_data["low"].toDouble();
    const int64_t n = logits.size(0), v = logits.size(1);
    torch::Tensor d = torch::empty_like(logits);
    at::parallel_for(0, n, RowGrain(v), [&](int64_t begin, int64_t end) {
      if (logits.scalar_type() == torch::kFloat) {
        internal::CrossEntropyBackwardF(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), log_z.data_ptr<float>(),
                                        g.data_ptr<float>(), begin, end, v, z_loss, confidence, low,
                                        d.data_ptr<float>());
      } else {
        internal::CrossEntropyBackwardD(logits.data_ptr<double>(), targets.data_ptr<int64_t>(),
                                        log_z.data_ptr<double>(), g.data_ptr<double>(), begin, end, v, z_loss,
                                        confidence, low, d.data_ptr<double>());
      }
    });
    return {d, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool FloatingType(const torch::Tensor& t, bool allow_bfloat16) {
  const auto type = t.scalar_type();
  return type == torch::kFloat || type == torch::kDouble || (allow_bfloat16 && type == torch::kBFloat16);
}

}  // namespace

void SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }
bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

namespace {
bool Dense(const torch::Tensor& t) { return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided; }
torch::ScalarType AccType(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}
}  // namespace

bool RmsNormApplies(const torch::Tensor& x, const torch::Tensor& scale) {
  return Enabled() && Dense(x) && Dense(scale) && FloatingType(x, /*allow_bfloat16=*/true) &&
         scale.scalar_type() == AccType(x);
}

bool GatedGeluApplies(const torch::Tensor& a, const torch::Tensor& b) {
  return Enabled() && Dense(a) && Dense(b) && FloatingType(a, /*allow_bfloat16=*/true) &&
         a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes();
}

bool CrossEntropyApplies(const torch::Tensor& logits) {
  return Enabled() && Dense(logits) && FloatingType(logits, /*allow_bfloat16=*/false);
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& scale, double epsilon) {
  const auto acc_type = AccType(x);
  TORCH_CHECK(FloatingType(x, /*allow_bfloat16=*/true), "fused::RmsNorm: x is ", x.scalar_type(),
              "; float32, bfloat16 or float64 are allowed");
  TORCH_CHECK(scale.scalar_type() == acc_type, "fused::RmsNorm: scale is ", scale.scalar_type(), ", x ",
              x.scalar_type(), " needs ", acc_type);
  TORCH_CHECK(x.dim() >= 1 && scale.dim() == 1 && scale.size(0) == x.size(-1), "fused::RmsNorm: scale ", scale.sizes(),
              " does not match x ", x.sizes());
  return RmsNormFunction::apply(x, scale, epsilon);
}

torch::Tensor GatedGelu(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(FloatingType(a, /*allow_bfloat16=*/true) && a.scalar_type() == b.scalar_type(), "fused::GatedGelu: a is ",
              a.scalar_type(), ", b ", b.scalar_type(), "; both float32, bfloat16 or float64 are allowed");
  TORCH_CHECK(a.sizes() == b.sizes(), "fused::GatedGelu: shapes differ: ", a.sizes(), " and ", b.sizes());
  return GatedGeluFunction::apply(a, b);
}

CrossEntropyOutput CrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss,
                                double label_smoothing) {
  TORCH_CHECK(FloatingType(logits, /*allow_bfloat16=*/false), "fused::CrossEntropy: logits are ", logits.scalar_type(),
              "; float32 or float64 are allowed");
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "fused::CrossEntropy: logits ", logits.sizes(), " and targets ", targets.sizes(),
              " must be [N, V] and [N]");
  TORCH_CHECK(targets.scalar_type() == torch::kLong, "fused::CrossEntropy: targets are ", targets.scalar_type(),
              ", int64 is allowed");
  TORCH_CHECK(logits.size(1) >= 2 || label_smoothing == 0.0, "fused::CrossEntropy: label smoothing needs V >= 2");
  if (targets.numel() > 0) {
    const int64_t lo = targets.min().item<int64_t>(), hi = targets.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < logits.size(1), "fused::CrossEntropy: target ", lo < 0 ? lo : hi, " is outside [0, ",
                logits.size(1), ")");
  }
  variable_list out = CrossEntropyFunction::apply(logits, targets, z_loss, label_smoothing);
  return CrossEntropyOutput{out[0], out[1], out[2]};
}

}  // namespace fused
}  // namespace trainyard
