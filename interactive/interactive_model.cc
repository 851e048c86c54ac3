#include "interactive/interactive_model.h"

#include "interactive/examples.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "collective/agreement.h"
#include "common/status_macros.h"
#include "job/distributed_decode.h"
#include "spdlog/spdlog.h"
#include "spec/jobspec.h"
#include "spec/presets.h"

namespace trainyard {
namespace {

using interactive_internal::ApplyPreprocessors;
using interactive_internal::BatchTokens;
using interactive_internal::CheckExamples;
using interactive_internal::DataMetrics;
using interactive_internal::TokenizeAndBatch;
using interactive_internal::TokenizeThroughTask;

// One batch (this rank's rows), once, with the data counts of the whole
// batch.
class OneBatch : public BatchIterator {
 public:
  OneBatch(T5Batch rows, std::map<std::string, double> data_metrics)
      : rows_(std::move(rows)), data_metrics_(std::move(data_metrics)) {}
  absl::StatusOr<T5Batch> Next() override {
    if (used_) return absl::OutOfRangeError("one batch only");
    used_ = true;
    return rows_;
  }
  std::map<std::string, double> TakeDataMetrics() override { return data_metrics_; }

 private:
  T5Batch rows_;
  std::map<std::string, double> data_metrics_;
  bool used_ = false;
};

// Appends `more`'s rows to `into`'s (the results of several batches as one).
void AppendInference(Inference more, Inference* into) {
  auto append = [](auto& from, auto* to) {
    to->insert(to->end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  append(more.inputs, &into->inputs);
  append(more.targets, &into->targets);
  append(more.predictions, &into->predictions);
  append(more.scores, &into->scores);
  for (auto& [name, values] : more.aux) append(values, &into->aux[name]);
  into->truncated_examples += more.truncated_examples;
}

absl::Status CheckOptions(const InteractiveModelOptions& o) {
  if (o.batch_size < 1) return absl::InvalidArgumentError(absl::StrCat("batch_size: ", o.batch_size, "; must be >= 1"));
  const int world = o.collective != nullptr ? o.collective->world_size() : 1;
  if (o.num_microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_microbatches: ", o.num_microbatches, "; must be >= 1"));
  }
  TY_RETURN_IF_ERROR(CheckBatchSplit(o.batch_size, world, o.num_microbatches, /*elastic=*/false));
  if (o.task_feature_lengths.inputs() < 1 || o.task_feature_lengths.targets() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("task_feature_lengths: inputs ", o.task_feature_lengths.inputs(),
                                                   ", targets ", o.task_feature_lengths.targets(),
                                                   "; both must be >= 1"));
  }
  if (o.vocabulary_extra_ids < 0 || (o.vocabulary_extra_ids > 0 && o.vocabulary_path.empty())) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary_extra_ids: ", o.vocabulary_extra_ids,
                                                   "; must be >= 0, and 0 without vocabulary_path"));
  }
  if (o.decode.max_decode_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode.max_decode_length: ", o.decode.max_decode_length, "; must be >= 0"));
  }
  return absl::OkStatus();
}

// Fills in what the options leave unset: Adafactor, a constant learning
// rate (0.01 unless a base is given), decoding up to the targets' length,
// restoring the LATEST checkpoint.
void SetDefaults(InteractiveModelOptions* o) {
  if (o->optimizer.optimizer_case() == OptimizerConfig::OPTIMIZER_NOT_SET) o->optimizer.mutable_adafactor();
  if (o->learning_rate.factors().empty()) {
    o->learning_rate.set_factors("constant");
    if (!o->learning_rate.has_base_learning_rate()) o->learning_rate.set_base_learning_rate(0.01f);
  }
  if (o->decode.max_decode_length == 0) o->decode.max_decode_length = o->task_feature_lengths.targets();
  if (o->restore.mode() == RestoreConfig::MODE_UNSPECIFIED) o->restore.set_mode(RestoreConfig::LATEST);
}

