// T5X's InteractiveModel in C++: train, predict, score and evaluate a model
// on natural-text examples in-process, for trying a model on a handful of
// strings before running batch jobs.
//
// An example is an input string (for inference) or an {input, target} pair.
// Examples go through the optional text preprocessors, are tokenised with
// the vocabulary, go through the optional token preprocessors (span
// corruption, prefix LM: InteractivePreprocessors), get EOS when add_eos,
// are truncated to the feature lengths (counted and reported as
// truncated_examples), and are batched unpacked, `batch_size` at a time, in
// order.
//
//   InteractiveModelOptions options;
//   options.output_dir = "runs/try";
//   options.model.set_preset("tiny");
//   auto model = InteractiveModel::Create(options);
//   (*model)->TrainStep(examples);
//   (*model)->PredictWithAux({NaturalExample("123")});
//
// The partitioner is data-parallel over `options.collective` (T5X's
// multi-host convention: every rank runs the same program): every rank
// creates the model with the same options and calls the same methods with
// the same examples. Each rank takes its share of every batch's rows
// (batch_size / world_size, contiguous), gradients are all-reduced, and
// predictions and scores are all-gathered, so every rank returns the full
// results. Rank 0 writes checkpoints and summaries. Without a collective it
// is this process alone.
//
// Thread-safety: one thread drives an InteractiveModel.
#ifndef TRAINYARD_INTERACTIVE_INTERACTIVE_MODEL_H_
#define TRAINYARD_INTERACTIVE_INTERACTIVE_MODEL_H_

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/collective.h"
#include "data/task.h"
#include "data/vocabulary.h"
#include "evaluation/metric_fns.h"
#include "job/training_job.h"
#include "model/decoding.h"
#include "model/encoder_decoder_model.h"
#include "proto/job.pb.h"
#include "trainer/optimizer.h"
#include "trainer/task_batches.h"  // DecodeRow
#include "trainer/trainer.h"

namespace trainyard {

struct NaturalExample {
  NaturalExample(std::string input) : input(std::move(input)) {}  // NOLINT: a string is an example
  NaturalExample(const char* input) : input(input) {}             // NOLINT
  NaturalExample(std::string input, std::string target) : input(std::move(input)), target(std::move(target)) {}

