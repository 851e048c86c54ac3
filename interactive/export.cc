#include "interactive/interactive_model.h"

#include "interactive/examples.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_vocabulary.h"
#include "common/durable_file.h"
#include "common/status_macros.h"
#include "data/bundled.h"
#include "data/task_definition.h"
#include "job/infer_eval.h"
#include "nlohmann/json.hpp"
#include "spec/jobspec_validator.h"

namespace trainyard {

using interactive_internal::ApplyPreprocessors;
using interactive_internal::CheckExamples;
using interactive_internal::TokenizeAndBatch;

absl::StatusOr<InteractiveModel::Batches> GetBatchesFromTask(const TaskRegistry& registry,
                                                             const std::string& task_or_mixture,
                                                             const std::string& split, int batch_size, int num_batches,
                                                             bool pretokenized, const FeatureLengths* sequence_length,
                                                             std::optional<uint64_t> shuffle_seed) {
  if (batch_size < 1 || num_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size ", batch_size, " and num_batches ", num_batches, " must be >= 1"));
  }
  if (!pretokenized && sequence_length == nullptr) {
    return absl::InvalidArgumentError("sequence_length: required when pretokenized is false");
  }
  TY_ASSIGN_OR_RETURN(const Task* task, registry.Get(task_or_mixture));
  TY_ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> source, task->source(split));
  const int64_t wanted = static_cast<int64_t>(batch_size) * num_batches;
  InteractiveModel::Batches out(num_batches);
  std::vector<int64_t> order(source->size());
  std::iota(order.begin(), order.end(), 0);
  if (shuffle_seed.has_value()) {
    std::mt19937_64 gen(*shuffle_seed);
    std::shuffle(order.begin(), order.end(), gen);
  }
  int64_t taken = 0;
  for (size_t k = 0; k < order.size() && taken < wanted; ++k) {
    TY_ASSIGN_OR_RETURN(Example ex, source->Get(order[k]));
    bool dropped = false;
    for (const Preprocessor& preprocess : task->preprocessors) {
      TY_ASSIGN_OR_RETURN(absl::optional<Example> next, preprocess(std::move(ex)));
      if (!next.has_value()) {
        dropped = true;
        break;
      }
      ex = std::move(*next);
    }
    if (dropped) continue;
    std::string input = ex["inputs"], target = ex["targets"];
    if (!pretokenized) {
      // What the model sees: tokens cut to the sequence lengths, as text.
      for (auto [text, length] : {std::pair<std::string*, int>{&input, sequence_length->inputs()},
                                  std::pair<std::string*, int>{&target, sequence_length->targets()}}) {
        TY_ASSIGN_OR_RETURN(std::vector<int> ids, task->vocabulary->Encode(*text));
        if (static_cast<int>(ids.size()) > length) ids.resize(std::max(length, 0));
        TY_ASSIGN_OR_RETURN(*text, task->vocabulary->Decode(ids));
      }
    }
    out[taken / batch_size].emplace_back(std::move(input), std::move(target));
    ++taken;
  }
  if (taken < wanted) {
    return absl::OutOfRangeError(absl::StrCat("task ", task_or_mixture, " split ", split, " has ", taken, " examples; ",
                                              num_batches, " batches of ", batch_size, " need ", wanted));
  }
  return out;
}

