// The interactive-to-batch workflow: make a task from a list of examples,
// export the interactive setup as a job spec, and train one step
// interactively. `trainyard submit` runs the exported spec as a batch job,
// whose first step sees the same batch and gives the same loss.
//
//   bazel run //examples:interactive_export -- --output_dir /tmp/try
//   trainyard submit /tmp/try/job.textproto
//
// Prints one JSON object: the spec's path and the first step's loss.
#include <cstdio>
#include <fstream>
#include <string>

#include "data/bundled.h"
#include "interactive/interactive_model.h"
#include "nlohmann/json.hpp"
#include "spec/jobspec.h"

int main(int argc, char** argv) {
  using namespace trainyard;  // NOLINT: an example program
  std::string output_dir;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--output_dir") output_dir = argv[i + 1];
  }
  if (output_dir.empty()) {
    std::fprintf(stderr, "usage: interactive_export --output_dir DIR\n");
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  };
  InteractiveModelOptions options;
  options.batch_size = 8;
  options.task_feature_lengths.set_inputs(16);
  options.task_feature_lengths.set_targets(32);
  options.output_dir = output_dir + "/session";
  options.model.set_preset("tiny");
  options.restore.set_mode(RestoreConfig::NONE);
  absl::StatusOr<std::unique_ptr<InteractiveModel>> model = InteractiveModel::Create(options);
  if (!model.ok()) return fail(model.status());

  // 32 examples of the bundled task stand in for the user's own.
  TaskRegistry registry;
  if (absl::Status s = RegisterBundledTasks(&registry); !s.ok()) return fail(s);
  absl::StatusOr<InteractiveModel::Batches> batches =
      GetBatchesFromTask(registry, "digits_to_words", "train", 8, 4, true, nullptr, /*shuffle_seed=*/7);
  if (!batches.ok()) return fail(batches.status());
  std::vector<NaturalExample> examples;
  for (const auto& batch : *batches) examples.insert(examples.end(), batch.begin(), batch.end());

  absl::StatusOr<TaskDefinition> task =
      GetTaskFromExamples("my_numbers", **model, examples, {}, {"exact_match", "bleu"});
  if (!task.ok()) return fail(task.status());
  absl::StatusOr<JobSpec> spec = ExportJobSpec(**model, PRETRAINING, "my_numbers", 4, &*task);
  if (!spec.ok()) return fail(spec.status());
  const std::string spec_path = output_dir + "/job.textproto";
  std::ofstream(spec_path) << FormatJobSpecText(*spec);

  absl::StatusOr<MetricResults> first = (*model)->TrainStep(examples);  // the first 8
  if (!first.ok()) return fail(first.status());

  // The trained state as an INFERENCE job over the same examples.
  absl::StatusOr<std::string> saved = (*model)->SaveCheckpoint();
  if (!saved.ok()) return fail(saved.status());
  absl::StatusOr<JobSpec> infer = ExportJobSpec(**model, INFERENCE, "my_numbers", 0, &*task);
  if (!infer.ok()) return fail(infer.status());
  const std::string infer_path = output_dir + "/infer.textproto";
  std::ofstream(infer_path) << FormatJobSpecText(*infer);
  absl::StatusOr<Inference> predicted = (*model)->PredictWithAux(examples);
  if (!predicted.ok()) return fail(predicted.status());

  nlohmann::json out = {{"spec", spec_path},
                        {"first_step_loss", first->at("loss")},
                        {"infer_spec", infer_path},
                        {"predictions", predicted->predictions}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