  std::string input;
  std::optional<std::string> target;
};

// T5X's InferenceType.
enum class InferenceType { kScore, kPredictWithAux };

// Applied to each prediction and each target before the metric functions
// (seqio's postprocess_fn); `is_target` says which.
using Postprocessor = std::function<std::string(const std::string& text, bool is_target)>;

struct InteractiveModelOptions {
  // Where the parameters live (common/torch/device.h); examples and results stay
  // on the host.
  torch::Device device = torch::kCPU;
  int batch_size = 8;
  FeatureLengths task_feature_lengths;  // inputs and targets, in tokens; both required
  // Checkpoints and train summaries; may be empty for a model only used
  // for inference from a SPECIFIC checkpoint (then SaveCheckpoint fails).
  std::string output_dir;
  // A preset or an explicit config; unset with a SPECIFIC restore.path:
  // the checkpoint's own model.
  ModelSpec model;
  Dtype dtype = FLOAT32;  // compute dtype (parameters stay float32)
  // Where the initial state comes from (T5X's restore_mode and
  // checkpoint_path): LATEST (default: the newest good checkpoint under
  // `restore.path`, else output_dir; none means a fresh model), SPECIFIC
  // (`restore.path` or `restore.step`), or NONE; assignment_map and strict
  // as in job specs.
  RestoreConfig restore;
  uint64_t init_random_seed = 42;  // parameters and dropout
  bool add_eos = true;
  // A SentencePiece model; empty: the restored checkpoint's vocabulary, or
  // without one the bundled digits_to_words vocabulary. A checkpoint that
  // carries another vocabulary than the one named here is refused
  // (kInvalidArgument naming both files): its model's ids are its own
  // vocabulary's (data/vocabulary_choice.h).
  std::string vocabulary_path;
  // Sentinel ids <extra_id_0>, <extra_id_1>, ... appended to
  // vocabulary_path's pieces: what span_corruption needs (T5's vocabularies
  // have 100). Only with vocabulary_path.
  int vocabulary_extra_ids = 0;
  OptimizerConfig optimizer;           // default: Adafactor
  LearningRateSchedule learning_rate;  // default: constant 0.01
  LossConfig loss;
  int num_microbatches = 1;
  // Decoding for predictions; max_decode_length 0 means the targets length.
  DecodeOptions decode = [] {
    DecodeOptions d;
    d.max_decode_length = 0;
    return d;
  }();
  // Set to request a stop (e.g. from a SIGTERM handler): a train step in
  // progress stops and an emergency checkpoint is written. With several
  // ranks, a request on any rank stops all of them after the same step.
  const std::atomic<bool>* preemption_requested = nullptr;
  // The data-parallel group (not owned; outlives the model); nullptr: this
  // process alone. batch_size must be a multiple of its world size.
  Collective* collective = nullptr;
};

// Predictions and/or scores of a list of examples, in their order.
struct Inference {
  std::vector<std::string> inputs;       // after preprocessing
  std::vector<std::string> targets;      // after preprocessing ("" without one)
  std::vector<std::string> predictions;  // PREDICT_WITH_AUX
  std::vector<double> scores;            // SCORE: log-likelihood of the target
  AuxValues aux;                         // PREDICT_WITH_AUX: "scores" of the predictions
  int64_t truncated_examples = 0;        // inputs or targets cut to the feature lengths
};

// What the *WithPreprocessors methods run on each example, in the order of
// T5X's preprocessor lists (seqio's preprocessors, tokenize, token-level
// ones such as span corruption, append_eos): the text preprocessors on its
// strings (they may drop it), tokenisation with the model's vocabulary, the
// token preprocessors on its ids, then EOS when add_eos. The token
// preprocessors are the data pipeline's (data/task.h: SpanCorruption,
// PrefixLm, or by name TokenPreprocessorByName; span corruption needs a
// vocabulary with extra ids, see vocabulary_extra_ids) or any
// TokenPreprocessor. They make the inputs and targets from the target's
// ids, so every example needs a target, and its input may be empty.
//
// Example i of a call (its position among the examples given) draws its
// random numbers as the data pipeline's example i of an unshuffled split
// does in the epoch equal to the model's step, with init_random_seed as
// the seed (ExampleSeed): a call is reproducible, every rank draws the
// same, and repeated train steps on the same examples see new noise. An
// example stays one row: documents are not split into segments as the
// pipeline's split_tokens does (a long one is cut to the feature lengths
// and counted in truncated_examples). The results' inputs and targets are
// then the token ids decoded (sentinels as <extra_id_N>), and Evaluate's
// metric functions compare predictions with those targets.
//
// A list of text preprocessors converts to one.
struct InteractivePreprocessors {
  InteractivePreprocessors() = default;
  InteractivePreprocessors(std::vector<Preprocessor> text) : text(std::move(text)) {}  // NOLINT: a list is one
  InteractivePreprocessors(std::initializer_list<Preprocessor> text) : text(text) {}   // NOLINT
  InteractivePreprocessors(std::vector<Preprocessor> text, std::vector<TokenPreprocessor> tokens)
      : text(std::move(text)), tokens(std::move(tokens)) {}

  std::vector<Preprocessor> text;
  std::vector<TokenPreprocessor> tokens;
};

// What TrainLoop returns: the last evaluation's results (T5X's return
// value), and when every evaluation ran.
struct TrainLoopResult {
  Inference predictions;  // every predict batch's, in order (empty if none)
  Inference scores;       // every score batch's, in order
  MetricResults metrics;  // over every eval batch's examples together
  // The model's step at each evaluation, in order.
  std::vector<int64_t> evaluated_steps;
};

class InteractiveModel {
 public:
  // kInvalidArgument naming the option for bad options; restore errors as
  // in job specs (kDataLoss for damaged checkpoints, kNotFound for a
  // missing SPECIFIC one). With a collective, every rank succeeds or every
  // rank fails (kAborted naming the ranks that failed, on the others), and
  // every rank starts from rank 0's parameters.
  static absl::StatusOr<std::unique_ptr<InteractiveModel>> Create(InteractiveModelOptions options);
  ~InteractiveModel();

  // One training step on the first batch_size examples (each needs a
  // target); kInvalidArgument naming both numbers when fewer are given.
  // Returns the step's train summary (loss, accuracy, learning rate, data
  // counts). A preemption request stops the step: the emergency checkpoint
  // of the last completed step is written and kAborted names it.
  absl::StatusOr<MetricResults> TrainStep(const std::vector<NaturalExample>& examples);
  absl::StatusOr<MetricResults> TrainStepWithPreprocessors(const std::vector<NaturalExample>& examples,
                                                           const InteractivePreprocessors& preprocessors);
  // With a collective, each rank's iterator yields that rank's rows.
  absl::StatusOr<MetricResults> TrainStepFromBatchIterator(BatchIterator* iterator);

  // SCORE: the log-likelihood of each target given its input (targets
  // required); PREDICT_WITH_AUX: decoded predictions and their scores.
  // `decode` overrides the options' decoding.
  absl::StatusOr<Inference> InferWithPreprocessors(InferenceType mode, const std::vector<NaturalExample>& examples,
                                                   const InteractivePreprocessors& preprocessors,
                                                   const DecodeOptions* decode = nullptr);
  absl::StatusOr<Inference> PredictWithAux(const std::vector<NaturalExample>& examples);
  absl::StatusOr<std::vector<double>> Score(const std::vector<NaturalExample>& examples);

