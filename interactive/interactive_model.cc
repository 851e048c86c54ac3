#include "interactive/interactive_model.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "data/bundled.h"
#include "data/feature_converter.h"
#include "data/task_definition.h"
#include "google/protobuf/util/json_util.h"
#include "model/presets.h"
#include "model/weights.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "trainer/learning_rate.h"
#include "trainer/restore.h"
#include "trainer/task_batches.h"
#include "trainer/train_checkpoint.h"

namespace trainyard {
namespace {

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

std::map<std::string, double> DataMetrics(const T5Batch& batch, int64_t truncated) {
  const double inputs = static_cast<double>(batch.encoder_input_tokens.numel());
  const double targets = static_cast<double>(batch.decoder_target_tokens.numel());
  return {{"data/examples", static_cast<double>(batch.batch_size())},
          {"data/truncated_examples", static_cast<double>(truncated)},
          {"non_padding_fraction/inputs", batch.encoder_input_tokens.gt(0).sum().item<double>() / inputs},
          {"non_padding_fraction/targets", batch.decoder_target_tokens.gt(0).sum().item<double>() / targets}};
}

// Every rank's verdict on a step that each ran alone: OK when all
// succeeded; else this rank's own error, or kAborted naming the ranks that
// failed. A collective failure is returned as is.
absl::Status AgreeAcrossRanks(Collective* collective, const absl::Status& mine, const std::string& what) {
  if (collective->world_size() == 1) return mine;
  std::vector<torch::Tensor> failed = {torch::zeros({collective->world_size()}, torch::kFloat)};
  if (!mine.ok()) failed[0][collective->rank()] = 1.0f;
  TY_RETURN_IF_ERROR(collective->AllReduce(failed, ReduceOp::kSum));
  if (!mine.ok()) return mine;
  std::vector<std::string> ranks;
  for (int r = 0; r < collective->world_size(); ++r) {
    if (failed[0][r].item<float>() > 0) ranks.push_back(absl::StrCat(r));
  }
  if (ranks.empty()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(what, " failed on rank(s) ", absl::StrJoin(ranks, ", "),
                                         " (their errors are in their logs)"));
}

absl::Status CheckOptions(const InteractiveModelOptions& o) {
  if (o.batch_size < 1) return absl::InvalidArgumentError(absl::StrCat("batch_size: ", o.batch_size, "; must be >= 1"));
  const int world = o.collective != nullptr ? o.collective->world_size() : 1;
  if (o.batch_size % world != 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size: ", o.batch_size, " does not divide over the ",
                                                   world, " ranks of the collective"));
  }
  if (o.task_feature_lengths.inputs() < 1 || o.task_feature_lengths.targets() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task_feature_lengths: inputs ", o.task_feature_lengths.inputs(), ", targets ",
        o.task_feature_lengths.targets(), "; both must be >= 1"));
  }
  if (o.num_microbatches < 1 || (o.batch_size / world) % o.num_microbatches != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_microbatches: ", o.num_microbatches,
                                                   " does not divide batch_size ", o.batch_size,
                                                   world > 1 ? absl::StrCat(" / ", world, " ranks") : ""));
  }
  if (o.decode.max_decode_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode.max_decode_length: ", o.decode.max_decode_length, "; must be >= 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CheckExamples(const std::vector<NaturalExample>& examples, bool need_targets) {
  if (examples.empty()) return absl::InvalidArgumentError("no examples given");
  for (size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].input.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("example ", i, ": the input is empty"));
    }
    if (need_targets && !examples[i].target.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("example ", i, " (\"", examples[i].input,
                                                     "\"): a target is needed here; give {input, target}"));
    }
  }
  return static_cast<int64_t>(examples.size());
}

