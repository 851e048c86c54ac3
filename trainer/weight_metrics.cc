// T5X's weight metrics (WeightMetricsComputer), from a step's parameters
// before and after its update.
#include <cmath>

#include "trainer/trainer.h"

namespace trainyard {
namespace {

double Rms(const torch::Tensor& t) { return t.to(torch::kDouble).pow(2).mean().sqrt().item<double>(); }

}  // namespace

std::map<std::string, double> WeightMetricsComputer::ComputeMetrics(const std::vector<double>& grad_squares,
                                                                    const NamedTensors& old_params,
                                                                    const NamedTensors& new_params) const {
  std::map<std::string, double> out;
  double grad_sq = 0;
  for (size_t i = 0; i < new_params.size(); ++i) {
    const std::string& name = new_params[i].first;
    const torch::Tensor& p = new_params[i].second;
    const torch::Tensor& old = old_params[i].second;
    const torch::Tensor update = p - old;
    out["weight_rms/" + name] = Rms(p);
    out["weight_max/" + name] = p.abs().max().item<double>();
    out["weight_gradient_rms/" + name] = p.numel() > 0 ? std::sqrt(grad_squares[i] / p.numel()) : 0.0;
    out["weight_update_rms/" + name] = Rms(update);
    // T5X's: the update over the old value element by element, then the
    // rms. Where an old value is 0 the ratio is undefined (T5X's division
    // makes the whole metric inf or NaN): those elements are left out, and
    // a parameter that was 0 everywhere gets 0.
    const torch::Tensor defined = old != 0;
    const int64_t n = defined.sum().item<int64_t>();
    out["weight_update_divided_by_weight_rms/" + name] =
        n > 0 ? Rms(update.masked_select(defined).to(torch::kDouble) / old.masked_select(defined).to(torch::kDouble))
              : 0.0;
    grad_sq += grad_squares[i];
  }
  out["weight_gradient_norm"] = std::sqrt(grad_sq);
  return out;
}

}  // namespace trainyard