  // Runs what the metric functions need (predictions, scores) and merges
  // their values; a metric name returned twice is kInvalidArgument.
  absl::StatusOr<MetricResults> Evaluate(const std::vector<NaturalExample>& examples,
                                         const std::vector<MetricFn>& metric_fns);
  absl::StatusOr<MetricResults> EvaluateWithPreprocessors(const std::vector<NaturalExample>& examples,
                                                          const InteractivePreprocessors& preprocessors,
                                                          const std::vector<MetricFn>& metric_fns,
                                                          const Postprocessor& postprocessor = nullptr);

  // T5X's train_loop: num_steps iterations. Iteration i (from 0) trains on
  // train batch i mod the list's length (a list longer than num_steps is
  // cut to its first num_steps; an empty list skips training), then, when
  // i % eval_period == 0, evaluates: predicts every predict batch, scores
  // every score batch and evaluates every eval batch, in order. As in T5X
  // the first evaluation follows the first step, the next ones every
  // eval_period steps after it (steps 1, 1 + eval_period, ...), so the final
  // step is evaluated only when (num_steps - 1) % eval_period == 0.
  //
  // Deliberately unlike T5X:
  //  - A list shorter than num_steps cycles to exactly num_steps batches.
  //    T5X repeats the list num_steps / length times (integer division), so
  //    3 batches for 7 steps ran 6 steps.
  //  - The result holds every batch of the last evaluation, and its metrics
  //    are computed over all eval batches' examples at once. T5X overwrites
  //    its results batch after batch, returning the last batch's only.
  //  - eval_batches without metric functions is kInvalidArgument (T5X fails
  //    inside evaluate).
  // kInvalidArgument for num_steps or eval_period < 1.
  using Batches = std::vector<std::vector<NaturalExample>>;
  absl::StatusOr<TrainLoopResult> TrainLoop(int num_steps, int eval_period, const Batches& train_batches,
                                            const Batches& predict_batches, const Batches& score_batches,
                                            const Batches& eval_batches, const std::vector<MetricFn>& metric_fns);

  // Writes output_dir/checkpoint_<step> (a training checkpoint: parameters,
  // optimizer state, metadata with the equivalent job spec) and returns its
  // path; the existing one if this step was saved already.
  absl::StatusOr<std::string> SaveCheckpoint();