// Tokenised, truncated, unpacked rows of `examples`, in order.
absl::StatusOr<T5Batch> TokenizeAndBatch(const std::vector<NaturalExample>& examples, bool need_targets,
                                         const Vocabulary& vocabulary, bool add_eos, const FeatureLengths& lengths,
                                         int64_t* truncated) {
  TY_RETURN_IF_ERROR(CheckExamples(examples, need_targets).status());
  std::vector<TokenizedExample> tokenized;
  for (size_t i = 0; i < examples.size(); ++i) {
    TokenizedExample t;
    absl::StatusOr<std::vector<int>> inputs = vocabulary.Encode(examples[i].input);
    if (!inputs.ok()) return absl::InvalidArgumentError(absl::StrCat("example ", i, ": ", inputs.status().message()));
    t.inputs.assign(inputs->begin(), inputs->end());
    if (examples[i].target.has_value()) {
      absl::StatusOr<std::vector<int>> targets = vocabulary.Encode(*examples[i].target);
      if (!targets.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("example ", i, ": ", targets.status().message()));
      }
      t.targets.assign(targets->begin(), targets->end());
      if (add_eos) t.targets.push_back(Vocabulary::kEosId);
    }
    if (add_eos) t.inputs.push_back(Vocabulary::kEosId);
    tokenized.push_back(std::move(t));
  }
  FeatureConverter converter(lengths.inputs(), lengths.targets(), /*pack=*/false);
  const ConvertedBatch converted = converter.Convert(tokenized);
  if (truncated != nullptr) *truncated = converted.truncated_examples;
  return ToT5Batch(converted);
}

// Text preprocessors over natural examples; dropped ones are left out.
absl::StatusOr<std::vector<NaturalExample>> ApplyPreprocessors(const std::vector<NaturalExample>& examples,
                                                               const std::vector<Preprocessor>& preprocessors) {
  if (preprocessors.empty()) return examples;
  std::vector<NaturalExample> out;
  for (size_t i = 0; i < examples.size(); ++i) {
    Example ex = {{"inputs", examples[i].input}};
    if (examples[i].target.has_value()) ex["targets"] = *examples[i].target;
    bool dropped = false;
    for (const Preprocessor& preprocess : preprocessors) {
      absl::StatusOr<absl::optional<Example>> next = preprocess(std::move(ex));
      if (!next.ok()) {
        return absl::Status(next.status().code(),
                            absl::StrCat("example ", i, ": a preprocessor failed: ", next.status().message()));
      }
      if (!next->has_value()) {
        dropped = true;
        break;
      }
      ex = std::move(**next);
    }
    if (dropped) continue;
    auto inputs = ex.find("inputs");
    if (inputs == ex.end()) {
      return absl::InvalidArgumentError(absl::StrCat("example ", i, ": no \"inputs\" after the preprocessors"));
    }
    auto targets = ex.find("targets");
    out.push_back(targets == ex.end() ? NaturalExample(inputs->second)
                                      : NaturalExample(inputs->second, targets->second));
  }
  return out;
}

// Ready batches, one after another.
class BatchList : public BatchIterator {
 public:
  explicit BatchList(std::vector<std::pair<T5Batch, int64_t>> batches) : batches_(std::move(batches)) {}
  absl::StatusOr<T5Batch> Next() override {
    if (next_ == batches_.size()) return absl::OutOfRangeError("the examples are used up");
    examples_ += batches_[next_].first.encoder_input_tokens.size(0);
    truncated_ += batches_[next_].second;
    return batches_[next_++].first;
  }
  std::map<std::string, double> TakeDataMetrics() override {
    std::map<std::string, double> m = {{"data/examples", static_cast<double>(examples_)},
                                       {"data/truncated_examples", static_cast<double>(truncated_)}};
    examples_ = truncated_ = 0;
    return m;
  }

 private:
  std::vector<std::pair<T5Batch, int64_t>> batches_;
  size_t next_ = 0;
  int64_t examples_ = 0, truncated_ = 0;
};

}  // namespace

std::string DecodeRow(const Vocabulary& vocab, const torch::Tensor& row) {
  const torch::Tensor ids = row.to(torch::kInt).contiguous();
  absl::StatusOr<std::string> text = vocab.Decode(absl::MakeConstSpan(ids.data_ptr<int>(), ids.numel()));
  return text.ok() ? *text : "";
}