// No model given: the restored checkpoint's, when a SPECIFIC one is named.
absl::Status ModelFromCheckpoint(InteractiveModelOptions* o) {
  if (o->model.architecture_case() != ModelSpec::ARCHITECTURE_NOT_SET || o->restore.mode() != RestoreConfig::SPECIFIC ||
      o->restore.path().empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(o->restore.path());
  if (!header.ok()) return absl::Status(header.status().code(), absl::StrCat("restore: ", header.status().message()));
  *o->model.mutable_config() = header->config;
  return absl::OkStatus();
}

// The job spec equivalent to the options on `num_workers` ranks (recorded
// in checkpoints), which builds the model, optimizer and trainer as a batch
// job would.
JobSpec EquivalentSpec(const InteractiveModelOptions& o, int num_workers) {
  JobSpec spec;
  spec.set_name("interactive");
  *spec.mutable_model() = o.model;
  *spec.mutable_feature_lengths() = o.task_feature_lengths;
  spec.set_batch_size(o.batch_size);
  spec.set_num_workers(num_workers);
  spec.set_num_microbatches(o.num_microbatches);
  spec.set_seed(static_cast<int64_t>(o.init_random_seed));
  spec.set_dtype(o.dtype == BFLOAT16 ? BFLOAT16 : FLOAT32);
  *spec.mutable_optimizer() = o.optimizer;
  *spec.mutable_learning_rate() = o.learning_rate;
  *spec.mutable_loss() = o.loss;
  *spec.mutable_restore() = o.restore;
  spec.set_output_dir(o.output_dir);
  return spec;
}

}  // namespace

InteractiveModel::~InteractiveModel() = default;

absl::StatusOr<std::unique_ptr<InteractiveModel>> InteractiveModel::Create(InteractiveModelOptions options) {
  Collective* collective = options.collective;
  absl::StatusOr<std::unique_ptr<InteractiveModel>> m = CreateOnThisRank(std::move(options));
  if (collective != nullptr && collective->world_size() > 1) {
    TY_RETURN_IF_ERROR(AgreeOnOutcome(collective, m.status(), "creating the interactive model"));
  } else if (!m.ok()) {
    return m.status();
  }
  // The spec's checkpoint, on every rank the same step, and the vocabulary
  // its model reads.
  absl::StatusOr<RestoreOutcome> restored = (*m)->job_->Restore("");
  if (!restored.ok()) return restored.status();
  (*m)->vocabulary_ = (*m)->job_->vocabulary();
  if (collective == nullptr || collective->world_size() == 1) return m;
  // Rank 0's parameters everywhere (what a checkpoint or the seed gave it).
  try {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params;
    for (const auto& p : (*m)->job_->model()->named_parameters()) params.push_back(p.value());
    TY_RETURN_IF_ERROR(collective->Broadcast(params, 0));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("broadcasting the parameters: ", e.what()));
  }
  return m;
}

absl::StatusOr<std::unique_ptr<InteractiveModel>> InteractiveModel::CreateOnThisRank(InteractiveModelOptions options) {
  TY_RETURN_IF_ERROR(CheckOptions(options));
  SetDefaults(&options);
  if (options.restore.mode() == RestoreConfig::ALL) {
    return absl::InvalidArgumentError(
        "restore.mode: ALL is for EVALUATION and INFERENCE jobs; an interactive model restores one checkpoint "
        "(LATEST, SPECIFIC or NONE)");
  }
  if (options.output_dir.empty() && options.restore.mode() == RestoreConfig::LATEST && options.restore.path().empty()) {
    return absl::InvalidArgumentError(
        "output_dir: required to restore LATEST without restore.path (or restore a SPECIFIC checkpoint)");
  }
  TY_RETURN_IF_ERROR(ModelFromCheckpoint(&options));
  std::unique_ptr<InteractiveModel> m(new InteractiveModel);
  m->options_ = options;
  try {
    absl::StatusOr<ModelConfig> config = ResolveModelConfig(options.model);
    if (!config.ok()) return absl::Status(config.status().code(), absl::StrCat("model: ", config.status().message()));
    if (options.collective != nullptr) {
      m->collective_ = options.collective;
    } else {
      m->own_collective_ = std::make_unique<LocalCollective>();
      m->collective_ = m->own_collective_.get();
    }
    m->spec_ = EquivalentSpec(options, m->collective_->world_size());

    std::error_code ec;
    if (!options.output_dir.empty() && m->collective_->rank() == 0) {
      std::filesystem::create_directories(options.output_dir, ec);
    }
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("output_dir: cannot create ", options.output_dir, ": ", ec.message()));
    }
    TrainingJobOptions job;
    job.id = "interactive";
    job.device = options.device;
    // A stop request is a preemption: the emergency checkpoint.
    job.stop = options.preemption_requested;
    job.preempted = options.preemption_requested;
    job.task_data = false;  // batches come from the caller's examples
    job.vocabulary_path = options.vocabulary_path;
    job.vocabulary_extra_ids = options.vocabulary_extra_ids;
    TY_ASSIGN_OR_RETURN(m->job_, TrainingJob::Create(m->spec_, m->collective_, job));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the interactive model: ", e.what()));
  }
  return m;
}

