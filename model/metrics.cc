#include "model/metrics.h"

namespace trainyard {
namespace {

torch::Tensor AsDouble(const torch::Tensor& t) { return t.detach().to(torch::kDouble); }

}  // namespace

Metric Metric::Average(const torch::Tensor& total, const torch::Tensor& count) {
  return Metric{AsDouble(total), AsDouble(count), false};
}

Metric Metric::AveragePerStep(const torch::Tensor& total) {
  torch::Tensor t = AsDouble(total);
  return Metric{t, torch::ones_like(t), true};
}

double Metric::Value() const { return (total / count).item<double>(); }

void MergeMetrics(const Metrics& other, bool within_step, Metrics* into) {
  for (const auto& [name, metric] : other) {
    auto it = into->find(name);
    if (it == into->end()) {
      into->emplace(name, metric);
      continue;
    }
    it->second.total = it->second.total + metric.total;
    if (!(within_step && metric.per_step)) it->second.count = it->second.count + metric.count;
  }
}

std::map<std::string, double> MetricValues(const Metrics& metrics) {
  std::map<std::string, double> values;
  for (const auto& [name, metric] : metrics) values[name] = metric.Value();
  return values;
}

}  // namespace trainyard