absl::StatusOr<std::unique_ptr<BatchIterator>> GetDatasetFromNaturalTextExamples(
    const std::vector<NaturalExample>& examples, const std::vector<Preprocessor>& preprocessors,
    const FeatureLengths& task_feature_lengths, const Vocabulary& vocabulary, int batch_size, bool add_eos,
    bool need_targets) {
  if (batch_size < 1) return absl::InvalidArgumentError(absl::StrCat("batch_size: ", batch_size, "; must be >= 1"));
  if (task_feature_lengths.inputs() < 1 || task_feature_lengths.targets() < 1) {
    return absl::InvalidArgumentError("task_feature_lengths: inputs and targets must be >= 1");
  }
  TY_ASSIGN_OR_RETURN(std::vector<NaturalExample> prepared, ApplyPreprocessors(examples, preprocessors));
  TY_RETURN_IF_ERROR(CheckExamples(prepared, need_targets).status());
  std::vector<std::pair<T5Batch, int64_t>> batches;
  try {
    for (size_t start = 0; start < prepared.size(); start += static_cast<size_t>(batch_size)) {
      const size_t end = std::min(prepared.size(), start + static_cast<size_t>(batch_size));
      int64_t truncated = 0;
      TY_ASSIGN_OR_RETURN(T5Batch batch,
                          TokenizeAndBatch({prepared.begin() + start, prepared.begin() + end}, need_targets,
                                           vocabulary, add_eos, task_feature_lengths, &truncated));
      batches.emplace_back(std::move(batch), truncated);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("batching the examples: ", e.what()));
  }
  return std::unique_ptr<BatchIterator>(new BatchList(std::move(batches)));
}

InteractiveModel::~InteractiveModel() {
  if (trainer_) trainer_->Close().IgnoreError();
}

absl::StatusOr<std::unique_ptr<InteractiveModel>> InteractiveModel::Create(InteractiveModelOptions options) {
  Collective* collective = options.collective;
  absl::StatusOr<std::unique_ptr<InteractiveModel>> m = CreateOnThisRank(std::move(options));
  if (collective == nullptr || collective->world_size() == 1) return m;
  TY_RETURN_IF_ERROR(AgreeAcrossRanks(collective, m.status(), "creating the interactive model"));
  // Rank 0's parameters everywhere (what a checkpoint or the seed gave it).
  try {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params;
    for (const auto& p : (*m)->model_->named_parameters()) params.push_back(p.value());
    TY_RETURN_IF_ERROR(collective->Broadcast(params, 0));
    // The optimizer state is each rank's own restore: it must be the same
    // checkpoint everywhere.
    std::vector<torch::Tensor> steps = {torch::full({1}, static_cast<double>((*m)->step()), torch::kDouble),
                                        torch::full({1}, -static_cast<double>((*m)->step()), torch::kDouble)};
    TY_RETURN_IF_ERROR(collective->AllReduce(steps, ReduceOp::kMax));
    const int64_t highest = static_cast<int64_t>(steps[0].item<double>());
    const int64_t lowest = static_cast<int64_t>(-steps[1].item<double>());
    if (highest != lowest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ranks restored different steps (", lowest, " to ", highest,
          "): the checkpoint (restore.path or output_dir) must be the same files on every rank"));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("broadcasting the parameters: ", e.what()));
  }
  return m;
}