int64_t InteractiveModel::step() const { return job_->step(); }

absl::StatusOr<std::vector<NaturalExample>> InteractiveModel::Preprocess(
    const std::vector<NaturalExample>& examples, const std::vector<Preprocessor>& preprocessors) const {
  return ApplyPreprocessors(examples, preprocessors);
}

absl::StatusOr<T5Batch> InteractiveModel::MakeBatch(const std::vector<NaturalExample>& examples, bool need_targets,
                                                    int64_t* truncated,
                                                    const std::vector<TokenPreprocessor>& token_preprocessors) const {
  return MakeRows(Unpreprocessed(examples), 0, examples.size(), need_targets, token_preprocessors, truncated, nullptr);
}

InteractiveModel::Prepared InteractiveModel::Unpreprocessed(const std::vector<NaturalExample>& examples) {
  Prepared p{examples, std::vector<int64_t>(examples.size())};
  for (size_t i = 0; i < examples.size(); ++i) p.indices[i] = static_cast<int64_t>(i);
  return p;
}

absl::StatusOr<T5Batch> InteractiveModel::MakeRows(const Prepared& prepared, size_t begin, size_t end,
                                                   bool need_targets, const std::vector<TokenPreprocessor>& tokens,
                                                   int64_t* truncated, Inference* texts) const {
  const std::vector<NaturalExample> examples(prepared.examples.begin() + begin, prepared.examples.begin() + end);
  if (tokens.empty()) {
    for (size_t i = 0; texts != nullptr && i < examples.size(); ++i) {
      texts->inputs.push_back(examples[i].input);
      texts->targets.push_back(examples[i].target.value_or(""));
    }
    return TokenizeAndBatch(examples, need_targets, *vocabulary_, options_.add_eos, options_.task_feature_lengths,
                            truncated);
  }
  Task task;
  task.name = "interactive";
  task.vocabulary = vocabulary_;
  task.add_eos = options_.add_eos;
  task.token_preprocessors = tokens;
  const std::vector<int64_t> indices(prepared.indices.begin() + begin, prepared.indices.begin() + end);
  TY_ASSIGN_OR_RETURN(std::vector<TokenizedExample> tokenized,
                      TokenizeThroughTask(examples, indices, task, options_.init_random_seed, step()));
  for (size_t i = 0; texts != nullptr && i < tokenized.size(); ++i) {
    TY_ASSIGN_OR_RETURN(std::string inputs, vocabulary_->Decode(tokenized[i].inputs));
    TY_ASSIGN_OR_RETURN(std::string targets, vocabulary_->Decode(tokenized[i].targets));
    texts->inputs.push_back(std::move(inputs));
    texts->targets.push_back(std::move(targets));
  }
  return BatchTokens(tokenized, options_.task_feature_lengths, truncated);
}