  int64_t step() const;
  // The job spec this session corresponds to (as a batch job would run it).
  const JobSpec& job_spec() const { return spec_; }
  const InteractiveModelOptions& options() const { return options_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  EncoderDecoderModel& model() { return *job_->model(); }

  // Tokenised, truncated, batched examples (exposed for tests and for the
  // batch iterator helpers): rows in the examples' order, through
  // `token_preprocessors` as InteractivePreprocessors describes.
  absl::StatusOr<T5Batch> MakeBatch(const std::vector<NaturalExample>& examples, bool need_targets, int64_t* truncated,
                                    const std::vector<TokenPreprocessor>& token_preprocessors = {}) const;
  // The examples after the text preprocessors (dropped ones left out).
  absl::StatusOr<std::vector<NaturalExample>> Preprocess(const std::vector<NaturalExample>& examples,
                                                         const std::vector<Preprocessor>& preprocessors) const;

 private:
  InteractiveModel() = default;
  static absl::StatusOr<std::unique_ptr<InteractiveModel>> CreateOnThisRank(InteractiveModelOptions options);
  absl::StatusOr<MetricResults> TrainOnBatch(BatchIterator* batches);
  // Decodes or scores one batch of at most batch_size rows: this rank's
  // share, then gathered from every rank, in row order. `keys`: each row's
  // example's index in the call (its sampling key: the same text on any
  // number of ranks).
  absl::Status InferBatch(const T5Batch& batch, const std::vector<uint64_t>& keys, bool score,
                          const DecodeOptions& options, Inference* out);
  // Examples after the text preprocessors, with the index of each in the
  // call (its token preprocessors' seed).
  struct Prepared {
    std::vector<NaturalExample> examples;
    std::vector<int64_t> indices;
  };
  static Prepared Unpreprocessed(const std::vector<NaturalExample>& examples);
  // Rows of prepared examples [begin, end) through the token preprocessors;
  // what the model reads as text appended to texts->inputs and ->targets
  // when given.
  absl::StatusOr<T5Batch> MakeRows(const Prepared& prepared, size_t begin, size_t end, bool need_targets,
                                   const std::vector<TokenPreprocessor>& tokens, int64_t* truncated,
                                   Inference* texts) const;
  absl::StatusOr<Inference> InferPrepared(InferenceType mode, const Prepared& prepared,
                                          const std::vector<TokenPreprocessor>& tokens, const DecodeOptions* decode);
  // Evaluate over several batches: each batch decoded and/or scored as the
  // metric functions need, the metrics computed once over all their rows.
  absl::StatusOr<MetricResults> EvaluateBatches(const std::vector<Prepared>& batches,
                                                const std::vector<TokenPreprocessor>& tokens,
                                                const std::vector<MetricFn>& metric_fns,
                                                const Postprocessor& postprocessor);
  int rank() const { return collective_->rank(); }
  int world_size() const { return collective_->world_size(); }

  InteractiveModelOptions options_;
  JobSpec spec_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::unique_ptr<LocalCollective> own_collective_;  // without options.collective
  Collective* collective_ = nullptr;
  std::unique_ptr<TrainingJob> job_;  // the model, optimizer and trainer; after the collective it uses
  std::string last_saved_;
};

// Helpers of T5X's interactive_model module.

// num_batches batches of batch_size examples of a task's split, in the
// split's order (or shuffled by `shuffle_seed`), after its text
// preprocessors, as natural text (pretokenized) — or, with
// pretokenized false, as the token ids decoded back to text (what the model
// sees after truncation to sequence_length). kNotFound for an unknown task
// (listing the registered ones); kOutOfRange when the split has fewer
// examples than asked for.
absl::StatusOr<InteractiveModel::Batches> GetBatchesFromTask(const TaskRegistry& registry,
                                                             const std::string& task_or_mixture,
                                                             const std::string& split, int batch_size, int num_batches,
                                                             bool pretokenized = true,
                                                             const FeatureLengths* sequence_length = nullptr,
                                                             std::optional<uint64_t> shuffle_seed = std::nullopt);

// T5X's get_dataset_from_natural_text_examples: the examples (after the
// preprocessors), tokenised with `vocabulary` (EOS appended when add_eos),
// cut to the feature lengths and batched unpacked in order, batch_size at a
// time (the last batch may be smaller), as a BatchIterator — e.g. for
// TrainStepFromBatchIterator. `need_targets`: every example must have one.
// Errors name the example.
absl::StatusOr<std::unique_ptr<BatchIterator>> GetDatasetFromNaturalTextExamples(
    const std::vector<NaturalExample>& examples, const std::vector<Preprocessor>& preprocessors,
    const FeatureLengths& task_feature_lengths, const Vocabulary& vocabulary, int batch_size, bool add_eos = true,
    bool need_targets = true);

// T5X's get_seqio_task_from_examples: writes the examples (after the
// preprocessors) to <output_dir>/tasks/<name>.jsonl and returns a task
// definition serving that file as its train, validation and test splits,
// with the model's vocabulary (a restored checkpoint's copied to
// <output_dir>/tasks/<name>.model) and the named built-in metric functions (a
// batch job runs in other processes: functions travel by name). With
// `add_to_registry`, registers the task there too. kInvalidArgument for a
// bad name, an example without a target, or an unknown metric function.
absl::StatusOr<TaskDefinition> GetTaskFromExamples(const std::string& name, const InteractiveModel& model,
                                                   const std::vector<NaturalExample>& examples,
                                                   const std::vector<Preprocessor>& preprocessors,
                                                   const std::vector<std::string>& metric_fns,
                                                   TaskRegistry* add_to_registry = nullptr);

// T5X's get_gin_config_from_interactive_model: the job spec that runs this
// interactive setup as a batch job (`trainyard submit` takes its text
// form): the model, feature lengths, batch size, optimizer, learning rate,
// loss, seed, dtype and decoding (`inference`: the options' method with its
// beam size and alpha, or temperature, top-k, top-p and seed, and
// max_decode_length; InferenceConfigFromDecodeOptions), on `task` (with
// `definition` included when given), unpacked and in the task's order as
// the interactive model reads it. Decoding options a job cannot run are
// kInvalidArgument naming the field.
// PRETRAINING starts from scratch with the same initialisation; FINETUNING,
// EVALUATION and INFERENCE start from the newest checkpoint under the
// model's output_dir (save one first: kFailedPrecondition otherwise);
// EVALUATION and INFERENCE read the task's validation split (a task from
// examples serves its examples there) and ignore train_steps. Output under
// <output_dir>/<kind in lowercase>.
absl::StatusOr<JobSpec> ExportJobSpec(const InteractiveModel& model, JobKind kind, const std::string& task,
                                      int64_t train_steps, const TaskDefinition* definition = nullptr);

}  // namespace trainyard

#endif  // TRAINYARD_INTERACTIVE_INTERACTIVE_MODEL_H_