absl::StatusOr<std::unique_ptr<InteractiveModel>> InteractiveModel::CreateOnThisRank(InteractiveModelOptions options) {
  TY_RETURN_IF_ERROR(CheckOptions(options));
  if (options.optimizer.optimizer_case() == OptimizerConfig::OPTIMIZER_NOT_SET) options.optimizer.mutable_adafactor();
  if (options.learning_rate.factors().empty()) {
    options.learning_rate.set_factors("constant");
    if (!options.learning_rate.has_base_learning_rate()) options.learning_rate.set_base_learning_rate(0.01f);
  }
  if (options.decode.max_decode_length == 0) options.decode.max_decode_length = options.task_feature_lengths.targets();
  if (options.restore.mode() == RestoreConfig::MODE_UNSPECIFIED) options.restore.set_mode(RestoreConfig::LATEST);

  if (options.output_dir.empty() && options.restore.mode() == RestoreConfig::LATEST && options.restore.path().empty()) {
    return absl::InvalidArgumentError(
        "output_dir: required to restore LATEST without restore.path (or restore a SPECIFIC checkpoint)");
  }
  // No model given: the restored checkpoint's.
  if (options.model.architecture_case() == ModelSpec::ARCHITECTURE_NOT_SET &&
      options.restore.mode() == RestoreConfig::SPECIFIC && !options.restore.path().empty()) {
    absl::StatusOr<CheckpointHeader> header = ReadCheckpointHeader(options.restore.path());
    if (!header.ok()) {
      return absl::Status(header.status().code(), absl::StrCat("restore: ", header.status().message()));
    }
    *options.model.mutable_config() = header->config;
  }
  std::unique_ptr<InteractiveModel> m(new InteractiveModel);
  m->options_ = options;
  try {
    std::string vocab_path = options.vocabulary_path;
    if (vocab_path.empty()) {
      TY_ASSIGN_OR_RETURN(vocab_path, FindBundledFile("vocab/digits_to_words.model"));
    }
    absl::StatusOr<std::unique_ptr<Vocabulary>> vocab = Vocabulary::Load(vocab_path);
    if (!vocab.ok()) {
      return absl::Status(vocab.status().code(), absl::StrCat("vocabulary_path: ", vocab.status().message()));
    }
    m->vocabulary_ = std::move(*vocab);

    absl::StatusOr<ModelConfig> config = ResolveModelConfig(options.model);
    if (!config.ok()) return absl::Status(config.status().code(), absl::StrCat("model: ", config.status().message()));
    if (config->vocab_size() < m->vocabulary_->size()) {
      return absl::InvalidArgumentError(absl::StrCat("model: vocab_size ", config->vocab_size(),
                                                     " is smaller than the vocabulary's ", m->vocabulary_->size(),
                                                     " pieces"));
    }
    ModelOptions model_options;
    model_options.device = options.device;
    model_options.compute_dtype = options.dtype == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
    model_options.init_seed = options.init_random_seed;
    TY_ASSIGN_OR_RETURN(m->model_, EncoderDecoderModel::Create(*config, model_options));
    NamedTensors params;
    for (const auto& p : m->model_->named_parameters()) params.emplace_back(p.key(), p.value());
    TY_ASSIGN_OR_RETURN(m->optimizer_, CreateOptimizer(options.optimizer, params));
    TY_ASSIGN_OR_RETURN(LearningRateCallable lr, LearningRateCallable::Create(options.learning_rate));
    if (options.collective != nullptr) {
      m->collective_ = options.collective;
    } else {
      m->own_collective_ = std::make_unique<LocalCollective>();
      m->collective_ = m->own_collective_.get();
    }

    // The equivalent job spec (recorded in checkpoints).
    JobSpec& spec = m->spec_;
    spec.set_name("interactive");
    *spec.mutable_model() = options.model;
    *spec.mutable_feature_lengths() = options.task_feature_lengths;
    spec.set_batch_size(options.batch_size);
    spec.set_num_workers(m->collective_->world_size());
    spec.set_num_microbatches(options.num_microbatches);
    spec.set_seed(static_cast<int64_t>(options.init_random_seed));
    spec.set_dtype(options.dtype == BFLOAT16 ? BFLOAT16 : FLOAT32);
    *spec.mutable_optimizer() = options.optimizer;
    *spec.mutable_learning_rate() = options.learning_rate;
    *spec.mutable_loss() = options.loss;
    *spec.mutable_restore() = options.restore;
    spec.set_output_dir(options.output_dir);

    std::error_code ec;
    if (!options.output_dir.empty() && m->collective_->rank() == 0) {
      std::filesystem::create_directories(options.output_dir, ec);
    }
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("output_dir: cannot create ", options.output_dir, ": ", ec.message()));
    }
    std::vector<SkippedCheckpoint> skipped;
    absl::StatusOr<std::string> path = ChooseCheckpoint(options.restore, options.output_dir, &skipped);
    for (const SkippedCheckpoint& s : skipped) spdlog::warn("interactive: skipping a checkpoint: {}", s.why);
    if (!path.ok()) return path.status();
    if (!path->empty()) {
      absl::StatusOr<TrainCheckpoint> ckpt = ReadTrainCheckpoint(*path);
      if (!ckpt.ok()) return absl::Status(ckpt.status().code(), absl::StrCat("restore: ", ckpt.status().message()));
      TY_ASSIGN_OR_RETURN(bool with_optimizer, ApplyCheckpoint(*ckpt, options.restore, m->model_->network().get(),
                                                               m->optimizer_.get()));
      spdlog::info("interactive: restored {} (step {}){}", *path, ckpt->step,
                   with_optimizer ? "" : " (parameters only: a fresh optimizer)");
    }
    TrainerOptions trainer;
    trainer.num_microbatches = options.num_microbatches;
    trainer.loss = LossOptions::FromConfig(options.loss);
    trainer.seed = options.init_random_seed;
    trainer.summary_dir = options.output_dir;
    trainer.preemption_requested = options.preemption_requested;
    m->trainer_ = std::make_unique<Trainer>(m->model_.get(), m->optimizer_.get(), std::move(lr),
                                            m->collective_, trainer);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the interactive model: ", e.what()));
  }
  return m;
}