absl::StatusOr<MetricResults> InteractiveModel::TrainOnBatch(BatchIterator* batches) {
  absl::StatusOr<std::map<std::string, double>> summary;
  try {
    summary = job_->trainer()->Train(batches, 1);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("train step: ", e.what()));
  }
  if (IsPreemptionError(summary.status())) {
    // T5X's behaviour: the emergency checkpoint of the last completed step.
    absl::StatusOr<std::string> saved = SaveCheckpoint();
    if (!saved.ok()) {
      return absl::AbortedError(
          absl::StrCat("preempted at step ", step(), "; the emergency checkpoint failed: ", saved.status().message()));
    }
    return absl::AbortedError(absl::StrCat("preempted at step ", step(), "; emergency checkpoint ", *saved));
  }
  if (!summary.ok()) return summary.status();
  return MetricResults(summary->begin(), summary->end());
}

absl::StatusOr<MetricResults> InteractiveModel::TrainStep(const std::vector<NaturalExample>& examples) {
  return TrainStepWithPreprocessors(examples, {});
}

absl::StatusOr<MetricResults> InteractiveModel::TrainStepWithPreprocessors(
    const std::vector<NaturalExample>& examples, const InteractivePreprocessors& preprocessors) {
  Prepared prepared;
  TY_ASSIGN_OR_RETURN(prepared.examples, ApplyPreprocessors(examples, preprocessors.text, &prepared.indices));
  const size_t left = prepared.examples.size();
  if (static_cast<int>(left) < options_.batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainStep: ", left, " example(s)",
        left == examples.size() ? "" : absl::StrCat(" left of ", examples.size(), " after the preprocessors"),
        "; at least batch_size (", options_.batch_size, ") are needed"));
  }
  int64_t truncated = 0;
  TY_ASSIGN_OR_RETURN(T5Batch batch, MakeRows(prepared, 0, static_cast<size_t>(options_.batch_size),
                                              /*need_targets=*/true, preprocessors.tokens, &truncated, nullptr));
  const int64_t per_rank = options_.batch_size / world_size();
  OneBatch one(batch.Slice(rank() * per_rank, per_rank), DataMetrics(batch, truncated));
  return TrainOnBatch(&one);
}

absl::StatusOr<MetricResults> InteractiveModel::TrainStepFromBatchIterator(BatchIterator* iterator) {
  if (iterator == nullptr) return absl::InvalidArgumentError("TrainStepFromBatchIterator: no iterator");
  return TrainOnBatch(iterator);
}

absl::StatusOr<Inference> InteractiveModel::InferWithPreprocessors(InferenceType mode,
                                                                   const std::vector<NaturalExample>& examples,
                                                                   const InteractivePreprocessors& preprocessors,
                                                                   const DecodeOptions* decode) {
  Prepared prepared;
  TY_ASSIGN_OR_RETURN(prepared.examples, ApplyPreprocessors(examples, preprocessors.text, &prepared.indices));
  return InferPrepared(mode, prepared, preprocessors.tokens, decode);
}

absl::StatusOr<Inference> InteractiveModel::InferPrepared(InferenceType mode, const Prepared& prepared,
                                                          const std::vector<TokenPreprocessor>& tokens,
                                                          const DecodeOptions* decode) {
  const bool score = mode == InferenceType::kScore;
  const size_t n = prepared.examples.size();
  TY_RETURN_IF_ERROR(CheckExamples(prepared.examples, /*need_targets=*/score, !tokens.empty()).status());
  DecodeOptions options = decode != nullptr ? *decode : options_.decode;
  if (options.max_decode_length < 1) options.max_decode_length = options_.task_feature_lengths.targets();
  options.compute_dtype = options_.dtype == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
  Inference out;
  try {
    for (size_t start = 0; start < n; start += options_.batch_size) {
      const size_t end = std::min(n, start + static_cast<size_t>(options_.batch_size));
      int64_t truncated = 0;
      TY_ASSIGN_OR_RETURN(T5Batch batch, MakeRows(prepared, start, end, score, tokens, &truncated, &out));
      out.truncated_examples += truncated;
      std::vector<uint64_t> keys;
      for (size_t i = start; i < end; ++i) keys.push_back(static_cast<uint64_t>(prepared.indices[i]));
      TY_RETURN_IF_ERROR(InferBatch(batch, keys, score, options, &out));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("inference: ", e.what()));
  }
  if (out.truncated_examples > 0) {
    spdlog::warn("interactive: {} of {} example(s) were cut to the feature lengths (inputs {}, targets {})",
                 out.truncated_examples, n, options_.task_feature_lengths.inputs(),
                 options_.task_feature_lengths.targets());
  }
  return out;
}