absl::StatusOr<TaskDefinition> GetTaskFromExamples(const std::string& name, const InteractiveModel& model,
                                                   const std::vector<NaturalExample>& examples,
                                                   const std::vector<Preprocessor>& preprocessors,
                                                   const std::vector<std::string>& metric_fns,
                                                   TaskRegistry* add_to_registry) {
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
                          std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("task name \"", name, "\": use 1 or more of [A-Za-z0-9_.-]"));
  }
  for (const std::string& fn : metric_fns) TY_RETURN_IF_ERROR(BuiltinMetricFn(fn).status());
  TY_ASSIGN_OR_RETURN(std::vector<NaturalExample> prepared, model.Preprocess(examples, preprocessors));
  TY_RETURN_IF_ERROR(CheckExamples(prepared, /*need_targets=*/true).status());
  const std::string dir = model.options().output_dir + "/tasks";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::string path = absl::StrCat(dir, "/", name, ".jsonl");
  std::string lines;
  for (const NaturalExample& e : prepared) {
    absl::StrAppend(&lines, nlohmann::json({{"inputs", e.input}, {"targets", *e.target}}).dump(), "\n");
  }
  TY_RETURN_IF_ERROR(WriteFileAtomically(path, lines));
  TaskDefinition def;
  def.set_name(name);
  const std::string absolute = std::filesystem::absolute(path).string();
  for (const char* split : {"train", "validation", "test"}) (*def.mutable_splits())[split] = absolute;
  if (!model.options().vocabulary_path.empty()) {
    def.set_vocabulary(std::filesystem::absolute(model.options().vocabulary_path).string());
  } else if (model.vocabulary().path() != FindBundledFile("vocab/digits_to_words.model").value_or("")) {
    // The restored checkpoint's vocabulary, copied beside the examples: a
    // job from the exported spec reads it even once that checkpoint is gone.
    TY_ASSIGN_OR_RETURN(std::string bytes, ReadVocabularyFile(model.vocabulary().path()));
    const std::string vocabulary = absl::StrCat(dir, "/", name, ".model");
    TY_RETURN_IF_ERROR(WriteFileAtomically(vocabulary, bytes));
    def.set_vocabulary(std::filesystem::absolute(vocabulary).string());
  }
  def.set_add_eos(model.options().add_eos);
  for (const std::string& fn : metric_fns) def.add_metric_fns(fn);
  if (add_to_registry != nullptr) TY_RETURN_IF_ERROR(RegisterTaskDefinition(def, add_to_registry));
  return def;
}

absl::StatusOr<JobSpec> ExportJobSpec(const InteractiveModel& model, JobKind kind, const std::string& task,
                                      int64_t train_steps, const TaskDefinition* definition) {
  if (kind != PRETRAINING && kind != FINETUNING && kind != EVALUATION && kind != INFERENCE) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind: ", JobKind_Name(kind), "; one of PRETRAINING, FINETUNING, EVALUATION, INFERENCE"));
  }
  const bool training = kind == PRETRAINING || kind == FINETUNING;
  if (!training) train_steps = 1;  // not used by EVALUATION and INFERENCE jobs
  if (train_steps < 1) return absl::InvalidArgumentError(absl::StrCat("train_steps: ", train_steps, "; must be >= 1"));
  if (task.empty()) return absl::InvalidArgumentError("task: required");
  JobSpec spec = model.job_spec();
  spec.set_kind(kind);
  spec.set_name(absl::StrCat("interactive-", absl::AsciiStrToLower(JobKind_Name(kind))));
  spec.set_task(task);
  if (definition != nullptr) *spec.add_task_definitions() = *definition;
  spec.set_total_steps(train_steps);
  spec.mutable_data()->set_pack(false);
  spec.mutable_data()->set_shuffle(false);
  spec.set_output_dir(absl::StrCat(model.options().output_dir, "/", absl::AsciiStrToLower(JobKind_Name(kind))));
  RestoreConfig* restore = spec.mutable_restore();
  restore->Clear();
  if (kind == PRETRAINING) {
    restore->set_mode(RestoreConfig::NONE);
  } else {
    absl::StatusOr<std::string> latest = LatestGoodCheckpoint(model.options().output_dir, nullptr);
    if (!latest.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(JobKind_Name(kind),
                                                        " starts from a checkpoint and there is none under ",
                                                        model.options().output_dir, "; call SaveCheckpoint first"));
    }
    restore->set_mode(RestoreConfig::SPECIFIC);
    restore->set_path(std::filesystem::absolute(*latest).string());
  }
  // The session's decoding, whole (T5X's gin config carries the model's
  // decode function): INFERENCE and EVALUATION jobs decode with it, and so
  // does a training job's inference evaluation.
  absl::StatusOr<InferenceConfig> decoding = InferenceConfigFromDecodeOptions(model.options().decode);
  absl::Status status = decoding.status();
  if (status.ok()) {
    *spec.mutable_inference() = *std::move(decoding);
    status = NormalizeDecoding(spec.mutable_inference(), model.options().task_feature_lengths.targets());
  }
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the interactive model's decoding cannot be a job's: ", status.message()));
  }
  if (!training) spec.mutable_inference()->set_split("validation");
  return spec;
}

}  // namespace trainyard