int64_t InteractiveModel::step() const { return trainer_->step(); }

absl::StatusOr<std::vector<NaturalExample>> InteractiveModel::Preprocess(
    const std::vector<NaturalExample>& examples, const std::vector<Preprocessor>& preprocessors) const {
  return ApplyPreprocessors(examples, preprocessors);
}

absl::StatusOr<T5Batch> InteractiveModel::MakeBatch(const std::vector<NaturalExample>& examples, bool need_targets,
                                                    int64_t* truncated) const {
  return TokenizeAndBatch(examples, need_targets, *vocabulary_, options_.add_eos, options_.task_feature_lengths,
                          truncated);
}

absl::StatusOr<MetricResults> InteractiveModel::TrainOnBatch(BatchIterator* batches) {
  absl::StatusOr<std::map<std::string, double>> summary;
  try {
    summary = trainer_->Train(batches, 1);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("train step: ", e.what()));
  }
  if (IsPreemptionError(summary.status())) {
    // T5X's behaviour: the emergency checkpoint of the last completed step.
    absl::StatusOr<std::string> saved = SaveCheckpoint();
    if (!saved.ok()) {
      return absl::AbortedError(absl::StrCat("preempted at step ", step(), "; the emergency checkpoint failed: ",
                                             saved.status().message()));
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
    const std::vector<NaturalExample>& examples, const std::vector<Preprocessor>& preprocessors) {
  TY_ASSIGN_OR_RETURN(std::vector<NaturalExample> prepared, Preprocess(examples, preprocessors));
  if (static_cast<int>(prepared.size()) < options_.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainStep: ", prepared.size(), " example(s)",
                     prepared.size() == examples.size() ? "" : absl::StrCat(" left of ", examples.size(),
                                                                             " after the preprocessors"),
                     "; at least batch_size (", options_.batch_size, ") are needed"));
  }
  prepared.erase(prepared.begin() + options_.batch_size, prepared.end());
  int64_t truncated = 0;
  TY_ASSIGN_OR_RETURN(T5Batch batch, MakeBatch(prepared, /*need_targets=*/true, &truncated));
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
                                                                   const std::vector<Preprocessor>& preprocessors,
                                                                   const DecodeOptions* decode) {
  TY_ASSIGN_OR_RETURN(std::vector<NaturalExample> prepared, Preprocess(examples, preprocessors));
  const bool score = mode == InferenceType::kScore;
  TY_RETURN_IF_ERROR(CheckExamples(prepared, /*need_targets=*/score).status());
  DecodeOptions options = decode != nullptr ? *decode : options_.decode;
  if (options.max_decode_length < 1) options.max_decode_length = options_.task_feature_lengths.targets();
  options.compute_dtype = options_.dtype == BFLOAT16 ? torch::kBFloat16 : torch::kFloat32;
  Inference out;
  for (const NaturalExample& e : prepared) {
    out.inputs.push_back(e.input);
    out.targets.push_back(e.target.value_or(""));
  }
  try {
    for (size_t start = 0; start < prepared.size(); start += options_.batch_size) {
      const size_t end = std::min(prepared.size(), start + static_cast<size_t>(options_.batch_size));
      const std::vector<NaturalExample> chunk(prepared.begin() + start, prepared.begin() + end);
      int64_t truncated = 0;
      TY_ASSIGN_OR_RETURN(T5Batch batch, MakeBatch(chunk, score, &truncated));
      out.truncated_examples += truncated;
      TY_RETURN_IF_ERROR(InferBatch(batch, score, options, &out));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("inference: ", e.what()));
  }
  if (out.truncated_examples > 0) {
    spdlog::warn("interactive: {} of {} example(s) were cut to the feature lengths (inputs {}, targets {})",
                 out.truncated_examples, prepared.size(), options_.task_feature_lengths.inputs(),
                 options_.task_feature_lengths.targets());
  }
  return out;
}

