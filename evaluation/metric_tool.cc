// Reads JSON lines {"target": ..., "prediction": ...} on stdin and prints
// the built-in prediction metrics over them as one JSON object (for the
// parity test against sacrebleu and rouge-score, and for scripts).
#include <iostream>
#include <string>

#include "evaluation/metric_fns.h"
#include "nlohmann/json.hpp"

int main() {
  std::vector<std::string> targets, predictions;
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("target") || !j.contains("prediction") || !j["target"].is_string() ||
        !j["prediction"].is_string()) {
      std::cerr << "error: stdin:" << n << ": want {\"target\": string, \"prediction\": string}\n";
      return 2;
    }
    targets.push_back(j["target"].get<std::string>());
    predictions.push_back(j["prediction"].get<std::string>());
  }
  nlohmann::json out = nlohmann::json::object();
  for (const char* name : {"bleu", "rouge", "exact_match", "sequence_accuracy", "token_f1"}) {
    absl::StatusOr<trainyard::MetricFn> fn = trainyard::BuiltinMetricFn(name);
    absl::StatusOr<trainyard::MetricResults> values =
        trainyard::ComputeMetrics({*fn}, targets, &predictions, nullptr, nullptr);
    if (!values.ok()) {
      std::cerr << "error: " << values.status() << "\n";
      return 1;
    }
    for (const auto& [k, v] : *values) out[k] = v;
  }
  std::cout << out.dump() << "\n";
  return 0;
}
