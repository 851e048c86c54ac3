// Metrics as mergeable (total, count) pairs of scalar tensors, the shape of
// clu/T5X metrics: the value is total / count, and merging adds both parts.
// Keeping them as tensors lets a training step merge microbatches and ranks
// (one all-reduce of all totals and counts) before anything leaves the device.
//
// Two kinds, as T5X's:
//  - Average: e.g. accuracy = sum(correct * weight) / sum(weight).
//  - AveragePerStep: e.g. loss = sum over steps of the step's loss / steps.
//    Pieces of one step (microbatches, ranks) add their totals but the step
//    counts once: MergeWithinStep keeps the count.
#ifndef TRAINYARD_MODEL_METRICS_H_
#define TRAINYARD_MODEL_METRICS_H_

#include <map>
#include <string>

#include <torch/types.h>

namespace trainyard {

struct Metric {
  torch::Tensor total;  // float64 scalar
  torch::Tensor count;  // float64 scalar
  bool per_step = false;

  static Metric Average(const torch::Tensor& total, const torch::Tensor& count);
  static Metric AveragePerStep(const torch::Tensor& total);
  double Value() const;
};

using Metrics = std::map<std::string, Metric>;

// Adds `other` into `*into` (metrics missing on one side are copied).
// within_step: pieces of the same step (AveragePerStep counts stay).
void MergeMetrics(const Metrics& other, bool within_step, Metrics* into);

// name -> total / count.
std::map<std::string, double> MetricValues(const Metrics& metrics);

}  // namespace trainyard

#endif  // TRAINYARD_MODEL_METRICS_H_