absl::Status InteractiveModel::InferBatch(const T5Batch& batch, bool score, const DecodeOptions& options,
                                          Inference* out) {
  const int64_t rows = batch.batch_size();
  auto append = [](const torch::Tensor& t, std::vector<double>* to) {
    const torch::Tensor d = t.to(torch::kDouble).contiguous();
    to->insert(to->end(), d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  };
  if (world_size() == 1) {
    if (score) {
      TY_ASSIGN_OR_RETURN(torch::Tensor scores, model_->ScoreBatch(batch));
      append(scores, &out->scores);
    } else {
      TY_ASSIGN_OR_RETURN(Predictions predicted, model_->PredictBatchWithAux(batch, options));
      for (int64_t r = 0; r < predicted.tokens.size(0); ++r) {
        out->predictions.push_back(DecodeRow(*vocabulary_, predicted.tokens[r]));
      }
      append(predicted.scores, &out->aux["scores"]);
    }
    return absl::OkStatus();
  }
  // This rank's rows: a contiguous share of batch_size / world_size rows;
  // where the batch is shorter, its first row stands in (and is dropped
  // after the gather), so that every rank runs the same shapes.
  const int64_t per_rank = options_.batch_size / world_size();
  std::vector<int64_t> mine(per_rank);
  for (int64_t i = 0; i < per_rank; ++i) {
    const int64_t row = rank() * per_rank + i;
    mine[i] = row < rows ? row : 0;
  }
  const T5Batch local = batch.SelectRows(torch::tensor(mine, torch::kLong));
  torch::Tensor scores, tokens;
  if (score) {
    TY_ASSIGN_OR_RETURN(scores, model_->ScoreBatch(local));
  } else {
    TY_ASSIGN_OR_RETURN(Predictions predicted, model_->PredictBatchWithAux(local, options));
    scores = predicted.scores;
    tokens = predicted.tokens.to(torch::kLong);
    if (tokens.size(1) < options.max_decode_length) {  // the same width on every rank
      tokens = torch::constant_pad_nd(tokens, {0, options.max_decode_length - tokens.size(1)}, 0);
    }
  }
  std::vector<torch::Tensor> gathered;
  TY_RETURN_IF_ERROR(collective_->AllGather(scores.to(torch::kDouble).contiguous(), &gathered));
  const torch::Tensor all_scores = torch::cat(gathered).narrow(0, 0, rows);
  if (score) {
    append(all_scores, &out->scores);
    return absl::OkStatus();
  }
  TY_RETURN_IF_ERROR(collective_->AllGather(tokens.contiguous(), &gathered));
  const torch::Tensor all_tokens = torch::cat(gathered).narrow(0, 0, rows);
  for (int64_t r = 0; r < rows; ++r) out->predictions.push_back(DecodeRow(*vocabulary_, all_tokens[r]));
  append(all_scores, &out->aux["scores"]);
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

absl::StatusOr<MetricResults> InteractiveModel::EvaluateWithPreprocessors(
    const std::vector<NaturalExample>& examples, const std::vector<Preprocessor>& preprocessors,
    const std::vector<MetricFn>& metric_fns, const Postprocessor& postprocessor) {
  if (metric_fns.empty()) return absl::InvalidArgumentError("Evaluate: no metric functions given");
  TY_ASSIGN_OR_RETURN(std::vector<NaturalExample> prepared, Preprocess(examples, preprocessors));
  TY_RETURN_IF_ERROR(CheckExamples(prepared, /*need_targets=*/true).status());
  bool need_predictions = false, need_scores = false;
  for (const MetricFn& f : metric_fns) {
    need_predictions |= f.needs_predictions();
    need_scores |= f.needs_scores();
  }
  std::optional<Inference> predicted, scored;
  if (need_predictions) {
    TY_ASSIGN_OR_RETURN(predicted, InferWithPreprocessors(InferenceType::kPredictWithAux, prepared, {}));
  }
  if (need_scores) {
    TY_ASSIGN_OR_RETURN(scored, InferWithPreprocessors(InferenceType::kScore, prepared, {}));
  }
  std::vector<std::string> targets;
  for (const NaturalExample& e : prepared) targets.push_back(postprocessor ? postprocessor(*e.target, true) : *e.target);
  std::vector<std::string> predictions;
  if (predicted) {
    for (const std::string& p : predicted->predictions) predictions.push_back(postprocessor ? postprocessor(p, false) : p);
  }
  return ComputeMetrics(metric_fns, targets, predicted ? &predictions : nullptr, predicted ? &predicted->aux : nullptr,
                        scored ? &scored->scores : nullptr);
}

absl::StatusOr<TrainLoopResult> InteractiveModel::TrainLoop(int num_steps, int eval_period,
                                                            const Batches& train_batches,
                                                            const Batches& predict_batches,
                                                            const Batches& score_batches, const Batches& eval_batches,
                                                            const std::vector<MetricFn>& metric_fns) {
  if (num_steps < 1) return absl::InvalidArgumentError(absl::StrCat("num_steps: ", num_steps, "; must be >= 1"));
  if (eval_period < 1) return absl::InvalidArgumentError(absl::StrCat("eval_period: ", eval_period, "; must be >= 1"));
  const int num_evals = num_steps / eval_period;
  auto check = [](const char* what, const Batches& batches, int needed) -> absl::Status {
    if (batches.size() > 1 && static_cast<int>(batches.size()) < needed) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", batches.size(), " batches given, ", needed,
                                                     " needed (or exactly one, used every time)"));
    }
    return absl::OkStatus();
  };
  TY_RETURN_IF_ERROR(check("train_batches", train_batches, num_steps));
  TY_RETURN_IF_ERROR(check("predict_batches", predict_batches, num_evals));
  TY_RETURN_IF_ERROR(check("score_batches", score_batches, num_evals));
  TY_RETURN_IF_ERROR(check("eval_batches", eval_batches, num_evals));
  if (!eval_batches.empty() && metric_fns.empty()) {
    return absl::InvalidArgumentError("eval_batches given without metric functions");
  }
  auto pick = [](const Batches& batches, int i) -> const std::vector<NaturalExample>* {
    if (batches.empty()) return nullptr;
    return &batches[batches.size() == 1 ? 0 : i];
  };
  TrainLoopResult result;
  for (int i = 0; i < num_steps; ++i) {
    if (const auto* batch = pick(train_batches, i)) TY_RETURN_IF_ERROR(TrainStep(*batch).status());
    if ((i + 1) % eval_period != 0) continue;
    const int e = (i + 1) / eval_period - 1;
    if (const auto* batch = pick(predict_batches, e)) {
      TY_ASSIGN_OR_RETURN(result.predictions, PredictWithAux(*batch));
    }
    if (const auto* batch = pick(score_batches, e)) {
      TY_ASSIGN_OR_RETURN(result.scores, InferWithPreprocessors(InferenceType::kScore, *batch, {}));
    }
    if (const auto* batch = pick(eval_batches, e)) {
      TY_ASSIGN_OR_RETURN(result.metrics, Evaluate(*batch, metric_fns));
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
  absl::Status written;
  if (rank() == 0) {  // every rank holds the same state
    std::string spec_json;
    (void)google::protobuf::util::MessageToJsonString(spec_, &spec_json);
    try {
      TrainSnapshot snapshot = MakeSnapshot(*model_->network(), *optimizer_, step(), /*world_size=*/1,
                                            /*data_states=*/{}, spec_json, "trainyard interactive model");
      written = WriteTrainCheckpoint(dir, snapshot, torch::kFloat);
    } catch (const std::exception& e) {
      written = absl::InternalError(absl::StrCat("saving ", dir, ": ", e.what()));
    }
  }
  TY_RETURN_IF_ERROR(AgreeAcrossRanks(collective_, written, absl::StrCat("saving ", dir)));
  last_saved_ = dir;
  spdlog::info("interactive: saved {}", dir);
  return dir;
}

absl::StatusOr<InteractiveModel::Batches> GetBatchesFromTask(const TaskRegistry& registry,
                                                             const std::string& task_or_mixture,
                                                             const std::string& split, int batch_size,
                                                             int num_batches, bool pretokenized,
                                                             const FeatureLengths* sequence_length,
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
    return absl::OutOfRangeError(absl::StrCat("task ", task_or_mixture, " split ", split, " has ", taken,
                                              " examples; ", num_batches, " batches of ", batch_size, " need ",
                                              wanted));
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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const NaturalExample& e : prepared) {
      out << nlohmann::json({{"inputs", e.input}, {"targets", *e.target}}).dump() << "\n";
    }
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError(absl::StrCat("cannot rename to ", path));
  TaskDefinition def;
  def.set_name(name);
  const std::string absolute = std::filesystem::absolute(path).string();
  for (const char* split : {"train", "validation", "test"}) (*def.mutable_splits())[split] = absolute;
  if (!model.options().vocabulary_path.empty()) {
    def.set_vocabulary(std::filesystem::absolute(model.options().vocabulary_path).string());
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
  if (!training) {
    spec.mutable_inference()->set_split("validation");
    spec.mutable_inference()->set_max_decode_length(static_cast<int32_t>(model.options().decode.max_decode_length));
  }
  return spec;
}

}  // namespace trainyard