absl::Status InteractiveModel::InferBatch(const T5Batch& batch, const std::vector<uint64_t>& keys, bool score,
                                          const DecodeOptions& options, Inference* out) {
  // This rank's rows: a contiguous share of batch_size / world_size rows
  // (fewer, or none, where the batch is shorter), decoded or scored and
  // gathered back in the batch's order.
  const int64_t rows = batch.batch_size();
  const int64_t per_rank = options_.batch_size / world_size();
  const int64_t first = std::min<int64_t>(rank() * per_rank, rows);
  const int64_t own = std::min<int64_t>(per_rank, rows - first);
  const T5Batch local = batch.Slice(first, own);
  DistributedDecodeOptions decode;
  decode.predict = !score;
  decode.score = score;
  decode.decode = options;
  decode.decode.row_keys.assign(keys.begin() + first, keys.begin() + first + own);
  decode.rows_per_rank = per_rank;
  TY_ASSIGN_OR_RETURN(DecodedRows gathered,
                      DecodeAndGather(job_->model(), own > 0 ? &local : nullptr, decode, collective_));
  auto append = [](const torch::Tensor& t, std::vector<double>* to) {
    const torch::Tensor d = t.to(torch::kDouble).contiguous();
    to->insert(to->end(), d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  };
  if (score) {
    append(gathered.target_scores, &out->scores);
    return absl::OkStatus();
  }
  for (int64_t r = 0; r < gathered.size(); ++r) {
    out->predictions.push_back(DecodeRow(*vocabulary_, gathered.predictions[r]));
  }
  append(gathered.prediction_scores, &out->aux["scores"]);
  return absl::OkStatus();
}

absl::StatusOr<Inference> InteractiveModel::PredictWithAux(const std::vector<NaturalExample>& examples) {
  return InferWithPreprocessors(InferenceType::kPredictWithAux, examples, {});
}

absl::StatusOr<std::vector<double>> InteractiveModel::Score(const std::vector<NaturalExample>& examples) {
  TY_ASSIGN_OR_RETURN(Inference inference, InferWithPreprocessors(InferenceType::kScore, examples, {}));
  return inference.scores;
}

absl::StatusOr<MetricResults> InteractiveModel::Evaluate(const std::vector<NaturalExample>& examples,
                                                         const std::vector<MetricFn>& metric_fns) {
  return EvaluateWithPreprocessors(examples, {}, metric_fns);
}

absl::StatusOr<MetricResults> InteractiveModel::EvaluateWithPreprocessors(const std::vector<NaturalExample>& examples,
                                                                          const InteractivePreprocessors& preprocessors,
                                                                          const std::vector<MetricFn>& metric_fns,
                                                                          const Postprocessor& postprocessor) {
  if (metric_fns.empty()) return absl::InvalidArgumentError("Evaluate: no metric functions given");
  Prepared prepared;
  TY_ASSIGN_OR_RETURN(prepared.examples, ApplyPreprocessors(examples, preprocessors.text, &prepared.indices));
  return EvaluateBatches({prepared}, preprocessors.tokens, metric_fns, postprocessor);
}

absl::StatusOr<MetricResults> InteractiveModel::EvaluateBatches(const std::vector<Prepared>& batches,
                                                                const std::vector<TokenPreprocessor>& tokens,
                                                                const std::vector<MetricFn>& metric_fns,
                                                                const Postprocessor& postprocessor) {
  bool need_predictions = false, need_scores = false;
  for (const MetricFn& f : metric_fns) {
    need_predictions |= f.needs_predictions();
    need_scores |= f.needs_scores();
  }
  Inference predicted, scored;
  for (const Prepared& batch : batches) {
    TY_RETURN_IF_ERROR(CheckExamples(batch.examples, /*need_targets=*/true, !tokens.empty()).status());
    if (need_predictions) {
      TY_ASSIGN_OR_RETURN(Inference p, InferPrepared(InferenceType::kPredictWithAux, batch, tokens, nullptr));
      AppendInference(std::move(p), &predicted);
    }
    if (need_scores) {
      TY_ASSIGN_OR_RETURN(Inference s, InferPrepared(InferenceType::kScore, batch, tokens, nullptr));
      AppendInference(std::move(s), &scored);
    }
  }
  // The targets the model was given (with token preprocessors, theirs).
  std::vector<std::string> targets;
  for (const std::string& t : need_predictions ? predicted.targets : scored.targets)
    targets.push_back(postprocessor ? postprocessor(t, true) : t);
  std::vector<std::string> predictions;
  for (const std::string& p : predicted.predictions) predictions.push_back(postprocessor ? postprocessor(p, false) : p);
  return ComputeMetrics(metric_fns, targets, need_predictions ? &predictions : nullptr,
                        need_predictions ? &predicted.aux : nullptr, need_scores ? &scored.scores : nullptr);
}

absl::StatusOr<TrainLoopResult> InteractiveModel::TrainLoop(int num_steps, int eval_period,
                                                            const Batches& train_batches,
                                                            const Batches& predict_batches,
                                                            const Batches& score_batches, const Batches& eval_batches,
                                                            const std::vector<MetricFn>& metric_fns) {
  if (num_steps < 1) return absl::InvalidArgumentError(absl::StrCat("num_steps: ", num_steps, "; must be >= 1"));
  if (eval_period < 1) return absl::InvalidArgumentError(absl::StrCat("eval_period: ", eval_period, "; must be >= 1"));
  if (!eval_batches.empty() && metric_fns.empty()) {
    return absl::InvalidArgumentError("eval_batches given without metric functions");
  }
  TrainLoopResult result;
  for (int i = 0; i < num_steps; ++i) {
    if (!train_batches.empty()) TY_RETURN_IF_ERROR(TrainStep(train_batches[i % train_batches.size()]).status());
    // T5X's counting: the iteration's index from 0, so the first
    // evaluation follows the first step.
    if (i % eval_period != 0) continue;
    result.evaluated_steps.push_back(step());
    result.predictions = result.scores = Inference();
    for (const std::vector<NaturalExample>& batch : predict_batches) {
      TY_ASSIGN_OR_RETURN(Inference p, PredictWithAux(batch));
      AppendInference(std::move(p), &result.predictions);
    }
    for (const std::vector<NaturalExample>& batch : score_batches) {
      TY_ASSIGN_OR_RETURN(Inference s, InferWithPreprocessors(InferenceType::kScore, batch, {}));
      AppendInference(std::move(s), &result.scores);
    }
    if (!eval_batches.empty()) {
      std::vector<Prepared> batches;
      for (const std::vector<NaturalExample>& batch : eval_batches) batches.push_back(Unpreprocessed(batch));
      TY_ASSIGN_OR_RETURN(result.metrics, EvaluateBatches(batches, {}, metric_fns, nullptr));
    }
  }
  return result;
}

absl::StatusOr<std::string> InteractiveModel::SaveCheckpoint() {
  if (options_.output_dir.empty()) {
    return absl::FailedPreconditionError("SaveCheckpoint: this interactive model has no output_dir");
  }
  const std::string dir = absl::StrCat(options_.output_dir, "/checkpoint_", step());
  if (dir == last_saved_) return dir;
  // Every rank holds the same state; rank 0 writes it, and every rank
  // learns whether that worked.
  absl::StatusOr<std::string> written = job_->SaveCheckpoint(/*wait=*/true);
  TY_RETURN_IF_ERROR(AgreeOnOutcome(collective_, written.status(), absl::StrCat("saving ", dir)));
  last_saved_ = dir;
  spdlog::info("interactive: saved {}", dir);
  return dir;
}

}  // namespace trainyard
