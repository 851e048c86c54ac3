// Scoring and evaluating with metric functions of the three kinds T5X's
// interactive model takes: (targets, scores), (targets, predictions) and
// (targets, predictions, aux_values). Trains a little first on the bundled
// task so the numbers mean something; prints one JSON object.
//
//   bazel run //examples:interactive_evaluate -- --output_dir /tmp/eval
#include <cstdio>
#include <string>

#include "data/bundled.h"
#include "interactive/interactive_model.h"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  using namespace trainyard;  // NOLINT: an example program
  std::string output_dir;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--output_dir") output_dir = argv[i + 1];
  }
  if (output_dir.empty()) {
    std::fprintf(stderr, "usage: interactive_evaluate --output_dir DIR\n");
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  };
  InteractiveModelOptions options;
  options.batch_size = 16;
  options.task_feature_lengths.set_inputs(16);
  options.task_feature_lengths.set_targets(32);
  options.output_dir = output_dir;
  options.model.set_preset("tiny");
  absl::StatusOr<std::unique_ptr<InteractiveModel>> model = InteractiveModel::Create(options);
  if (!model.ok()) return fail(model.status());
  TaskRegistry registry;
  if (absl::Status s = RegisterBundledTasks(&registry); !s.ok()) return fail(s);
  absl::StatusOr<InteractiveModel::Batches> train =
      GetBatchesFromTask(registry, "digits_to_words", "train", 16, 50, true, nullptr, /*shuffle_seed=*/1);
  absl::StatusOr<InteractiveModel::Batches> held_out =
      GetBatchesFromTask(registry, "digits_to_words", "validation", 16, 1, true, nullptr, /*shuffle_seed=*/2);
  if (!train.ok() || !held_out.ok()) return fail(train.ok() ? held_out.status() : train.status());

  // A custom function of each kind, beside built-ins.
  std::vector<MetricFn> metric_fns = {
      *BuiltinMetricFn("exact_match"),
      *BuiltinMetricFn("bleu"),
      {"longest_target", ScoreMetricFn([](const std::vector<std::string>& targets,
                                          const std::vector<double>& scores) -> absl::StatusOr<MetricResults> {
         size_t longest = 0;
         for (size_t i = 1; i < targets.size(); ++i)
           longest = targets[i].size() > targets[longest].size() ? i : longest;
         return MetricResults{{"score_of_longest_target", scores[longest]}};
       })},
      {"mean_prediction_score",
       PredictionAuxMetricFn([](const std::vector<std::string>&, const std::vector<std::string>&,
                                const AuxValues& aux) -> absl::StatusOr<MetricResults> {
         double sum = 0;
         for (double s : aux.at("scores")) sum += s;
         return MetricResults{{"mean_prediction_score", sum / static_cast<double>(aux.at("scores").size())}};
       })},
  };
  // T5X's train_loop counts from the first step: eval_period 49 evaluates
  // after steps 1 and 50.
  absl::StatusOr<TrainLoopResult> result = (*model)->TrainLoop(50, 49, *train, {}, {}, *held_out, metric_fns);
  if (!result.ok()) return fail(result.status());
  absl::StatusOr<std::vector<double>> scores = (*model)->Score((*held_out)[0]);
  if (!scores.ok()) return fail(scores.status());
  std::printf("%s\n", nlohmann::json({{"step", (*model)->step()},
                                      {"evaluated_steps", result->evaluated_steps},
                                      {"metrics", result->metrics},
                                      {"first_target_score", (*scores)[0]}})
                          .dump()
                          .c_str());
  return 0;
}
