// The interactive model's first workflow: train a few steps on a handful of
// strings, then predict. Prints the loss of each step and the predictions
// as JSON lines.
//
//   bazel run //examples:interactive_train_predict -- --output_dir /tmp/try --steps 30
#include <cstdio>
#include <string>

#include "interactive/interactive_model.h"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  using namespace trainyard;  // NOLINT: an example program
  std::string output_dir;
  int steps = 30;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--output_dir") output_dir = argv[i + 1];
    if (std::string(argv[i]) == "--steps") steps = std::atoi(argv[i + 1]);
  }
  if (output_dir.empty() || steps < 1) {
    std::fprintf(stderr, "usage: interactive_train_predict --output_dir DIR [--steps N]\n");
    return 2;
  }
  InteractiveModelOptions options;
  options.batch_size = 4;
  options.task_feature_lengths.set_inputs(16);
  options.task_feature_lengths.set_targets(32);
  options.output_dir = output_dir;
  options.model.set_preset("tiny");
  options.model.set_dropout_rate(0.0f);
  absl::StatusOr<std::unique_ptr<InteractiveModel>> model = InteractiveModel::Create(options);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const std::vector<NaturalExample> examples = {
      {"12", "twelve"}, {"40", "forty"}, {"115", "one hundred fifteen"}, {"7", "seven"}};
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<MetricResults> metrics = (*model)->TrainStep(examples);
    if (!metrics.ok()) {
      std::fprintf(stderr, "error: %s\n", metrics.status().ToString().c_str());
      return 1;
    }
    std::printf("%s\n", nlohmann::json({{"step", (*model)->step()}, {"loss", metrics->at("loss")}}).dump().c_str());
  }
  absl::StatusOr<Inference> predicted = (*model)->PredictWithAux({"12", "40", "115", "7"});
  if (!predicted.ok()) {
    std::fprintf(stderr, "error: %s\n", predicted.status().ToString().c_str());
    return 1;
  }
  for (size_t i = 0; i < predicted->predictions.size(); ++i) {
    std::printf("%s\n", nlohmann::json({{"input", predicted->inputs[i]},
                                        {"prediction", predicted->predictions[i]},
                                        {"score", predicted->aux.at("scores")[i]}})
                            .dump()
                            .c_str());
  }
  return 0;
}
